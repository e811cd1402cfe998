"""Loss, schedules, tracking helpers and the report, each alone."""

from __future__ import annotations

import json
import math

import pytest
import torch

from seqlab.tracking.report import render
from seqlab.tracking.wandb import TrackingConfig, resolve_mode, scrub
from seqlab.train.losses import label_smoothed_nll
from seqlab.train.schedule import lr_multiplier


def fairseq_reference(logits: torch.Tensor, target: torch.Tensor, eps: float, pad: int = 0):
    """fairseq's label_smoothed_nll_loss, written out with log_softmax."""
    lprobs = logits.log_softmax(-1).reshape(-1, logits.shape[-1])
    target = target.reshape(-1, 1)
    nll = -lprobs.gather(-1, target)
    smooth = -lprobs.sum(-1, keepdim=True)
    keep = target.ne(pad)
    nll, smooth = nll[keep], smooth[keep]
    eps_i = eps / (lprobs.size(-1) - 1)
    return ((1.0 - eps - eps_i) * nll + eps_i * smooth).sum(), nll.sum()


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_and_gradient_match_fairseq(eps):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 17, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 17, (3, 5), generator=g)
    target[0, 3:] = 0
    loss, nll, n = label_smoothed_nll(logits, target, eps)
    ref_loss, ref_nll = fairseq_reference(logits, target, eps)
    assert n == 13
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-5)
    ours = torch.autograd.grad(loss + 0.5 * nll, logits)[0]
    ref = torch.autograd.grad(ref_loss + 0.5 * ref_nll, logits)[0]
    assert (ours - ref).abs().max() < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loss_in_row_blocks_equals_the_whole_array(monkeypatch, dtype):
    """Blocks of 3 rows (the loss computes in row blocks that fit in cache): the same loss and gradient
    as fairseq's formula on the whole array, for fp32 and bf16 logits (computed in fp32, gradient cast)."""
    import seqlab.train.losses as losses

    monkeypatch.setattr(losses, "BLOCK_ELEMENTS", 3 * 17)
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 5, 17, generator=g).to(dtype).requires_grad_()
    target = torch.randint(1, 17, (4, 5), generator=g)
    target[1, 2:] = 0
    loss, nll, _ = label_smoothed_nll(logits, target, 0.1)
    ours = torch.autograd.grad(loss + 0.5 * nll, logits)[0]
    wide = logits.detach().double().requires_grad_()
    ref_loss, ref_nll = fairseq_reference(wide, target, 0.1)
    ref = torch.autograd.grad(ref_loss + 0.5 * ref_nll, wide)[0]
    assert len(losses.row_blocks(20, 17)) == 7 and ours.dtype == dtype
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    assert (ours.double() - ref).abs().max() < (1e-6 if dtype == torch.float32 else 4e-3)



def test_row_blocks_fit_a_cpu_cache_and_stay_few_on_a_gpu():
    """A base model's batch (12,288 rows x 37,000 tokens): cache-sized blocks on a CPU, a handful on a GPU
    (each block costs kernel launches there); either way every row exactly once, in order."""
    from seqlab.train.losses import BLOCK_ELEMENTS, row_blocks

    n, vocab = 12_288, 37_000
    cpu, gpu = row_blocks(n, vocab, torch.device("cpu")), row_blocks(n, vocab, torch.device("cuda"))
    assert row_blocks(n, vocab) == cpu
    assert all((b.stop - b.start) * vocab <= BLOCK_ELEMENTS for b in cpu) and len(cpu) > 800
    assert len(gpu) <= 8
    for blocks in (cpu, gpu):
        assert [i for b in blocks for i in range(b.start, b.stop)] == list(range(n))

def test_inverse_sqrt_and_cosine_schedules():
    inv = lr_multiplier("inverse_sqrt", warmup_steps=100)
    assert inv(1) == pytest.approx(0.01) and inv(100) == pytest.approx(1.0)
    assert inv(400) == pytest.approx(0.5)
    cos = lr_multiplier("cosine", warmup_steps=10, max_steps=110, min_ratio=0.1)
    assert cos(10) == pytest.approx(1.0) and cos(60) == pytest.approx(0.55) and cos(110) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="max_steps"):
        lr_multiplier("cosine", 10)(20)


