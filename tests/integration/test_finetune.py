"""Fine-tuning an imported model: `seqlab train experiment=finetune_summaries train.init_from=CKPT` starts from
the checkpoint's weights with its own tokenizer on the embedded summaries; the loss falls, ROUGE is logged by the
quick validation decode, W&B (offline) has the run, a cut run resumes, and the result decodes as any checkpoint."""

from __future__ import annotations

import gzip

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.app.import_hf import main as import_main  # noqa: E402
from seqlab.app.train import train  # noqa: E402
from seqlab.checkpoint import load_for_inference, read_checkpoint  # noqa: E402
from seqlab.tracking.results import read_val_curve  # noqa: E402
from tests.hf_tokenizer_folders import folder  # noqa: E402
from tests.integration.conftest import ROOT  # noqa: E402

SIZES = {"train": 160, "validation": 16, "test": 16}


def small_corpus(tmp_path):
    """The first documents of each split of the embedded Debian summaries, in the same layout."""
    out = tmp_path / "summaries"
    out.mkdir()
    for split, n in SIZES.items():
        with gzip.open(ROOT / "data" / "debian_pkg_summaries" / f"{split}.jsonl.gz", "rt") as f:
            rows = [next(f) for _ in range(n)]
        with gzip.open(out / f"{split}.jsonl.gz", "wt") as f:
            f.writelines(rows)
    return out




@pytest.mark.parametrize("family", [pytest.param("pegasus", marks=pytest.mark.slow), "bart"])
def test_finetune_an_imported_model(family, make_cfg, tmp_path):
    path, _, _ = folder(family, tmp_path)
    ckpt = tmp_path / f"{family}.ckpt"
    assert import_main(["--hf", str(path), "--out", str(ckpt)]) == 0
    corpus = small_corpus(tmp_path)
    common = ["experiment=finetune_summaries", f"train.init_from={ckpt}", f"data.corpus.path={corpus}",
              "logger=wandb", "logger.mode=offline", "optim.lr=3e-3", "optim.warmup_steps=5",
              "data.max_tokens=2048", "data.max_source_len=60", "data.max_target_len=24", "trainer.precision=32",
              "train.val_every_n_steps=8",
              "train.checkpoint_every_n_steps=8", "train.quick_eval_size=4", "train.quick_eval_max_len=8"]
    out = tmp_path / "run"
    first = train(make_cfg("train", [*common, "trainer.max_steps=8"], out=out))
    assert first["step"] == 8
    resumed = train(make_cfg("train", [*common, "trainer.max_steps=24", "train.resume=auto"], out=out))
    assert resumed["step"] == 24
    assert any(k.startswith("val/greedy_rouge") for k in resumed["metrics"])
    curve = read_val_curve(out / "csv" / "metrics.csv")
    assert [s for s, _ in curve] == [8, 16, 24] and curve[-1][1] < curve[0][1]
    assert list(out.glob("**/wandb/offline-run-*"))

    model, tokenizer, info = load_for_inference(resumed["last"])
    imported, imported_tok, imported_info = load_for_inference(ckpt)
    assert model.cfg == imported.cfg and tokenizer.digest == imported_tok.digest
    assert info.decoding == imported_info.decoding  # the pretrained model's generation defaults travel on
    before = read_checkpoint(ckpt)["state_dict"]
    after = read_checkpoint(resumed["last"])["state_dict"]
    name = "model.encoder_layers.0.ffn.fc1.weight"
    assert not torch.equal(before[name], after[name])
