"""Corpora (embedded, hub layout, local files), tokenizer round trip, token-budget batching, bad input."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from seqlab.data import CorpusConfig, CorpusError, Tokenizer, TokenizerConfig, load_split
from seqlab.data.batching import TokenBudgetBatchSampler
from seqlab.data.corpora import embedded_dir

BIBLE = CorpusConfig(name="bible", kind="embedded", task="translation", path="bible_es_en",
                     src_lang="es", tgt_lang="en")
DEBIAN = CorpusConfig(name="debian", kind="embedded", task="summarization", path="debian_pkg_summaries",
                      src_field="document", tgt_field="summary")


def documented_sizes() -> dict[tuple[str, str], int]:
    rows = re.findall(r"^\| (\w+) \| (\w+) \| (\d+) \|$", (embedded_dir() / "DATA.md").read_text(), re.M)
    return {(corpus, split): int(n) for corpus, split, n in rows}


@pytest.mark.parametrize("corpus", [BIBLE, DEBIAN], ids=["bible", "debian"])
def test_embedded_split_sizes_match_data_md(corpus):
    sizes = documented_sizes()
    for split in ("train", "validation", "test"):
        assert len(load_split(corpus, split)) == sizes[(corpus.path, split)]


def write_hub_layout(root: Path, config: str, rows: dict[str, list[dict]]) -> Path:
    """A local folder laid out like a hub dataset repository: README configs + parquet shards."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = ["---", "configs:", f"- config_name: {config}", "  data_files:"]
    for split, split_rows in rows.items():
        (root / config).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(split_rows), root / config / f"{split}-00000-of-00001.parquet")
        lines += [f"  - split: {split}", f"    path: {config}/{split}-*"]
    (root / "README.md").write_text("\n".join([*lines, "---", ""]))
    return root


def test_iwslt2017_layout_loads_through_the_hub_path(tmp_path):
    rows = {s: [{"translation": {"de": f"Hallo Welt {i}", "en": f"Hello world {i}"}} for i in range(n)]
            for s, n in (("train", 5), ("validation", 2), ("test", 3))}
    root = write_hub_layout(tmp_path / "iwslt2017", "iwslt2017-de-en", rows)
    cfg = CorpusConfig(name="iwslt", kind="hub", task="translation", path=str(root),
                       hub_config="iwslt2017-de-en", src_lang="de", tgt_lang="en")
    test = load_split(cfg, "test")
    assert [(e.source, e.target) for e in test] == [(f"Hallo Welt {i}", f"Hello world {i}") for i in range(3)]


def test_cnn_dailymail_layout_loads_through_the_hub_path(tmp_path):
    rows = {s: [{"article": f"Article {i}. More.", "highlights": f"Point {i}.\nPoint two.", "id": f"x{i}"}
                for i in range(4)] for s in ("train", "validation", "test")}
    root = write_hub_layout(tmp_path / "cnn_dailymail", "3.0.0", rows)
    cfg = CorpusConfig(name="cnn", kind="hub", task="summarization", path=str(root), hub_config="3.0.0",
                       src_field="article", tgt_field="highlights")
    val = load_split(cfg, "validation")
    assert val[1].id == "x1" and val[1].target == "Point 1.\nPoint two."


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".tsv", ".parquet", ".json"])
def test_local_files(tmp_path, suffix):
    rows = [{"id": str(i), "document": f"doc {i}, with comma", "summary": f"sum {i}"} for i in range(3)]
    path = tmp_path / f"train{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".json":
        path.write_text(json.dumps(rows))
    elif suffix in (".csv", ".tsv"):
        import csv

        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t" if suffix == ".tsv" else ",")
            w.writeheader()
            w.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    cfg = CorpusConfig(name="local", kind="files", task="summarization", files={"train": str(path)},
                       src_field="document", tgt_field="summary")
    assert [e.source for e in load_split(cfg, "train")] == [r["document"] for r in rows]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"document": "a", "summary": "b"}\n{not json}\n', "bad.jsonl.gz:2: not valid JSON"),
        (b'{"document": "a", "summary": "b"}\n{"document": "c"}\n', "bad.jsonl.gz:2: missing field 'summary'"),
        (b'{"document": "a", "summary": "b"}\n{"document": "\xff\xfe", "summary": "x"}\n',
         "bad.jsonl.gz:2: not valid UTF-8"),
        (b"", "is empty"),
        (b'{"document": 3, "summary": "b"}\n', "bad.jsonl.gz:1: field 'document' must be text"),
    ],
    ids=["not-json", "missing-field", "not-utf8", "empty-split", "wrong-type"],
)
def test_bad_input_names_file_line_and_field(tmp_path, content, message):
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(gzip.compress(content))
    cfg = CorpusConfig(name="bad", kind="files", task="summarization", files={"train": str(path)},
                       src_field="document", tgt_field="summary")
    with pytest.raises(CorpusError) as err:
        load_split(cfg, "train")
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_truncated_gzip_is_reported(tmp_path):
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"document": "a", "summary": "b"}\n' * 200)[:60])
    cfg = CorpusConfig(name="cut", kind="files", task="summarization", files={"train": str(path)},
                       src_field="document", tgt_field="summary")
    with pytest.raises(CorpusError, match="truncated"):
        load_split(cfg, "train")


