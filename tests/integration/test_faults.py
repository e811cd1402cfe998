"""Faults: nothing silently wrong, nothing lost, a clear error naming the file, key or line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from seqlab.app.configs import train_spec
from seqlab.app.train import train
from seqlab.checkpoint import CheckpointError, atomic_checkpoint_io, load_for_inference, read_checkpoint
from seqlab.data import CorpusConfig, DataConfig, TokenizerConfig
from seqlab.data.datamodule import load_tokenizer, tokenized_split
from seqlab.data.tokenizer import Tokenizer
from seqlab.io import atomic_write, publish_once
from seqlab.model import ConfigError
from seqlab.train.fit import RunFolderBusy, RunFolderLock

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ["experiment=smoke", "logger=none", "train.quick_eval_size=0"]


def smoke_ckpt(make_cfg, tmp_path: Path, name: str = "run", extra: tuple[str, ...] = ()) -> dict:
    return train(make_cfg("train", [*SMOKE, *extra], out=tmp_path / name))


# tokenizer and data cache ---------------------------------------------------------------------------------

def test_cache_key_is_the_whole_tokenizer_not_its_tail():
    """Two different tokenizers have the same last 64 hex characters (the trainer spec), not the same digest."""
    cfg = TokenizerConfig(vocab_size=300)
    a = Tokenizer.train(["the cat sat on the mat"] * 50, ["le chat"] * 50, cfg)
    b = Tokenizer.train(["a dog ran in the park today"] * 50, ["un chien"] * 50, cfg)
    assert a.src_model != b.src_model and a.src_model.hex()[-64:] == b.src_model.hex()[-64:]
    assert a.digest != b.digest


TRAIN_TOKENIZER = """
import sys, hashlib
sys.path.insert(0, {src!r})
from seqlab.data.tokenizer import Tokenizer, TokenizerConfig
lines = [f"sentence number {{i}} with words {{i % 97}} and {{i % 13}} here" for i in range(3000)]
tok = Tokenizer.train(lines, lines[::-1], TokenizerConfig(vocab_size=400, max_sentences=500))
print(hashlib.sha256(tok.src_model).hexdigest())
"""


# several processes training a tokenizer (20 s): with the slow tests (DDP's)
@pytest.mark.slow
def test_tokenizer_training_is_the_same_in_every_process():
    """SentencePiece's own sampling differs per process; seqlab draws the sample from the seed alone."""
    code = TRAIN_TOKENIZER.format(src=str(ROOT / "src"))
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout.strip() for _ in range(2)}
    assert len(digests) == 1


def test_publish_once_keeps_the_first_writer(tmp_path):
    path = tmp_path / "tok.json"
    assert publish_once(path, b"first") and not publish_once(path, b"second")
    assert path.read_bytes() == b"first" and [p.name for p in tmp_path.iterdir()] == ["tok.json"]


def test_a_tokenizer_that_lost_the_race_uses_the_published_one(tmp_path):
    """Two fresh caches at once: the second process must end with the first one's tokenizer."""
    corpus = CorpusConfig(name="bible_es_en", kind="embedded", task="translation", path="bible_es_en",
                          src_lang="es", tgt_lang="en")
    cfg = DataConfig(corpus=corpus, tokenizer=TokenizerConfig(vocab_size=400, max_sentences=2000),
                     cache_dir=str(tmp_path))
    first = load_tokenizer(cfg)
    published = next(tmp_path.glob("tokenizer-*.json"))
    other = Tokenizer.train(["completely different text"] * 100, ["otro texto"] * 100, TokenizerConfig(vocab_size=300))
    state = {"src": other.src_model.hex(), "tgt": None}
    published.write_text(json.dumps(state))  # as if another process had published first
    again = load_tokenizer(cfg)
    assert again.digest == other.digest != first.digest
    data = tokenized_split(cfg, again, "validation")
    src0 = data[0][1].tolist()
    assert again.decode_source(src0)  # ids belong to the tokenizer that is in use
    assert next(tmp_path.glob("data-*")).name != ""


