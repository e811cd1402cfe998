"""The training pipeline end to end on the smoke experiment: checkpoints, resume, bad configs."""

from __future__ import annotations

import pytest
import torch
from hydra.errors import ConfigCompositionException

from seqlab.app.train import train
from seqlab.checkpoint import load_for_inference, read_checkpoint
from seqlab.decoding import DecodingConfig
from seqlab.inference.text import translate
from seqlab.model import ConfigError

SMOKE = ["experiment=smoke", "logger=none"]


def weights(path: str) -> dict[str, torch.Tensor]:
    return {k: v for k, v in read_checkpoint(path)["state_dict"].items()}


def test_smoke_training_leaves_best_and_last_checkpoints(make_cfg, tmp_path):
    result = train(make_cfg("train", [*SMOKE, "train.quick_eval_size=4"]))
    assert result["step"] == 6
    assert "val/loss" in result["metrics"] and "val/greedy_bleu" in result["metrics"]
    for path in (result["best"], result["last"]):
        model, tokenizer, info = load_for_inference(path)
        assert info.model_config.d_model == 64 and tokenizer.src_vocab_size <= 1000
        assert info.data_config["corpus"]["name"] == "bible_es_en"
        assert info.run_config["run_name"] == "smoke"
    groups = read_checkpoint(result["last"])["optimizer_states"][0]["param_groups"]
    assert [g["fused"] for g in groups] == [True, True]  # AdamW's fused kernel on CPU (optim.fused=null)


ONE_STACK = ["model.encoder_layers=0", "model.max_positions=512"]  # source and target share the positions
ARCHITECTURES = {"encoder_decoder": [], "decoder_only": ["model.architecture=decoder_only", *ONE_STACK],
                 "prefix_lm": ["model.architecture=prefix_lm", *ONE_STACK]}


@pytest.mark.parametrize("architecture", [pytest.param(a, marks=pytest.mark.slow) if a != "encoder_decoder" else a
                                          for a in sorted(ARCHITECTURES)])  # one loop and one checkpoint for all
def test_resume_matches_uninterrupted_training(make_cfg, tmp_path, architecture):
    """For every architecture: training resumed from a checkpoint ends with the weights of training straight
    through, and the checkpoint decodes through the one model boundary."""
    common = [*SMOKE, *ARCHITECTURES[architecture], "model.dropout=0.1", "train.quick_eval_size=0",
              "train.checkpoint_every_n_steps=4", "train.val_every_n_steps=3"]
    straight = train(make_cfg("train", [*common, "trainer.max_steps=8"], out=tmp_path / "straight"))
    first = train(make_cfg("train", [*common, "trainer.max_steps=4"], out=tmp_path / "first"))
    resumed = train(make_cfg("train", [*common, "trainer.max_steps=8", f"train.resume={first['last']}"],
                             out=tmp_path / "resumed"))
    assert resumed["step"] == 8
    a, b = weights(straight["last"]), weights(resumed["last"])
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6
    c = weights(first["last"])
    assert max((a[k] - c[k]).abs().max().item() for k in a) > 1e-4, "the second half must have trained"
    model, tokenizer, _ = load_for_inference(resumed["last"])
    assert model.cfg.architecture == architecture
    hyps = translate(model, tokenizer, ["a short source", "another one"], DecodingConfig(method="beam", num_beams=2,
                                                                                      max_length=8))
    assert len(hyps) == 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.norm_position=middle"], "model.norm_position='middle'"),
        (["model.d_model=100", "model.n_heads=8"], "model.d_model=100 is not divisible by model.n_heads=8"),
        (["optim.schedule=linear"], "optim.schedule='linear'"),
        (["optim.fused=maybe"], "optim.fused='maybe'"),
        (["optim.fused=true", "trainer.precision=16-mixed"], "optim.fused=true cannot be clipped"),
        (["data.corpus.kind=ftp"], "data.corpus.kind='ftp'"),
    ],
)
def test_bad_values_fail_before_any_data_is_read(make_cfg, tmp_path, overrides, message):
    cfg = make_cfg("train", [*SMOKE, *overrides])
    cfg.data.cache_dir = str(tmp_path / "untouched")
    with pytest.raises(ConfigError) as err:
        train(cfg)
    assert message in str(err.value)
    assert not (tmp_path / "untouched").exists()