@pytest.fixture(scope="module")
def bible_tokenizer() -> Tokenizer:
    train = load_split(BIBLE, "train")
    return Tokenizer.train([e.source for e in train], [e.target for e in train],
                           TokenizerConfig(vocab_size=8000, max_sentences=30000))


def test_tokenizer_round_trip_on_validation(bible_tokenizer):
    val = load_split(BIBLE, "validation")
    total = same = 0
    for e in val:
        for text, ids, decode, side in (
            (e.source, bible_tokenizer.encode_source([e.source])[0], bible_tokenizer.decode_source, "src"),
            (e.target, bible_tokenizer.encode_target([e.target])[0], bible_tokenizer.decode_target, "tgt"),
        ):
            total += 1
            same += decode(ids) == bible_tokenizer.normalize(text, side)
    assert same / total >= 0.999


def test_tokenizer_odd_text(bible_tokenizer):
    for text in ["", "🙂 emoji 🚀", "שלום עולם", "مرحبا بالعالم and English", "混合 scripts ñ"]:
        ids = bible_tokenizer.encode_target([text])[0]
        assert bible_tokenizer.decode_target(ids) == bible_tokenizer.normalize(text)


def sampler(src, tgt, max_tokens=64, **kw):
    return TokenBudgetBatchSampler(np.array(src), np.array(tgt), max_tokens, seed=3, **kw)


def test_batches_respect_budget_and_cover_each_example_once():
    rng = np.random.default_rng(0)
    src = rng.integers(1, 30, 500)
    tgt = np.clip(src + rng.integers(-3, 4, 500), 1, 30)  # target lengths follow source lengths, as in MT
    s = sampler(src, tgt)
    for epoch in (0, 1):
        s.set_epoch(epoch)
        batches = list(s)
        seen = [i for b in batches for i in b]
        assert sorted(seen) == list(range(500))
        assert all(len(b) * max(max(src[b]), max(tgt[b])) <= 64 for b in batches)
    s.set_epoch(0)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first
    s.set_epoch(0)
    assert list(s) == first, "order must be reproducible from seed and epoch"
    # Length bucketing pads far less than batches of the same sizes in random order.
    order = rng.permutation(500)
    sizes = [len(b) for b in s.epoch_batches(0)]
    chunks = np.split(order, np.cumsum(sizes)[:-1])
    padded = sum(len(c) * (src[c].max() + tgt[c].max()) for c in chunks)
    random_ratio = 1 - (src.sum() + tgt.sum()) / padded
    assert 0 <= s.padding_ratio() < 0.5 * random_ratio


def test_two_ranks_get_disjoint_shards_with_equal_batch_counts():
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(1, 30, 333), rng.integers(1, 30, 333)
    ranks = [sampler(src, tgt, rank=r, world_size=2) for r in (0, 1)]
    for epoch in (0, 1, 2):
        shards = []
        for s in ranks:
            s.set_epoch(epoch)
            shards.append([i for b in s for i in b])
        assert len(list(ranks[0])) == len(list(ranks[1]))
        assert not set(shards[0]) & set(shards[1])
        dropped = 333 - len(shards[0]) - len(shards[1])
        assert dropped <= max(len(b) for b in ranks[0].epoch_batches(epoch))


def test_resume_skips_consumed_batches():
    rng = np.random.default_rng(2)
    src, tgt = rng.integers(1, 30, 200), rng.integers(1, 30, 200)
    s = sampler(src, tgt)
    full = list(s)
    s.skip = 3
    assert list(s) == full[3:]
    assert list(s) == full, "the skip applies once"


def test_parquet_branch_layout_loads_and_revision_is_used(tmp_path, monkeypatch):
    """The hub's refs/convert/parquet branch: <config>/<split>/0000.parquet (how datasets 4 reads
    script-based datasets such as iwslt2017 and xsum); the revision is passed on and keys the cache."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split, n in (("train", 4), ("test", 2)):
        (tmp_path / "iwslt2017" / "iwslt2017-de-en" / split).mkdir(parents=True)
        rows = [{"translation": {"de": f"Satz {i}", "en": f"sentence {i}"}} for i in range(n)]
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "iwslt2017" / "iwslt2017-de-en" / split / "0000.parquet")
    cfg = CorpusConfig(name="iwslt", kind="hub", task="translation", path=str(tmp_path / "iwslt2017"),
                       hub_config="iwslt2017-de-en", revision="refs/convert/parquet", src_lang="de", tgt_lang="en")
    assert [e.target for e in load_split(cfg, "test")] == ["sentence 0", "sentence 1"]
    assert cfg.fingerprint()["revision"] == "refs/convert/parquet"
    assert cfg.fingerprint() != CorpusConfig(**{**cfg.__dict__, "revision": None}).fingerprint()

    seen = {}

    def fake_load(path, name=None, **kwargs):
        seen.update(path=path, name=name, **kwargs)
        return [{"translation": {"de": "a", "en": "b"}}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    hub = CorpusConfig(name="iwslt", kind="hub", task="translation", path="iwslt2017", hub_config="iwslt2017-de-en",
                       revision="refs/convert/parquet", src_lang="de", tgt_lang="en")
    load_split(hub, "train")
    assert seen == {"path": "iwslt2017", "name": "iwslt2017-de-en", "split": "train",
                    "revision": "refs/convert/parquet"}
