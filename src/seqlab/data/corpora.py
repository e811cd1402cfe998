"""One corpus interface over embedded files, Hugging Face hub datasets and local files.

Every source yields `Example(id, source, target)` per split. The data config
says where the text is: a `translation` dict with `src_lang`/`tgt_lang` codes
(iwslt2017, wmt14, the embedded Bible), or two columns (`article`/`highlights`,
`document`/`summary`).

JSON Lines (optionally gzip-compressed) and CSV/TSV are read by a strict
line-by-line reader so a malformed line is reported by file and line number;
Parquet and hub datasets go through `datasets`.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from seqlab.config import ConfigError, check_choice, check_types
from seqlab.constants import SPLITS
from seqlab.digest import file_digest

log = logging.getLogger(__name__)
SourceKind = Literal["embedded", "hub", "files"]
Task = Literal["translation", "summarization"]
DATA_DIR_ENV = "SEQLAB_DATA_DIR"


def embedded_dir() -> Path:
    """Where the embedded corpora live: $SEQLAB_DATA_DIR, else the checkout's data/ folder."""
    return Path(os.environ.get(DATA_DIR_ENV) or Path(__file__).resolve().parents[3] / "data")
FILE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".csv", ".tsv", ".parquet")


class CorpusError(ValueError):
    """A corpus that cannot be read; the message names the file, line and field."""


@dataclass(frozen=True)
class Example:
    id: str
    source: str
    target: str
    extra_references: tuple[str, ...] = ()  # further references of the target, for evaluation

    @property
    def references(self) -> tuple[str, ...]:
        return (self.target, *self.extra_references)


@dataclass(frozen=True)
class CorpusConfig:
    """Where a corpus lives and which fields hold source and target text.

    kind=embedded: `path` is a folder under the project's data/ (or absolute) with
      `<split>.jsonl.gz` files. kind=files: `files` maps split -> local file.
    kind=hub: `path` is a hub name (or a local folder in the hub's layout),
      `hub_config` its configuration, `split_names` maps our split names to its own.
    """

    name: str
    kind: SourceKind
    task: Task
    path: str = ""
    hub_config: str | None = None
    revision: str | None = None  # hub branch/tag/commit, e.g. refs/convert/parquet for script-based datasets
    files: Mapping[str, str] = field(default_factory=dict)
    split_names: Mapping[str, str] = field(default_factory=dict)
    src_lang: str | None = None
    tgt_lang: str | None = None
    src_field: str | None = None
    tgt_field: str | None = None
    id_field: str | None = "id"
    # Further reference fields read for evaluation (in the `translation` dict, or columns), e.g. ["en-kjv"].
    extra_reference_fields: tuple[str, ...] = ()
    # kind=hub: read rows as `datasets` streams them, without downloading the whole corpus first.
    streaming: bool = False

    def __post_init__(self) -> None:
        check_types(self, "data.corpus")
        for name in ("files", "split_names"):
            unknown = sorted(set(getattr(self, name)) - set(SPLITS))
            if unknown:
                raise ConfigError(f"data.corpus.{name} has unknown split(s) {unknown}; use {list(SPLITS)}")
        check_choice("data.corpus", "kind", self.kind, SourceKind)
        check_choice("data.corpus", "task", self.task, Task)
        by_lang = self.src_lang is not None and self.tgt_lang is not None
        by_field = self.src_field is not None and self.tgt_field is not None
        if by_lang == by_field:
            raise ConfigError(
                f"data.corpus ({self.name}): set either src_lang and tgt_lang (a `translation` dict) "
                "or src_field and tgt_field (two columns), not both or neither"
            )
        if self.kind == "files" and not self.files:
            raise ConfigError(f"data.corpus.files ({self.name}) must map split names to files for kind=files")
        if self.streaming and self.kind != "hub":
            raise ConfigError(f"data.corpus.streaming=true ({self.name}) applies to kind=hub; local files and the "
                              "embedded corpora are always read as a stream")
        if self.kind != "files" and not self.path:
            raise ConfigError(f"data.corpus.path ({self.name}) is required for kind={self.kind}")

    def text_fields(self) -> tuple[str, str]:
        """Human-readable names of the source and target fields, for messages."""
        if self.src_lang is not None:
            return f"translation.{self.src_lang}", f"translation.{self.tgt_lang}"
        return str(self.src_field), str(self.tgt_field)

    def fingerprint(self, memo_dir: Path | None = None) -> dict[str, Any]:
        """What identifies the corpus contents, for cache keys; `memo_dir` keeps the files' digests between
        processes (digest.file_digest)."""
        files = {s: _stat(self.resolve_file(s), memo_dir) for s in self.files} if self.kind == "files" else {}
        embedded = {s: _stat(self.embedded_file(s), memo_dir) for s in SPLITS} if self.kind == "embedded" else {}
        return {"name": self.name, "kind": self.kind, "path": self.path, "hub_config": self.hub_config,
                "revision": self.revision,
                "fields": self.text_fields(), "files": files, "embedded": embedded}

    def embedded_file(self, split: str) -> Path:
        root = Path(self.path) if Path(self.path).is_absolute() else embedded_dir() / self.path
        return root / f"{split}.jsonl.gz"

    def resolve_file(self, split: str) -> Path:
        if split not in self.files:
            raise CorpusError(f"corpus {self.name}: no file for split '{split}' in data.corpus.files")
        return Path(self.files[split]).expanduser()