def test_wandb_mode_and_scrub(monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", "/nonexistent")
    monkeypatch.setenv("HOME", "/nonexistent")
    assert resolve_mode(TrackingConfig()) == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_mode(TrackingConfig()) == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert resolve_mode(TrackingConfig()) == "offline"
    cleaned = scrub({"logger": {"api_key": "secret"}, "data": {"tokenizer": {"vocab_size": 8}, "max_tokens": 4}})
    assert cleaned == {"logger": {"api_key": "***"}, "data": {"tokenizer": {"vocab_size": 8}, "max_tokens": 4}}


def test_report_shows_what_differs_and_failures():
    ok = {"status": "ok", "label": "greedy", "split": "test", "decoding": {"method": "greedy", "num_beams": 1},
          "checkpoint": {"run_name": "r", "model": {"norm_position": "post"}},
          "metrics": {"bleu": 20.0, "chrf": 40.0, "hyp_logprob_per_seq": -10.0, "distinct2": 0.5}}
    beam = {**ok, "label": "beam5_lp1", "decoding": {"method": "beam", "num_beams": 5},
            "metrics": {**ok["metrics"], "bleu": 22.0, "hyp_logprob_per_seq": -8.0}}
    bad = {"status": "failed", "label": "sample", "split": "test", "error": "ConfigError: top_p=1.5",
           "setting": {"ckpt": "x", "decoding": {"method": "sample", "top_p": 1.5}}}
    page = render([ok, beam, bad])
    blob = page.split('<script type="application/json" id="report-data">')[1].split("</script>")[0]
    data = json.loads(blob.replace("<\\/", "</"))
    assert {"decoding.num_beams", "decoding.method"} <= set(data["varying"]) and "split" not in data["varying"]
    assert [r["status"] for r in data["runs"]] == ["ok", "ok", "failed"]
    assert data["runs"][2]["error"] == "ConfigError: top_p=1.5" and data["runs"][1]["metrics"]["bleu"] == 22.0
    assert data["shown_metrics"][:2] == ["bleu", "chrf"] and math.isfinite(ok["metrics"]["bleu"])


def test_progress_log_lines_carry_an_eta(caplog):
    from types import SimpleNamespace

    from seqlab.train.fit import ProgressLog

    progress = ProgressLog(every_n_steps=2)
    trainer = SimpleNamespace(global_step=0, max_steps=10, callbacks=[], is_global_zero=True,
                              callback_metrics={"train/loss": 1.0, "train/lr": 1e-3})
    batch = SimpleNamespace(n_tokens=100)
    with caplog.at_level("INFO"):
        for step in range(1, 5):
            trainer.global_step = step
            progress.on_train_batch_end(trainer, None, None, batch, step)
    lines = [r.getMessage() for r in caplog.records if "ETA" in r.getMessage()]
    assert len(lines) == 2 and lines[0].startswith("step 2 ") and lines[-1].split("ETA ")[1].count(":") == 2


def test_progress_is_line_based_off_a_terminal(caplog):
    import io

    from seqlab.progress import Progress

    progress = Progress(total=10, desc="decoding", every=0.0, stream=io.StringIO())
    with caplog.at_level("INFO"):
        for _ in range(2):
            progress(5)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("decoding: 5/10") and "ETA" in lines[0] and lines[1].startswith("decoding: 10/10")
    assert progress.bar is None


def test_auto_precision_follows_amx_or_the_measured_gemm_rates():
    import torch

    from seqlab.hardware import auto_precision

    def rates(fp32: float, bf16: float):
        return lambda dtype: fp32 if dtype == torch.float32 else bf16

    assert auto_precision("cpu", {"avx512f", "amx_bf16"}, rates(1.0, 0.1))[0] == "bf16-mixed"  # AMX: no timing
    precision, why = auto_precision("cpu", {"avx512f", "avx512_bf16"}, rates(300e9, 150e9))
    assert precision == "32-true" and "150 GFLOP/s in bf16, 300 in fp32" in why
    assert auto_precision("cpu", {"avx512_bf16"}, rates(100e9, 400e9))[0] == "bf16-mixed"
    assert auto_precision("cpu", set(), rates(100e9, 120e9))[0] == "32-true"  # under the margin
    assert auto_precision("gpu", set())[0] == "bf16-mixed"


def test_adamw_is_fused_where_torch_has_the_kernel_and_matches_the_loop():
    """Fused by default on CPU (not under fp16 loss scaling, nor when set false); the fused update equals
    the per-parameter loop's within rounding, with weight decay in one group and none in the other."""
    from seqlab.train.optim import adamw, use_fused

    params = [torch.zeros(3, requires_grad=True)]
    assert all(use_fused(None, params, precision) for precision in ("bf16-mixed", "32-true", None))
    assert not use_fused(None, params, "16-mixed") and not use_fused(False, params, "32-true")
    assert use_fused(True, params, "16-mixed")
    assert not use_fused(None, [torch.zeros(3, device="meta")], "32-true")
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(30, 17, generator=g), torch.randn(40, generator=g)]
    grads = [[torch.randn(p.shape, generator=g) for p in start] for _ in range(10)]
    result = []
    for fused in (True, False):
        ps = [p.clone().requires_grad_() for p in start]
        opt = adamw([{"params": ps[:1], "weight_decay": 0.1}, {"params": ps[1:], "weight_decay": 0.0}],
                    lr=1e-2, betas=(0.9, 0.98), fused=fused)
        assert bool(opt.param_groups[0]["fused"]) is fused
        for step in grads:
            for p, grad in zip(ps, step, strict=True):
                p.grad = grad.clone()
            opt.step()
        result.append(ps)
    for a, b, p in zip(*result, start, strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-6) and not torch.equal(a, p)


def test_no_warmup_ramp_starts_at_the_peak_and_keeps_the_decay():
    """optim.warmup_ramp=false: the peak rate from the first update, then the very schedule of the warmed-up
    run (inverse_sqrt: sqrt(warmup / step)); warmup_steps=0 would decay as sqrt(1 / step) instead."""
    warm, cold = lr_multiplier("inverse_sqrt", 500), lr_multiplier("inverse_sqrt", 500, ramp=False)
    assert warm(1) == 1 / 500 and cold(1) == 1.0 and cold(499) == 1.0
    assert all(warm(s) == cold(s) for s in (500, 501, 2000, 3300))
    assert cold(3300) == pytest.approx((500 / 3300) ** 0.5)
    assert lr_multiplier("inverse_sqrt", 0)(500) == pytest.approx(500 ** -0.5)  # the rescaled decay avoided
    constant = lr_multiplier("constant", 75, ramp=False)
    assert [constant(s) for s in (1, 74, 75, 300)] == [1.0] * 4 == [lr_multiplier("constant", 0)(s)
                                                                    for s in (1, 74, 75, 300)]