@pytest.mark.slow
def test_two_processes_preparing_one_cache_end_consistent(tmp_path):
    code = f"""
import sys
sys.path.insert(0, {str(ROOT / 'src')!r})
from seqlab.data import CorpusConfig, DataConfig, TokenizerConfig
from seqlab.data.datamodule import load_tokenizer, tokenized_split
corpus = CorpusConfig(name="bible_es_en", kind="embedded", task="translation", path="bible_es_en",
                      src_lang="es", tgt_lang="en")
cfg = DataConfig(corpus=corpus, tokenizer=TokenizerConfig(vocab_size=1000, max_sentences=5000),
                 cache_dir={str(tmp_path)!r})
tok = load_tokenizer(cfg)
tokenized_split(cfg, tok, "validation")
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    assert all(p.wait() == 0 for p in procs)
    corpus = CorpusConfig(name="bible_es_en", kind="embedded", task="translation", path="bible_es_en",
                          src_lang="es", tgt_lang="en")
    cfg = DataConfig(corpus=corpus, tokenizer=TokenizerConfig(vocab_size=1000, max_sentences=5000),
                     cache_dir=str(tmp_path))
    tok = load_tokenizer(cfg)
    data = tokenized_split(cfg, tok, "validation")
    from seqlab.data import load_split

    examples = load_split(corpus, "validation")
    matches = sum(tok.decode_source(data[i][1].tolist()) == tok.normalize(examples[i].source, "src")
                  for i in range(50))
    assert matches >= 48  # (a pair dropped for length would shift the rest; none is at this size)


@pytest.mark.slow
def test_same_seed_same_results_with_fresh_caches(tmp_path):
    """Two processes, each with a fresh cache (SentencePiece's own sampling differed per process)."""
    losses = []
    for name in ("a", "b"):
        proc = subprocess.run(
            [sys.executable, "-m", "seqlab", "train", *SMOKE, "trainer.max_steps=3", "train.val_every_n_steps=3",
             f"hydra.run.dir={tmp_path / name}", f"paths.log_dir={tmp_path / 'outputs'}",
             f"paths.cache_dir={tmp_path / ('cache-' + name)}"],
            cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        losses.append(read_checkpoint(tmp_path / name / "checkpoints" / "last.ckpt")["state_dict"])
    assert all(torch.equal(losses[0][k], losses[1][k]) for k in losses[0])


# tying across separate vocabularies -------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["model.tie_embeddings=all",
                                     "model.copy_attention=true model.tie_embeddings=decoder"])
def test_sharing_across_separate_vocabularies_is_refused_before_data(make_cfg, tmp_path, variant):
    cfg = make_cfg("train", [*SMOKE, "data.tokenizer.joint=false", *variant.split()])
    cfg.data.cache_dir = str(tmp_path / "untouched")
    with pytest.raises(ConfigError) as err:
        train(cfg)
    assert "data.tokenizer.joint" in str(err.value) and variant.split("=")[0] in str(err.value)
    assert not (tmp_path / "untouched").exists()


# 4, 10, 16: checkpoints ----------------------------------------------------------------------------------------

def flip_byte_in_record(src: Path, dst: Path, record_suffix: str) -> None:
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(record_suffix))
    header = 30 + len(info.filename.encode()) + len(info.extra)  # local header: fixed part, name, extra
    offset = info.header_offset + header + info.file_size // 2
    data[offset] ^= 0x10
    dst.write_bytes(bytes(data))


@pytest.fixture
def checkpoint(smoke_checkpoint) -> Path:
    return smoke_checkpoint


@pytest.mark.parametrize("record", ["data.pkl", "/data/0"])
def test_a_flipped_byte_is_refused_naming_the_file(checkpoint, tmp_path, record):
    bad = tmp_path / "flipped.ckpt"
    flip_byte_in_record(checkpoint, bad, record)
    with pytest.raises(CheckpointError, match=rf"{bad}: corrupt: record '.*{record.strip('/')}' fails its CRC"):
        load_for_inference(bad)