def _stat(path: Path, memo_dir: Path | None = None) -> list[Any]:
    """A file's identity for cache keys: its path and a hash of its contents (not size and mtime)."""
    return [str(path), file_digest(path, memo_dir)] if path.exists() else [str(path)]


def load_split(cfg: CorpusConfig, split: str) -> list[Example]:
    """All examples of one split; raises CorpusError naming file, line and field."""
    examples = list(iter_split(cfg, split))
    warn_duplicate_ids(examples, split_location(cfg, split))
    return examples


def iter_split(cfg: CorpusConfig, split: str) -> Iterator[Example]:
    """The examples of one split one at a time (memory does not grow with the corpus); raises
    CorpusError naming file, line and field, or the split if it is empty."""
    rows = _hub_rows(cfg, split) if cfg.kind == "hub" else read_rows(split_file(cfg, split), cfg.kind)
    empty = True
    for example in _from_rows(cfg, rows):
        empty = False
        yield example
    if empty:
        raise CorpusError(f"{split_location(cfg, split)}: split '{split}' of corpus {cfg.name} is empty; it needs at "
                          "least one example")


def split_file(cfg: CorpusConfig, split: str) -> Path:
    """The local file of a split (kind=embedded or files)."""
    return cfg.embedded_file(split) if cfg.kind == "embedded" else cfg.resolve_file(split)


def split_location(cfg: CorpusConfig, split: str) -> str:
    """The file or hub dataset a split is read from, for messages."""
    if cfg.kind == "hub":
        return f"hub dataset {cfg.path} ({cfg.hub_config}) split {cfg.split_names.get(split, split)}"
    return str(split_file(cfg, split))


def count_rows(cfg: CorpusConfig, split: str) -> int | None:
    """About how many rows a split has, cheaply (for progress and ETA only): the lines of a JSONL/TSV/CSV
    file, a Parquet file's row count; None where that needs the whole corpus (hub, streamed or not)."""
    if cfg.kind == "hub":
        return None
    path = split_file(cfg, split)
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        if name.endswith((".jsonl", ".jsonl.gz", ".tsv", ".csv")):
            with _open_bytes(path) as f:
                return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 22), b""))
    except (OSError, EOFError):
        return None  # the reader names the problem
    return None


