"""A cut fine-tuning run of an imported causal LM continues the uncut one exactly (CPU fp32): an imported GPT-2
keeps its dropout (0.1 everywhere), its positions are learned (their gradient summed in a fixed order), and the
batch order is each epoch's own, restored with the run, also when the cut falls after an epoch's last batch."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from seqlab.app.import_hf import main as import_main  # noqa: E402
from seqlab.app.train import train  # noqa: E402
from seqlab.checkpoint import read_checkpoint  # noqa: E402
from tests.integration.test_import_causal import family_folder  # noqa: E402
from tests.integration.test_sft import toy_corpus  # noqa: E402

STEPS, PER_EPOCH = 10, 5  # the toy corpus at 512 tokens a batch: 5 batches an epoch


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    path, _ = family_folder("gpt2", root)
    ckpt = root / "gpt2.ckpt"
    assert import_main(["--hf", str(path), "--out", str(ckpt)]) == 0
    return ckpt, toy_corpus(root)


def common(ckpt, corpus, lora: bool) -> list[str]:
    return [f"train.init_from={ckpt}", "data=bible_es_en", f"data.corpus.path={corpus}", "data.corpus.name=toy",
            "logger=csv", "optim.lr=1e-3", "optim.warmup_steps=2", "data.max_tokens=512", "data.max_source_len=30",
            "data.max_target_len=16", "trainer.precision=32", "train.val_every_n_steps=100",
            "train.checkpoint_every_n_steps=1", "train.quick_eval_size=0", "experiment=smoke",
            "prompt.template='say {source}'", *(["train.lora.r=4"] if lora else [])]


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_cut_run_continues_the_uncut_one_exactly(setup, make_cfg, tmp_path, lora):
    ckpt, corpus = setup
    args = common(ckpt, corpus, lora)
    uncut = train(make_cfg("train", [*args, f"trainer.max_steps={STEPS}"], out=tmp_path / "uncut"))
    again = train(make_cfg("train", [*args, f"trainer.max_steps={STEPS}"], out=tmp_path / "again"))
    weights = read_checkpoint(uncut["last"])["state_dict"]
    assert all(weights[k].equal(v) for k, v in read_checkpoint(again["last"])["state_dict"].items())
    for cut in (3, PER_EPOCH):  # within an epoch, and after its last batch
        out = tmp_path / f"cut{cut}"
        assert train(make_cfg("train", [*args, f"trainer.max_steps={cut}"], out=out))["step"] == cut
        resumed = train(make_cfg("train", [*args, f"trainer.max_steps={STEPS}", "train.resume=auto"], out=out))
        assert resumed["step"] == STEPS
        state = read_checkpoint(resumed["last"])["state_dict"]
        worst = max(float((weights[k] - v).abs().max()) for k, v in state.items())
        assert worst == 0.0, (cut, worst)