def resave(checkpoint: Path, dst: Path, change) -> Path:
    state = torch.load(checkpoint, weights_only=True)
    change(state)
    torch.save(state, dst)
    return dst


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["seqlab"].pop("tokenizer"), "no valid 'tokenizer'"),
        (lambda s: s["seqlab"].pop("model_config"), "no valid 'model_config'"),
        (lambda s: s["seqlab"].pop("data_config"), "no valid 'data_config'"),
        (lambda s: s["seqlab"]["tokenizer"].update(src_model="00ff" * 40), "tokenizer stored in the checkpoint"),
        (lambda s: s["seqlab"]["tokenizer"].update(src_model="zz"), "tokenizer stored in the checkpoint"),
        (lambda s: s["seqlab"]["model_config"].update(src_vocab_size=17), "weights do not fit"),
        (lambda s: s["seqlab"]["model_config"].update(activation="swish"), "invalid model_config"),
        (lambda s: s.update(seqlab=[1, 2]), "not a mapping"),
    ],
)
def test_bad_metadata_gives_checkpoint_errors(checkpoint, tmp_path, change, message):
    bad = resave(checkpoint, tmp_path / "bad.ckpt", change)
    with pytest.raises(CheckpointError) as err:
        load_for_inference(bad)
    assert str(bad) in str(err.value) and message in str(err.value)


def test_random_bytes_are_a_checkpoint_error(tmp_path):
    bad = tmp_path / "noise.ckpt"
    bad.write_bytes(os.urandom(5000))
    with pytest.raises(CheckpointError, match="noise.ckpt"):
        read_checkpoint(bad)