def warn_duplicate_ids(examples: list[Example], where: str) -> int:
    """Log (not fail) repeated ids: results keyed by id would mix them up. Returns how many repeat."""
    seen: set[str] = set()
    repeated = [e.id for e in examples if e.id in seen or seen.add(e.id)]  # type: ignore[func-returns-value]
    if repeated:
        log.warning("%s: %d example ids are repeated (first: %r); ids should be unique", where, len(repeated),
                    repeated[0])
    return len(repeated)


def _hub_rows(cfg: CorpusConfig, split: str) -> Iterator[tuple[str, dict[str, Any]]]:
    import datasets  # slow import, only when a hub corpus is used

    hub_split = cfg.split_names.get(split, split)
    branch = Path(cfg.path) / (cfg.hub_config or "default") / hub_split  # the export names no config "default"
    if branch.is_dir():  # a local copy of a hub parquet-conversion branch: <config>/<split>/*.parquet
        dataset = datasets.load_dataset("parquet", data_files={hub_split: str(branch / "*.parquet")}, split=hub_split,
                                        streaming=cfg.streaming)
    else:
        extra = {"revision": cfg.revision} if cfg.revision else {}
        if cfg.streaming:
            extra["streaming"] = True
        dataset = datasets.load_dataset(cfg.path, cfg.hub_config, split=hub_split, **extra)
    where = f"hub dataset {cfg.path} ({cfg.hub_config}{', ' + cfg.revision if cfg.revision else ''}) split {hub_split}"
    for i, row in enumerate(dataset):
        yield f"{where} row {i}", row


def _from_rows(cfg: CorpusConfig, rows: Iterator[tuple[str, dict[str, Any]]]) -> Iterator[Example]:
    src_name, tgt_name = cfg.text_fields()
    for n, (where, row) in enumerate(rows):
        if cfg.src_lang is not None:
            pair = row.get("translation")
            if not isinstance(pair, dict):
                raise CorpusError(f"{where}: missing field 'translation' (a dict of language codes to text)")
            src, tgt = _text(pair, cfg.src_lang, where, src_name), _text(pair, cfg.tgt_lang, where, tgt_name)
        else:
            src, tgt = _text(row, cfg.src_field, where, src_name), _text(row, cfg.tgt_field, where, tgt_name)
        ident = row.get(cfg.id_field) if cfg.id_field else None
        holder = row.get("translation") if cfg.src_lang is not None else row
        extra = tuple(_text(holder, f, where, f) for f in cfg.extra_reference_fields)
        yield Example(id=str(ident) if ident is not None else str(n), source=src, target=tgt, extra_references=extra)