def test_unknown_key_is_named(make_cfg):
    with pytest.raises(ConfigCompositionException) as err:
        make_cfg("train", [*SMOKE, "model.norm_positon=pre"])
    assert "norm_positon" in str(err.value.__cause__ or err.value)


@pytest.mark.parametrize("precision", ["32", pytest.param("bf16-mixed", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("clip", "moves"), [("1.0", True), ("1e-12", False)])
def test_gradients_are_clipped_once_through_lightnings_hook(make_cfg, tmp_path, clip, moves, precision):
    """Adam ignores the gradient's scale except against eps: clipped to 1e-12, the weights barely move.
    bf16-mixed too, with the fused AdamW (Lightning's mixed-precision plugin would refuse to clip it)."""
    train(make_cfg("train", [*SMOKE, "train.quick_eval_size=0", "trainer.max_steps=3", "optim.warmup_steps=1",
                             "train.checkpoint_every_n_steps=1", "train.keep_last_checkpoints=2",
                             f"optim.clip_norm={clip}", f"trainer.precision={precision}"], out=tmp_path / "run"))
    a, b = (weights(p) for p in sorted((tmp_path / "run" / "checkpoints").glob("step-*.ckpt")))
    change = max((a[k] - b[k]).abs().max().item() for k in a)
    assert (change > 1e-5) == moves, change


@pytest.mark.slow
def test_bf16_mixed_on_a_cpu_without_bf16_kernels_multiplies_in_fp32(make_cfg, tmp_path, monkeypatch):
    """Training and validation products go through seqlab.bf16_gemm's mode there (fp32 products of the bf16
    operands); the run ends as near the native kernels' run as an fp32 run does (the same roundings, in other
    orders of fp32 sums)."""
    import seqlab.bf16_gemm as bg

    products = []

    class Counted(bg.Bf16GemmsInFp32):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            products.append(func in bg.GEMMS and args[-1].dtype == torch.bfloat16)
            return super().__torch_dispatch__(func, types, args, kwargs)

    common = [*SMOKE, "train.quick_eval_size=0", "trainer.max_steps=3", "train.val_every_n_steps=3",
              "trainer.precision=bf16-mixed"]
    monkeypatch.setattr(bg, "native_bf16_gemms", lambda: True)
    native = train(make_cfg("train", common, out=tmp_path / "native"))
    assert not products
    monkeypatch.setattr(bg, "native_bf16_gemms", lambda: False)
    monkeypatch.setattr(bg, "Bf16GemmsInFp32", Counted)
    ours = train(make_cfg("train", common, out=tmp_path / "ours"))
    assert sum(products) > 100 and "val/loss" in ours["metrics"]
    fp32 = train(make_cfg("train", [*common, "trainer.precision=32-true"], out=tmp_path / "fp32"))
    a, b, c = weights(native["last"]), weights(ours["last"]), weights(fp32["last"])
    assert sum((a[k] - b[k]).norm() for k in a) <= 2 * sum((a[k] - c[k]).norm() for k in a)
    assert ours["metrics"]["val/loss"] == pytest.approx(native["metrics"]["val/loss"], abs=2e-2)


@pytest.mark.slow  # Hydra's callback group is Lightning's own; the training tests run the default callbacks
def test_callbacks_config_group_adds_lightning_callbacks(make_cfg, tmp_path):
    from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor

    from seqlab.app.train import extra_callbacks

    assert extra_callbacks(make_cfg("train", SMOKE)) == []
    cfg = make_cfg("train", [*SMOKE, "callbacks=[early_stopping,lr_monitor]", "callbacks.early_stopping.patience=1"])
    found = extra_callbacks(cfg)
    assert [type(c) for c in found] == [EarlyStopping, LearningRateMonitor]
    assert found[0].monitor == "val/loss" and found[0].patience == 1
    result = train(make_cfg("train", [*SMOKE, "logger=csv", "train.quick_eval_size=0",
                                      "callbacks=[early_stopping,lr_monitor]"],
                            out=tmp_path / "run"))
    assert result["step"] == 6


@pytest.mark.slow  # tests/unit/test_output_loss.py holds the fused loss's values and gradients to the plain step's
def test_fused_loss_trains_the_same_weights_as_the_plain_step(make_cfg, tmp_path):
    """train.fused_loss=true: 4 updates (dropout on, validation, quick eval) end at the plain run's weights up to
    rounding, and the logged losses agree."""
    common = [*SMOKE, "model.dropout=0.1", "train.quick_eval_size=2", "trainer.max_steps=4",
              "train.val_every_n_steps=2"]
    plain = train(make_cfg("train", common, out=tmp_path / "plain"))
    fused = train(make_cfg("train", [*common, "train.fused_loss=true"], out=tmp_path / "fused"))
    a, b = weights(plain["last"]), weights(fused["last"])
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-4
    assert fused["metrics"]["val/loss"] == pytest.approx(plain["metrics"]["val/loss"], rel=1e-5)


@pytest.mark.slow  # three bf16 trainings: minutes where the CPU has no bf16 kernels
def test_bf16_weights_train_fp32_master_weights_close_to_the_bf16_mixed_run(make_cfg, tmp_path):
    """train.bf16_weights=true: 4 updates in bf16 leave fp32 parameters (the optimizer's master weights, the
    checkpoint's) near the bf16-mixed run's, tied matrices still one, and a validation loss within rounding."""
    common = [*SMOKE, "model.dropout=0.0", "train.quick_eval_size=0", "trainer.max_steps=4",
              "train.val_every_n_steps=2", "trainer.precision=bf16-mixed"]
    mixed = train(make_cfg("train", common, out=tmp_path / "mixed"))
    ours = train(make_cfg("train", [*common, "train.bf16_weights=true"], out=tmp_path / "bf16"))
    a, b = weights(mixed["last"]), weights(ours["last"])
    assert a.keys() == b.keys() and all(v.dtype == torch.float32 for v in b.values())
    apart = torch.cat([(a[k] - b[k]).flatten() for k in a]).norm()
    start = weights(train(make_cfg("train", [*common, "trainer.max_steps=1", "optim.lr=1e-12"],
                                   out=tmp_path / "start"))["last"])
    moved = torch.cat([(a[k] - start[k]).flatten() for k in a]).norm()
    assert apart < 0.1 * moved  # the two runs' weights are much closer to each other than to where they started
    assert ours["metrics"]["val/loss"] == pytest.approx(mixed["metrics"]["val/loss"], rel=1e-2)
    model, _, _ = load_for_inference(ours["last"])
    assert model.output.weight is model.tgt_embed.tokens.weight


def test_bf16_weights_in_another_precision_fail_before_the_data_is_read(make_cfg, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="train.bf16_weights=true.*trainer.precision=32-true"):
        train(make_cfg("train", [*SMOKE, "train.bf16_weights=true", "trainer.precision=32-true"], out=tmp_path / "a"))
    import seqlab.app.train as app_train

    monkeypatch.setattr(app_train, "auto_precision", lambda accelerator: ("32-true", "no AMX; fp32 is faster"))
    monkeypatch.setattr(app_train, "Seq2SeqDataModule", None)  # reached only after the check
    with pytest.raises(ConfigError, match=r"trainer.precision=32-true \(auto: no AMX"):
        train(make_cfg("train", [*SMOKE, "train.bf16_weights=true", "trainer.precision=auto"], out=tmp_path / "b"))


@pytest.mark.slow
def test_compiled_layers_train_the_same_weights_and_keep_the_checkpoint_layout(make_cfg, tmp_path):
    """train.compile=all (the layers and the fused loss's arithmetic through torch.compile on this CPU, dropout off:
    inductor draws its own dropout masks): the plain run's weights up to rounding, the same parameter names, a
    checkpoint that loads."""
    common = [*SMOKE, "model.dropout=0.0", "train.quick_eval_size=2", "trainer.max_steps=3",
              "train.val_every_n_steps=2"]
    plain = train(make_cfg("train", common, out=tmp_path / "plain"))
    compiled = train(make_cfg("train", [*common, "train.compile=all", "train.fused_loss=true"],
                              out=tmp_path / "compiled"))
    a, b = weights(plain["last"]), weights(compiled["last"])
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-4
    model, _, _ = load_for_inference(compiled["last"])
    assert model.cfg.d_model == 64