def test_disk_full_says_so(tmp_path, monkeypatch):
    import errno

    import seqlab.io as io_module

    class FullDisk:
        """A file on a disk that fills up after 1,000 bytes."""

        def __init__(self, file):
            self.file = file

        def write(self, data):
            if self.file.tell() + len(data) > 1000:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.file.write(data)

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    real_fdopen = os.fdopen
    monkeypatch.setattr(io_module.os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    target = tmp_path / "last.ckpt"
    with pytest.raises(OSError, match=rf"no space left on device while writing {target}"):
        atomic_write(target, lambda f: torch.save({"w": torch.zeros(10_000)}, f))
    assert list(tmp_path.iterdir()) == []  # no half-written file, no temporary left


# file contents, not size and mtime ----------------------------------------------------------------------------

def test_corpus_fingerprint_follows_contents(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"id": "1", "src": "hola", "tgt": "hello"}\n')
    corpus = CorpusConfig(name="f", kind="files", task="translation", files={"train": str(path)},
                          src_field="src", tgt_field="tgt")
    before = corpus.fingerprint()
    stat = path.stat()
    path.write_text('{"id": "1", "src": "hala", "tgt": "hello"}\n')  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime, as cp -p or rsync leave it
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert corpus.fingerprint() != before


def test_corpus_digest_memo_outlives_the_process_and_any_change_invalidates_it(tmp_path, monkeypatch):
    from seqlab import digest

    path, memo = tmp_path / "train.jsonl", tmp_path / "cache" / "digests"
    path.write_text('{"id": "1", "src": "hola", "tgt": "hello"}\n')
    hashed = []
    real = digest._sha256
    monkeypatch.setattr(digest, "_sha256", lambda p, chunk: hashed.append(p) or real(p, chunk))
    monkeypatch.setattr(digest, "_DIGESTS", {})
    first = digest.file_digest(path, memo)
    digest._DIGESTS.clear()  # a new process: only the memo folder remains
    assert digest.file_digest(path, memo) == first and len(hashed) == 1
    stat = path.stat()
    path.write_text('{"id": "1", "src": "hala", "tgt": "hello"}\n')  # same size, mtime set back below
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    digest._DIGESTS.clear()
    changed = digest.file_digest(path, memo)
    assert changed != first and changed == hashlib.sha256(path.read_bytes()).hexdigest() and len(hashed) == 2
    for entry in memo.iterdir():
        entry.write_text("damaged")  # a damaged memo entry is recomputed, not trusted
    digest._DIGESTS.clear()
    assert digest.file_digest(path, memo) == changed and len(hashed) == 3


# run folders ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("interval", [pytest.param(3, marks=pytest.mark.slow), 0])  # 3: between intervals too
def test_last_checkpoint_holds_the_final_step(make_cfg, tmp_path, interval):
    result = train(make_cfg("train", [*SMOKE, "trainer.max_steps=7", f"train.checkpoint_every_n_steps={interval}",
                                      "train.val_every_n_steps=5"], out=tmp_path / "run"))
    assert read_checkpoint(result["last"])["global_step"] == 7


def test_resume_auto_finds_the_given_run_folder_and_fresh_never_overwrites(make_cfg, tmp_path):
    run = tmp_path / "explicit"
    common = [*SMOKE, "train.val_every_n_steps=2", "train.checkpoint_every_n_steps=2"]
    train(make_cfg("train", [*common, "trainer.max_steps=2"], out=run))
    before = (run / "checkpoints" / "last.ckpt").read_bytes()
    with pytest.raises(ConfigError, match=r"already holds checkpoints .*train.resume=auto.*train.overwrite=true"):
        train(make_cfg("train", [*common, "trainer.max_steps=2"], out=run))
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == before
    resumed = train(make_cfg("train", [*common, "trainer.max_steps=4", "train.resume=auto"], out=run))
    assert resumed["step"] == 4  # continued from step 2, not a fresh 4-step run
    fresh = train(make_cfg("train", [*common, "trainer.max_steps=2", "train.overwrite=true"], out=run))
    assert fresh["step"] == 2


class CodeCarrier:
    """Unpickling this would import and build an arbitrary object: what `weights_only=True` refuses."""


def test_resuming_reads_through_the_safe_loader_and_saving_says_what_it_saves(make_cfg, tmp_path, caplog):
    run = tmp_path / "run"
    common = [*SMOKE, "train.val_every_n_steps=2", "train.checkpoint_every_n_steps=0"]
    with caplog.at_level("INFO"):
        train(make_cfg("train", [*common, "trainer.max_steps=2"], out=run))
    assert "weights_only" not in caplog.text  # Lightning logs this when a save leaves it unset
    last = run / "checkpoints" / "last.ckpt"
    state = read_checkpoint(last)
    state["callbacks"]["carrier"] = CodeCarrier()
    torch.save(state, last)
    with pytest.raises(CheckpointError, match=rf"{last}: cannot be read as a checkpoint"):
        train(make_cfg("train", [*common, "trainer.max_steps=4", f"train.resume={last}"], out=tmp_path / "next"))
    with pytest.raises(CheckpointError, match=rf"{last}: cannot be read as a checkpoint"):
        atomic_checkpoint_io().load_checkpoint(last)  # what Lightning's own resume load calls


def test_second_training_in_a_locked_run_folder_fails_at_once(make_cfg, tmp_path):
    run = tmp_path / "busy"
    with RunFolderLock(run), pytest.raises(RunFolderBusy, match="another training is running"):
        train(make_cfg("train", [*SMOKE, "trainer.max_steps=2"], out=run))
    assert not (run / "checkpoints").exists()


def test_stale_temporaries_are_removed_at_the_next_start(make_cfg, tmp_path):
    run = tmp_path / "killed"
    (run / "checkpoints").mkdir(parents=True)
    stale = run / "checkpoints" / ".last.ckpt.abc123.tmp"
    stale.write_bytes(b"x" * 1000)
    train(make_cfg("train", [*SMOKE, "trainer.max_steps=2", "train.overwrite=true"], out=run))
    assert not stale.exists()


# config values ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.encoder_layers=abc", "model.encoder_layers='abc' must be an integer"),
        ("trainer.max_steps=-5", "trainer.max_steps=-5 must be positive"),
        ("train.val_every_n_steps=0", "train.val_every_n_steps=0 must be >= 1"),
        ("data.max_source_len=0", "data.max_source_len=0 must be at least 2"),
        ("optim.lr=abc", "optim.lr='abc' must be a number"),
        ("train.quick_eval_size=-3", "train.quick_eval_size=-3 must be >= 0"),
        ("+train.chekpoint_every=5", "unknown key(s) train.chekpoint_every"),
        ("+data.corpus.split_names.tset=test", "data.corpus.split_names has unknown split(s) ['tset']"),
    ],
)
def test_bad_values_are_named_with_their_full_key_before_data(make_cfg, tmp_path, override, message):
    cfg = make_cfg("train", [*SMOKE, override])
    cfg.data.cache_dir = str(tmp_path / "untouched")
    with pytest.raises(ConfigError) as err:
        train_spec(cfg)
    assert message in str(err.value)
    assert not (tmp_path / "untouched").exists()


def test_documented_local_files_override_composes(make_cfg, tmp_path):
    assert "+data.corpus.files.train=" in (ROOT / "docs" / "training.md").read_text()
    cfg = make_cfg("train", [*SMOKE, "data.corpus.kind=files", "+data.corpus.files.train=my.jsonl"])
    assert cfg.data.corpus.files.train == "my.jsonl"