def _text(row: Mapping[str, Any], key: str | None, where: str, name: str) -> str:
    if key not in row:
        raise CorpusError(f"{where}: missing field '{name}' (fields present: {sorted(row)})")
    value = row[key]
    if not isinstance(value, str):
        raise CorpusError(f"{where}: field '{name}' must be text, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = f"U+{ord(value[err.start]):04X}"
        raise CorpusError(f"{where}: field '{name}' holds {bad} at character {err.start}, a lone surrogate that "
                          "is not text (often a broken JSON escape); fix or drop this line") from None
    return value


def read_rows(path: Path, cfg_kind: str = "files") -> Iterator[tuple[str, dict[str, Any]]]:
    """(location, row) pairs from a local JSONL/JSON/CSV/TSV/Parquet file."""
    if not path.exists():
        hint = (f"; the embedded corpora are in the project's data/ folder: point {DATA_DIR_ENV} at it "
                "(an installed, non-editable seqlab has no checkout around it)") if cfg_kind == "embedded" else ""
        raise CorpusError(f"{path}: file not found; check data.corpus.path / data.corpus.files{hint}")
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        yield from _jsonl_rows(path)
    elif name.endswith((".json", ".json.gz")):
        yield from _json_rows(path)
    elif name.endswith(".csv"):
        yield from _csv_rows(path)
    elif name.endswith(".tsv"):
        yield from _tsv_rows(path)
    elif name.endswith(".parquet"):
        import pyarrow.parquet as pq

        i = 0
        for record_batch in pq.ParquetFile(path).iter_batches(batch_size=8192):  # bounded memory
            for row in record_batch.to_pylist():
                yield f"{path} row {i}", row
                i += 1
    else:
        raise CorpusError(f"{path}: unknown file type; use one of {list(FILE_SUFFIXES)}")


def _open_bytes(path: Path) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{where}: not valid UTF-8 (byte {err.start}); re-encode the file as UTF-8") from None


def _jsonl_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        with _open_bytes(path) as f:
            for lineno, raw in enumerate(f, start=1):
                where = f"{path}:{lineno}"
                line = _decode(raw, where).strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise CorpusError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
                if not isinstance(row, dict):
                    raise CorpusError(f"{where}: expected a JSON object per line, got {type(row).__name__}")
                yield where, row
    except (OSError, EOFError) as err:
        raise unreadable(path, err) from None


def unreadable(path: Path, err: Exception) -> CorpusError:
    return CorpusError(f"{path}: cannot be read ({err}); the file may be truncated or not gzip")


def _read_all(path: Path) -> bytes:
    """The whole (decompressed) file; a truncated gzip or unreadable file is named."""
    try:
        with _open_bytes(path) as f:
            return f.read()
    except (OSError, EOFError) as err:
        raise unreadable(path, err) from None


def _json_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    text = _decode(_read_all(path), str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CorpusError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    rows = data.get("data") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise CorpusError(f"{path}: expected a JSON list of objects, or an object with a 'data' list")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise CorpusError(f"{path} item {i}: expected a JSON object")
        yield f"{path} item {i}", row


def _read_lines(path: Path) -> list[str]:
    """The file's lines as text (a UTF-8 byte-order mark dropped); clear errors for bad bytes or gzip."""
    lines = [_decode(raw, f"{path}:{i}") for i, raw in enumerate(_read_all(path).split(b"\n"), start=1)]
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    return lines


def _csv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """CSV with RFC 4180 quoting (a field may hold commas, quotes and newlines)."""
    reader = csv.DictReader(io.StringIO("\n".join(_read_lines(path))), strict=True)
    try:
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if None in row or any(v is None for v in row.values()):
                raise CorpusError(f"{where}: wrong number of columns (header has {len(reader.fieldnames or [])})")
            yield where, row
    except csv.Error as err:
        raise CorpusError(f"{path}:{reader.line_num}: malformed CSV ({err}); check the quotes on this line") from None


def _tsv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Plain tab-separated text: no quoting, so quotes are kept and a row is exactly one line."""
    lines = _read_lines(path)
    header = lines[0].rstrip("\r").split("\t") if lines else []
    for lineno, line in enumerate(lines[1:], start=2):
        line = line.rstrip("\r")
        if not line:
            continue
        cells = line.split("\t")
        if len(cells) != len(header):
            raise CorpusError(f"{path}:{lineno}: {len(cells)} tab-separated columns, the header has {len(header)}")
        yield f"{path}:{lineno}", dict(zip(header, cells, strict=True))


def examples_from_text_files(source: Path | str, references: list[Path | str]) -> list[Example]:
    """A test set from plain text files, one segment per line: a source file and one or more reference
    files (several = several references per segment). Ids are line numbers from 1."""
    src_lines = _text_lines(Path(source))
    streams = [_text_lines(Path(r)) for r in references]
    if not streams:
        raise CorpusError(f"{source}: a source file needs at least one reference file (references=[...])")
    for path, lines in zip(references, streams, strict=True):
        if len(lines) != len(src_lines):
            raise CorpusError(f"{path} has {len(lines)} lines but {source} has {len(src_lines)}: every reference "
                              "file needs one line per source line")
    return [Example(str(i + 1), s, streams[0][i], tuple(st[i] for st in streams[1:]))
            for i, s in enumerate(src_lines)]


def _text_lines(path: Path) -> list[str]:
    lines = _decode(_read_all(path), str(path)).split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start another
    return [line.rstrip("\r") for line in lines]
