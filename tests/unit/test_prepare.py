"""Streaming preparation: the same ids, order and length counts as a whole-split read, memory-mapped,
published atomically, and a tokenizer sample equal to the whole-corpus one."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from seqlab.constants import TRAIN, VALIDATION
from seqlab.data import CorpusConfig, CorpusError, DataConfig, Tokenizer, TokenizerConfig, load_split
from seqlab.data import prepare as prep
from seqlab.data.datamodule import Seq2SeqDataModule
from seqlab.data.tokenizer import training_sample
from tests.unit.test_data import BIBLE, DEBIAN, write_hub_layout


def whole_split_reference(cfg: DataConfig, tok: Tokenizer, split: str):
    """What preparation gave before it streamed: every example in memory, one encode, one fit."""
    examples = load_split(cfg.corpus, split)
    src = tok.encode_source([e.source for e in examples])
    tgt = tok.encode_target([e.target for e in examples])
    return (*prep.fit_chunk(src, tgt, cfg),)


@pytest.fixture(scope="module")
def bible_tokenizer(tmp_path_factory):
    cfg = DataConfig(corpus=BIBLE, tokenizer=TokenizerConfig(vocab_size=500, max_sentences=3000),
                     cache_dir=str(tmp_path_factory.mktemp("tok")))
    return prep.load_tokenizer(cfg)


@pytest.mark.parametrize("corpus, max_len", [(BIBLE, 40), (DEBIAN, 64)], ids=["bible-drops", "debian-truncates"])
def test_streamed_split_equals_the_whole_split_read(tmp_path, monkeypatch, bible_tokenizer, corpus, max_len):
    monkeypatch.setattr(prep, "CHUNK_PAIRS", 997)  # many chunks, the last one short
    cfg = DataConfig(corpus=corpus, max_source_len=max_len, max_target_len=max_len, cache_dir=str(tmp_path))
    split = VALIDATION
    src, tgt, counts = whole_split_reference(cfg, bible_tokenizer, split)
    assert counts.kept < counts.read or counts.long_src  # the limit does something to this split
    data = prep.tokenized_split(cfg, bible_tokenizer, split, threads=2)
    assert len(data) == len(src)
    assert all(data[i][1].tolist() == src[i] and data[i][2].tolist() == tgt[i] for i in range(len(src)))
    meta = (prep.split_folder(cfg, bible_tokenizer, split) / "meta.json").read_text()
    for name in ("read", "kept", "long_src", "long_tgt"):
        assert f'"{name}": {getattr(counts, name)},' in meta
    assert isinstance(data.src_flat, np.memmap) and isinstance(data.tgt_off, np.memmap)


def test_one_thread_and_two_give_the_same_ids(tmp_path, bible_tokenizer):
    ids = []
    for threads in (1, 2):
        cfg = DataConfig(corpus=BIBLE, cache_dir=str(tmp_path / str(threads)))
        data = prep.tokenized_split(cfg, bible_tokenizer, VALIDATION, threads=threads)
        ids.append((np.array(data.src_flat).tobytes(), np.array(data.tgt_off).tobytes()))
    assert ids[0] == ids[1]


@pytest.mark.parametrize("joint", [True, False])
def test_streamed_tokenizer_sample_equals_the_whole_corpus_sample(joint):
    tok = TokenizerConfig(vocab_size=500, max_sentences=5000, joint=joint, seed=3)
    cfg = DataConfig(corpus=BIBLE, tokenizer=tok)
    examples = load_split(BIBLE, TRAIN)
    sources, targets = prep.streamed_sample(cfg)
    if joint:
        whole = training_sample([e.source for e in examples] + [e.target for e in examples], tok)
        assert sources + targets == whole and len(whole) == 5000
    else:
        assert sources == training_sample([e.source for e in examples], tok)
        assert targets == training_sample([e.target for e in examples], tok)


def test_a_split_pickles_as_its_folder(tmp_path, bible_tokenizer):
    """DataLoader workers started with spawn get the folder and map it again, not a copy of the ids."""
    data = prep.tokenized_split(DataConfig(corpus=BIBLE, cache_dir=str(tmp_path)), bible_tokenizer, VALIDATION)
    blob = pickle.dumps(data)
    assert len(blob) < 1000 < data.src_flat.nbytes
    back = pickle.loads(blob)
    assert back[5][1].tolist() == data[5][1].tolist() and len(back) == len(data)


def test_the_second_of_two_preparations_keeps_the_first(tmp_path, bible_tokenizer, caplog):
    """Two processes that both missed the cache: the one that publishes second discards its copy."""
    cfg = DataConfig(corpus=BIBLE, cache_dir=str(tmp_path))
    first = prep.tokenized_split(cfg, bible_tokenizer, VALIDATION)
    folder = prep.split_folder(cfg, bible_tokenizer, VALIDATION)
    published = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    with caplog.at_level(logging.INFO, logger="seqlab.data.prepare"):
        prep.prepare_split(cfg, bible_tokenizer, VALIDATION, folder, threads=1)  # as if it had started earlier
    assert "published" in caplog.text and "first" in caplog.text
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == published
    assert sorted(p.name for p in folder.parent.iterdir()) == [VALIDATION]  # no private folder left
    assert prep.TokenizedSplit.open(folder)[3][1].tolist() == first[3][1].tolist()


def test_a_killed_preparation_leaves_nothing_readable_and_is_cleaned_up(tmp_path, bible_tokenizer, monkeypatch):
    cfg = DataConfig(corpus=BIBLE, cache_dir=str(tmp_path))

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prep.SplitWriter, "finish", fail)
    with pytest.raises(KeyboardInterrupt):
        prep.tokenized_split(cfg, bible_tokenizer, VALIDATION)
    folder = prep.split_folder(cfg, bible_tokenizer, VALIDATION)
    assert not folder.exists() and list(folder.parent.iterdir()) == []
    # A process killed outright (no cleanup) leaves its private folder; the next preparation removes it.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    stale = folder.parent / f".{VALIDATION}.{socket.gethostname()}.{dead.stdout.strip()}.abcd.tmp"
    stale.mkdir()
    live = folder.parent / f".{VALIDATION}.{socket.gethostname()}.{os.getpid()}.efgh.tmp"
    live.mkdir()
    monkeypatch.undo()
    prep.tokenized_split(cfg, bible_tokenizer, VALIDATION)
    assert not stale.exists() and live.exists()


def test_prepare_data_tokenizes_once_and_setup_only_opens(tmp_path, monkeypatch):
    """Lightning runs prepare_data on one process per node; setup (every rank) must find the cache."""
    cfg = DataConfig(corpus=BIBLE, tokenizer=TokenizerConfig(vocab_size=400, max_sentences=2000),
                     cache_dir=str(tmp_path))
    calls = []
    real = prep.prepare_split
    monkeypatch.setattr(prep, "prepare_split", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    Seq2SeqDataModule(cfg).prepare_data()
    assert calls == [TRAIN, VALIDATION]
    module = Seq2SeqDataModule(cfg)
    module.setup("fit")
    assert calls == [TRAIN, VALIDATION] and len(module.splits[TRAIN]) > 1000


def test_hub_streaming_reads_the_same_examples(tmp_path):
    rows = {s: [{"translation": {"de": f"Satz {i}", "en": f"sentence {i}"}} for i in range(n)]
            for s, n in (("train", 7), ("test", 3))}
    root = write_hub_layout(tmp_path / "hub", "de-en", rows)
    cfgs = [CorpusConfig(name="h", kind="hub", task="translation", path=str(root), hub_config="de-en",
                         src_lang="de", tgt_lang="en", streaming=streaming) for streaming in (False, True)]
    got = [[(e.source, e.target) for e in prep.iter_split(c, TRAIN)] for c in cfgs]
    assert got[0] == got[1] == [(f"Satz {i}", f"sentence {i}") for i in range(7)]
    assert cfgs[0].fingerprint() == cfgs[1].fingerprint()  # the same contents, the same cache


def test_streaming_is_refused_for_local_files():
    from seqlab.config import ConfigError

    with pytest.raises(ConfigError, match="streaming=true"):
        CorpusConfig(name="x", kind="files", task="translation", files={"train": "a.jsonl"}, src_lang="a",
                     tgt_lang="b", streaming=True)


def test_row_counts_for_progress(tmp_path):
    assert prep.count_rows(BIBLE, VALIDATION) == len(load_split(BIBLE, VALIDATION))


def test_prefetched_keeps_order_and_raises_the_readers_error():
    assert list(prep.prefetched(iter(range(100)), depth=3)) == list(range(100))

    def broken():
        yield 1
        raise CorpusError("data.jsonl:2: not valid JSON")

    got = []
    with pytest.raises(CorpusError, match="data.jsonl:2"):
        for x in prep.prefetched(broken()):
            got.append(x)
    assert got == [1]
    early = prep.prefetched(iter(range(10**6)), depth=2)
    assert next(early) == 0
    early.close()  # the reader stops instead of reading the rest


def test_loaders_pin_batches_only_when_they_go_to_a_gpu(tmp_path):
    """Pinned memory lets a batch's copy to the GPU overlap the step before it; on a CPU it only costs."""
    from types import SimpleNamespace

    def on(device: str) -> SimpleNamespace:
        return SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))

    module = Seq2SeqDataModule(DataConfig(corpus=BIBLE, cache_dir=str(tmp_path)))
    assert module.pinned() is False  # no trainer: nowhere to copy to
    module.trainer = on("cpu")
    assert module.pinned() is False
    module.trainer = on("cuda")
    assert module.pinned() is True
    module.cfg = DataConfig(corpus=BIBLE, cache_dir=str(tmp_path), pin_memory=False)
    assert module.pinned() is False
