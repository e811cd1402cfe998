"""Corpus -> token ids on disk, as a stream: memory bounded at any corpus size, every core tokenizing.

A split is read CHUNK_PAIRS examples at a time; each chunk is tokenized by SentencePiece's batch
encoder on `threads` C++ threads, its over-long pairs dropped (translation) or cut (summarization)
pair by pair (`fit_chunk`, so chunks give what the whole split gives), and its ids appended to flat files. The finished
folder `<cache>/data-<key>/<split>/` appears with one rename, so nobody reads half a split, and two
processes preparing the same split at once end with one valid copy (the first rename wins; the
other discards its own). Training opens the folder memory-mapped: the token-budget sampler reads
the lengths, the DataLoader (and its workers, which share the pages) the ids.

The tokenizer's training sample is read the same way: one pass counts the texts, a second keeps the
ones `training_sample` would choose, so only the sample is ever in memory and the tokenizer is the
one a whole-corpus read gives.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import random
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from seqlab.constants import EOS_ID, TRAIN
from seqlab.data.config import DataConfig
from seqlab.data.corpora import Example, count_rows, iter_split
from seqlab.data.sequences import truncate
from seqlab.data.tokenizer import Tokenizer, TokenizerConfig
from seqlab.digest import cache_key
from seqlab.hardware import available_cores
from seqlab.progress import Progress

log = logging.getLogger(__name__)
CHUNK_PAIRS = 20_000  # examples tokenized at once: large enough to keep every core busy, small in memory
FORMAT = 2  # 2: a folder of flat int32 ids + int64 offsets per split (1 was one .npz per split)
SIDES = ("src", "tgt")
DIGEST_MEMO = "digests"  # under the cache folder: corpus file digests by file identity


class TokenizedSplit(Dataset):
    """Token ids of one split: per side, a flat int32 array and int64 offsets (pairs + 1).

    Opened from a prepared folder, the arrays are read-only memory maps; pickled (to a spawned
    DataLoader worker) it sends its folder, not its contents.
    """

    def __init__(self, src_flat: np.ndarray, src_off: np.ndarray, tgt_flat: np.ndarray, tgt_off: np.ndarray,
                 folder: Path | None = None) -> None:
        self.src_flat, self.src_off, self.tgt_flat, self.tgt_off = src_flat, src_off, tgt_flat, tgt_off
        self.folder = folder

    @classmethod
    def open(cls, folder: Path) -> TokenizedSplit:
        arrays = []
        for side in SIDES:
            flat = folder / f"{side}.bin"
            arrays += [np.memmap(flat, dtype=np.int32, mode="r") if flat.stat().st_size else np.zeros(0, np.int32),
                       np.load(folder / f"{side}_off.npy", mmap_mode="r")]
        return cls(*arrays, folder=folder)

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder} if self.folder is not None else dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        if set(state) == {"folder"}:
            self.__dict__.update(TokenizedSplit.open(state["folder"]).__dict__)
        else:
            self.__dict__.update(state)

    def __len__(self) -> int:
        return len(self.src_off) - 1

    def __getitem__(self, i: int) -> tuple[int, np.ndarray, np.ndarray]:
        return (i, np.asarray(self.src_flat[self.src_off[i]: self.src_off[i + 1]]),
                np.asarray(self.tgt_flat[self.tgt_off[i]: self.tgt_off[i + 1]]))

    @property
    def src_lens(self) -> np.ndarray:
        return np.diff(self.src_off)

    @property
    def tgt_lens(self) -> np.ndarray:
        return np.diff(self.tgt_off)


def _flatten(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


@dataclass
class LengthCounts:
    """What length handling did to a split (or a chunk of it)."""

    read: int = 0
    kept: int = 0
    long_src: int = 0  # sources over max_source_len (dropped with their pair, or cut)
    long_tgt: int = 0

    def add(self, other: LengthCounts) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)


def fit_chunk(src: list[list[int]], tgt: list[list[int]], cfg: DataConfig, eos_id: int = EOS_ID,
              drop: bool = False) -> tuple[list[list[int]], list[list[int]], LengthCounts]:
    """Summarization truncates long sources/targets (keeping the tokenizer's EOS last); translation, and any
    pair a tokenizer says must not be cut (`drop`: a causal LM's prompt and continuation), drops over-long pairs.
    Per pair, so chunks give what the whole split gives."""
    counts = LengthCounts(read=len(src), long_src=sum(len(s) > cfg.max_source_len for s in src),
                          long_tgt=sum(len(t) > cfg.max_target_len for t in tgt))
    if cfg.corpus.task == "summarization" and not drop:
        src = [truncate(s, cfg.max_source_len, eos_id) for s in src]
        tgt = [truncate(t, cfg.max_target_len, eos_id) for t in tgt]
    else:
        keep = [i for i, (s, t) in enumerate(zip(src, tgt, strict=True))
                if len(s) <= cfg.max_source_len and len(t) <= cfg.max_target_len]
        src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    counts.kept = len(src)
    return src, tgt, counts


def log_lengths(cfg: DataConfig, split: str, counts: LengthCounts) -> None:
    name = cfg.corpus.name
    if cfg.corpus.task == "summarization" and counts.kept == counts.read:
        if counts.long_src or counts.long_tgt:
            log.info("%s/%s: truncated %d sources to %d tokens and %d targets to %d tokens", name, split,
                     counts.long_src, cfg.max_source_len, counts.long_tgt, cfg.max_target_len)
    elif counts.kept < counts.read:
        log.info("%s/%s: dropped %d of %d pairs longer than %d/%d tokens", name, split, counts.read - counts.kept,
                 counts.read, cfg.max_source_len, cfg.max_target_len)


def chunks(examples: Iterable[Example], size: int = CHUNK_PAIRS) -> Iterator[list[Example]]:
    it = iter(examples)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def prefetched(items: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """`items`, produced by a background thread up to `depth` ahead.

    SentencePiece releases the GIL while it encodes, so reading and parsing the next chunk (Python)
    overlaps with tokenizing this one (C++ threads). An exception in the reader is raised here; if the
    consumer stops early, the reader stops at its next item.
    """
    slots: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(kind: str, value: Any) -> bool:
        while not stop.is_set():
            try:
                slots.put((kind, value), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in items:
                if not put("item", item):
                    return
            put("end", None)
        except BaseException as err:  # handed to the consumer, which raises it
            put("error", err)

    reader = threading.Thread(target=read, name="seqlab-prepare-reader", daemon=True)
    reader.start()
    try:
        while True:
            kind, value = slots.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        reader.join(timeout=5)


class SplitWriter:
    """Appends tokenized chunks to a folder: <side>.bin (int32 ids), <side>_len.bin while writing,
    <side>_off.npy (int64 offsets) and meta.json at the end."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        self.folder = folder
        self.files = {name: open(folder / name, "wb") for side in SIDES  # noqa: SIM115
                      for name in (f"{side}.bin", f"{side}_len.bin")}

    def add(self, src: list[list[int]], tgt: list[list[int]]) -> None:
        for side, seqs in zip(SIDES, (src, tgt), strict=True):
            flat, offsets = _flatten(seqs)
            self.files[f"{side}.bin"].write(flat.tobytes())
            self.files[f"{side}_len.bin"].write(np.diff(offsets).astype(np.int32).tobytes())

    def finish(self, meta: dict[str, Any]) -> None:
        for f in self.files.values():
            f.close()
        for side in SIDES:
            lengths_path = self.folder / f"{side}_len.bin"
            n = lengths_path.stat().st_size // 4
            offsets = np.lib.format.open_memmap(self.folder / f"{side}_off.npy", mode="w+", dtype=np.int64,
                                                shape=(n + 1,))
            offsets[0] = 0
            if n:
                np.cumsum(np.memmap(lengths_path, dtype=np.int32, mode="r"), out=offsets[1:], dtype=np.int64)
            offsets.flush()
            del offsets
            lengths_path.unlink()
        (self.folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        for name in os.listdir(self.folder):  # the data are on disk before the folder is published
            with open(self.folder / name, "rb") as f:
                os.fsync(f.fileno())

    def abort(self) -> None:
        for f in self.files.values():
            f.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def remove_abandoned(parent: Path, split: str) -> list[Path]:
    """Delete private folders that a killed preparation of `split` on this host left behind (their
    process is gone); another live process's folder is left alone."""
    removed = []
    host = socket.gethostname()
    for private in parent.glob(f".{split}.{host}.*.tmp") if parent.is_dir() else []:
        pid = private.name[len(f".{split}.{host}."):].split(".")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(private, ignore_errors=True)
            removed.append(private)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def corpus_identity(cfg: DataConfig) -> dict[str, Any]:
    """The corpus' fingerprint, its file digests memoized in the cache (a warm start reads no corpus file)."""
    return cfg.corpus.fingerprint(Path(cfg.cache_dir) / DIGEST_MEMO)


def split_folder(cfg: DataConfig, tokenizer: Tokenizer, split: str) -> Path:
    """Where a split's ids are cached: a key of every input that changes them."""
    key = cache_key({"corpus": corpus_identity(cfg), "tokenizer": tokenizer.digest,
                     "tok_cfg": asdict(cfg.tokenizer), "max": (cfg.max_source_len, cfg.max_target_len),
                     "task": cfg.corpus.task})
    return Path(cfg.cache_dir) / f"data-{key}" / split


def tokenized_split(cfg: DataConfig, tokenizer: Tokenizer, split: str, threads: int | None = None
                    ) -> TokenizedSplit:
    """A split's token ids, memory-mapped from the cache; prepared (streaming) on a miss."""
    folder = split_folder(cfg, tokenizer, split)
    if not (folder / "meta.json").is_file():
        prepare_split(cfg, tokenizer, split, folder, threads or cfg.prepare_threads or available_cores())
    return TokenizedSplit.open(folder)


def prepare_split(cfg: DataConfig, tokenizer: Tokenizer, split: str, folder: Path, threads: int) -> None:
    """Tokenize a split chunk by chunk into a private folder, then publish it with one rename."""
    remove_abandoned(folder.parent, split)
    private = folder.parent / f".{split}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    writer = SplitWriter(private)
    progress = Progress(count_rows(cfg.corpus, split), f"tokenizing {cfg.corpus.name}/{split} ({threads} threads)")
    counts, start = LengthCounts(), time.perf_counter()
    try:
        for chunk in prefetched(chunks(iter_split(cfg.corpus, split), CHUNK_PAIRS)):
            src = tokenizer.encode_source([e.source for e in chunk], threads)
            tgt = tokenizer.encode_target([e.target for e in chunk], threads)
            src, tgt, chunk_counts = fit_chunk(src, tgt, cfg, tokenizer.eos_id,
                                               getattr(tokenizer, "drops_long_pairs", False))
            writer.add(src, tgt)
            counts.add(chunk_counts)
            progress(len(chunk))
        seconds = time.perf_counter() - start
        writer.finish({"format": FORMAT, "split": split, **asdict(counts), "seconds": round(seconds, 3),
                       "threads": threads})
    except BaseException:
        writer.abort()
        raise
    finally:
        progress.close()
    log_lengths(cfg, split, counts)
    size = sum(p.stat().st_size for p in private.iterdir())
    try:
        os.rename(private, folder)  # atomic; fails if another process published this split first
    except OSError:
        if not (folder / "meta.json").is_file():
            raise
        shutil.rmtree(private, ignore_errors=True)
        log.info("another process published %s first; using that one", folder)
        return
    log.info("prepared %s/%s: %d of %d pairs in %.1f s (%.0f pairs/s, %d threads), %.1f MB on disk -> %s",
             cfg.corpus.name, split, counts.kept, counts.read, seconds, counts.read / max(seconds, 1e-9), threads,
             size / 1e6, folder)


def streamed_sample(cfg: DataConfig) -> tuple[list[str], list[str]]:
    """The tokenizer's training texts (sources, targets), read as a stream in two passes: equal to
    `training_sample` over the whole train split (joint: over sources followed by targets)."""
    tok: TokenizerConfig = cfg.tokenizer
    n_src = n_tgt = 0
    for e in iter_split(cfg.corpus, TRAIN):
        n_src += bool(e.source.strip())
        n_tgt += bool(e.target.strip())
    if tok.joint:
        chosen = _chosen(n_src + n_tgt, tok)
        src_chosen, tgt_chosen = chosen[chosen < n_src], chosen[chosen >= n_src] - n_src
    else:
        src_chosen, tgt_chosen = _chosen(n_src, tok), _chosen(n_tgt, tok)
    sources, targets = _Picker(src_chosen), _Picker(tgt_chosen)
    for e in iter_split(cfg.corpus, TRAIN):
        sources.offer(e.source)
        targets.offer(e.target)
    return sources.kept, targets.kept


class _Picker:
    """Keeps, in order, the texts at the `chosen` (sorted) positions among the non-empty texts offered."""

    def __init__(self, chosen: np.ndarray) -> None:
        self.chosen, self.kept = chosen, []
        self.seen = self.next = 0  # non-empty texts offered so far; position in `chosen`

    def offer(self, text: str) -> None:
        if not text.strip():
            return
        if self.next < len(self.chosen) and self.chosen[self.next] == self.seen:
            self.kept.append(text)
            self.next += 1
        self.seen += 1


def _chosen(n: int, cfg: TokenizerConfig) -> np.ndarray:
    """Sorted indices of the texts `training_sample` keeps out of n non-empty ones."""
    if n <= cfg.max_sentences:
        return np.arange(n, dtype=np.int64)
    return np.array(sorted(random.Random(cfg.seed).sample(range(n), cfg.max_sentences)), dtype=np.int64)


def load_tokenizer(cfg: DataConfig) -> Tokenizer:
    """The tokenizer for this corpus and settings: from cache, or trained on a stream of the train split."""
    sample: list[tuple[list[str], list[str]]] = []

    def texts(side: int) -> list[str]:
        if not sample:
            sample.append(streamed_sample(cfg))
        return sample[0][side]

    return Tokenizer.cached(Path(cfg.cache_dir), corpus_identity(cfg), lambda: texts(0), lambda: texts(1),
                            cfg.tokenizer)