# data readers --------------------------------------------------------------------------------------------

def files_corpus(path: Path) -> CorpusConfig:
    return CorpusConfig(name="f", kind="files", task="translation", files={"train": str(path)},
                        src_field="src", tgt_field="tgt")


def test_tsv_is_plain_tab_separated_text(tmp_path):
    from seqlab.data import load_split

    path = tmp_path / "train.tsv"
    path.write_text('id\tsrc\ttgt\n1\t"el gato\tthe cat"\n2\tun perro\ta dog\n3\t"dijo"\t"said"\n')
    examples = load_split(files_corpus(path), "train")
    assert [(e.id, e.source, e.target) for e in examples] == [
        ("1", '"el gato', 'the cat"'), ("2", "un perro", "a dog"), ("3", '"dijo"', '"said"')]


def test_csv_with_a_byte_order_mark_keeps_its_ids(tmp_path):
    from seqlab.data import load_split

    path = tmp_path / "train.csv"
    path.write_bytes("\ufeffid,src,tgt\nv1,hola,hello\nv2,adiós,bye\n".encode())
    assert [e.id for e in load_split(files_corpus(path), "train")] == ["v1", "v2"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("train.csv", b'id,src,tgt\n1,"unclosed,hello\n2,a,b\n', r"train.csv:\d+: malformed CSV"),
        ("train.json.gz", None, r"train.json.gz: cannot be read .*truncated"),
        ("train.jsonl", b'{"id": "1", "src": "bad \\ud800 text", "tgt": "x"}\n',
         r"train.jsonl:1: field 'src' holds U\+D800"),
    ],
)
def test_malformed_files_name_the_file_and_line(tmp_path, name, content, message):
    import gzip

    from seqlab.data import load_split
    from seqlab.data.corpora import CorpusError

    path = tmp_path / name
    if content is None:
        full = gzip.compress(json.dumps([{"id": str(i), "src": "a" * 50, "tgt": "b"} for i in range(50)]).encode())
        content = full[: len(full) // 2]
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=message):
        load_split(files_corpus(path), "train")


def test_duplicate_ids_are_warned_about(tmp_path, caplog):
    from seqlab.data import load_split

    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"id": i, "src": "a", "tgt": "b"}) + "\n" for i in ("x", "y", "x")))
    with caplog.at_level("WARNING"):
        assert len(load_split(files_corpus(path), "train")) == 3
    assert "1 example ids are repeated (first: 'x')" in caplog.text


# an interrupted evaluation says so ------------------------------------------------------------------------

def test_interrupted_evaluation_is_recorded_as_interrupted(make_cfg, checkpoint, monkeypatch):
    import seqlab.app.evaluate as evaluate_pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluate_pipeline, "evaluate", interrupted)
    cfg = make_cfg("eval", [f"ckpt={checkpoint}", "logger=none", "limit=3"])
    with pytest.raises(KeyboardInterrupt):
        evaluate_pipeline.run_evaluation(cfg)
    (metrics,) = Path(cfg.results_dir).glob("**/metrics.json")
    payload = json.loads(metrics.read_text())
    assert payload["status"] == "interrupted" and "run it again" in payload["error"]


def test_an_archived_output_with_a_line_break_of_its_own_is_refused_or_made_one_line(tmp_path):
    """A sampled output can hold a newline token; written as is it would shift every later line of an archive's
    one-line-per-sentence file. The writer refuses it, naming the item; `one_line` keeps its BLEU."""
    from sacrebleu.metrics import BLEU

    from seqlab.io import atomic_write_lines_gz, one_line, read_lines_gz

    outputs, refs = ["the light\nwas good", "and the night"], ["the light was good", "and the night was"]
    with pytest.raises(ValueError, match="item 0 holds a line break"):
        atomic_write_lines_gz(tmp_path / "hyps.txt.gz", outputs)
    assert not (tmp_path / "hyps.txt.gz").exists()
    path = atomic_write_lines_gz(tmp_path / "hyps.txt.gz", [one_line(o) for o in outputs])
    assert read_lines_gz(path) == ["the light was good", "and the night"]
    assert BLEU().corpus_score(read_lines_gz(path), [refs]).score == BLEU().corpus_score(outputs, [refs]).score
