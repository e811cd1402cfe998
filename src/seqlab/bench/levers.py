"""What each training lever gives (`seqlab bench levers=true`): the plain training step, the output projection
fused with the loss (`train.fused_loss`), its block arithmetic compiled (`train.compile=loss`), the layers
compiled (`train.compile=layers`), the step in bf16 on bf16 weights (`train.bf16_weights`, where the run is
bf16-mixed) and their combinations; on a GPU also the whole update replayed as a CUDA graph (`step graphs`,
seqlab.train.graphs: forward, loss, backward and fused AdamW in one launch) and Liger-Kernel's fused linear
cross-entropy in place of seqlab's fused loss (`Liger fused loss`, where `liger-kernel` is installed: the
`liger` extra); against Hugging Face's step with the same weights and batches, timed in one run, in the
precision that training picks on this device by default (`trainer.precision=auto`: bf16-mixed on a GPU or an
AMX CPU, else whichever of bf16 and fp32 multiplies faster here).

Each lever keeps the plain step's loss up to rounding; the bench checks it on the run's first batch without
dropout (`loss_delta`). A compiled model's first steps include the compile (`warmup_s`, reported apart from
the steady rate; a second run with the same shapes reads the compile cache and is faster).
"""

from __future__ import annotations

import copy
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from seqlab.bench.speed import (
    BenchConfig,
    Update,
    batch_tokens,
    bench_optimizer,
    eager_update,
    hf_train_step,
    matmul_peak,
    profile_table,
    random_batch,
    seqlab_train_step,
    train_flops,
    train_throughput,
)
from seqlab.bf16_gemm import bf16_autocast
from seqlab.config import resolve_device
from seqlab.hardware import auto_precision, best_of, sync
from seqlab.interop import to_hf
from seqlab.model import Model, Seq2SeqTransformer
from seqlab.train.graphs import Buckets, GraphedTrainStep
from seqlab.train.levers import compile_layers, step_loss, use_compile_cache

log = logging.getLogger("seqlab.bench")
# name -> (train.fused_loss, layers compiled, loss compiled, train.bf16_weights)
LEVERS = {"plain": (False, False, False, False), "fused loss": (True, False, False, False),
          "fused loss, compiled": (True, False, True, False), "compiled layers": (False, True, False, False),
          "fused loss + compiled layers": (True, True, False, False), "all compiled": (True, True, True, False),
          "bf16 weights": (False, False, False, True), "bf16 weights + fused loss": (True, False, False, True)}
GRAPHED = "step graphs"  # the plain step's arithmetic, the whole update captured (GPU)
LIGER = "Liger fused loss"  # Liger-Kernel's fused linear cross-entropy (GPU, the `liger` extra)


@dataclass(frozen=True)
class LeverTiming:
    """One training step's variant: steady tokens/s, peak memory, MFU against the run's measured bf16 peak,
    the warm-up steps' seconds (compile included) and its loss on the first batch minus the plain step's."""

    name: str
    tokens_per_s: float
    step_s: float
    peak_mb: float
    mfu: float
    warmup_s: float
    loss_delta: float | None  # None for Hugging Face, whose loss is another function's


def lever_bench(cfg: BenchConfig, profile: bool = False) -> tuple[str, list[LeverTiming], dict[str, str]]:
    """The precision timed, the rows, and with `profile` torch.profiler's table of each variant's step."""
    device = torch.device(resolve_device("bench", cfg.device))
    precision, why = auto_precision("gpu" if device.type == "cuda" else "cpu")
    log.info("levers in %s (%s)", precision, why)
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    model = Seq2SeqTransformer(cfg.model_config()).to(device)
    batches = [random_batch(cfg, g, device=device) for _ in range(cfg.warmup_steps + cfg.train_steps)]
    reference = first_loss(model, batches[0], cfg, False, precision)
    models, steps, warmup, delta = {}, {}, {}, {}
    use_compile_cache()
    for name, (fused, layers, loss, bf16) in LEVERS.items():
        if bf16 and precision != "bf16-mixed":
            log.info("%s: left out (a lever of bf16-mixed training; levers run in %s here)", name, precision)
            continue
        m = copy.deepcopy(model)
        if layers:
            compile_layers(m)
        delta[name] = first_loss(m, batches[0], cfg, fused, precision, loss, bf16) - reference
        models[name], steps[name] = m, seqlab_train_step(m, cfg.label_smoothing, fused, loss, bf16)
    gpu_levers(model, batches[0], cfg, precision, models, steps, delta, reference)
    models["Hugging Face"] = to_hf(model).to(device)
    steps["Hugging Face"] = hf_train_step(models["Hugging Face"], cfg.label_smoothing)
    delta["Hugging Face"] = None
    for name, m in list(models.items()):
        try:
            m.train()
            warmup[name] = warm_up(update_of(name)(m, steps[name], precision), batches[: cfg.warmup_steps])
        except RuntimeError as err:  # a GPU lever that cannot run here (a capture or a Triton kernel failing)
            if name not in (GRAPHED, LIGER):
                raise
            log.warning("%s: left out, it failed on this device: %s", name, err)
            del models[name], steps[name], delta[name]

    def run(name: str):
        r = train_throughput(models[name], steps[name], batches, precision, cfg.warmup_steps, update=update_of(name))
        return r, r.step_s

    best = {name: r for name, (r, _) in best_of({n: lambda n=n: run(n) for n in models}, cfg.train_repeats).items()}
    peak = matmul_peak(torch.bfloat16 if precision == "bf16-mixed" else torch.float32, device)
    flops = train_flops(models["plain"].cfg, cfg.batch, cfg.seq_len, cfg.seq_len)
    rows = [LeverTiming(name, r.tokens_per_s, r.step_s, r.peak_mem_mb, flops / r.step_s / peak, warmup[name],
                        delta[name]) for name, r in best.items()]
    for r in rows:
        log.info("%-30s %10.0f tok/s  MFU %.1f%%  peak %.0f MiB  warm-up %.1f s", r.name, r.tokens_per_s,
                 100 * r.mfu, r.peak_mb, r.warmup_s)
    profiles = {}
    for name in models if profile else ():  # where each variant's time goes: what a lever removed, what is left
        batch, update = itertools.cycle(batches), update_of(name)(models[name], steps[name], precision)
        profiles[name] = profile_table(lambda update=update, batch=batch: update(next(batch)), device)
    return precision, rows, profiles


def gpu_levers(model: Model, batch: dict[str, torch.Tensor], cfg: BenchConfig, precision: str, models: dict,
               steps: dict, delta: dict, reference: float) -> None:
    """Add the levers that run on a GPU only: the graphed whole step, and Liger's loss where it is installed."""
    if batch["src"].device.type != "cuda":
        log.info("%s, %s: left out (CUDA graphs and Liger's Triton kernels run on a GPU)", GRAPHED, LIGER)
        return
    models[GRAPHED] = copy.deepcopy(model)
    steps[GRAPHED] = seqlab_train_step(models[GRAPHED], cfg.label_smoothing)
    delta[GRAPHED] = 0.0  # the plain step's arithmetic, replayed
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        log.info("%s: left out (liger-kernel is not installed: pip install 'seqlab[liger]')", LIGER)
        return
    models[LIGER] = copy.deepcopy(model)
    steps[LIGER] = liger_train_step(models[LIGER], cfg.label_smoothing, LigerFusedLinearCrossEntropyLoss)
    models[LIGER].eval()
    with torch.no_grad(), bf16_autocast("cuda", precision == "bf16-mixed"):
        delta[LIGER] = float(steps[LIGER](batch)) - reference
    models[LIGER].train()


def liger_train_step(model: Model, eps: float, loss_class: type) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    """The decoder's states scored by Liger's fused linear cross-entropy (chunks of rows projected and scored
    in Triton kernels, the logits never whole). Its label smoothing is torch's (eps / V on every token), not
    fairseq's (eps / (V - 1) off the target), so its loss differs from the plain step's by that formula."""
    loss = loss_class(ignore_index=model.cfg.pad_id, label_smoothing=eps, reduction="mean")

    def step(b: dict[str, torch.Tensor]) -> torch.Tensor:
        h = model.output_states(b["src"], b["pad"], b["tgt_in"])  # (B, T, d)
        return loss(model.output.weight, h.reshape(-1, h.shape[-1]), b["tgt"].reshape(-1), model.output.bias)
    return step


def graphed_update(model: torch.nn.Module, step: Callable[[dict[str, torch.Tensor]], torch.Tensor],
                   precision: str) -> Callable[[dict[str, torch.Tensor]], int]:
    """`step` (a batch's mean loss) as one captured update with the bench's AdamW (fused, its state on the
    GPU); the bench's batches share one shape, so one graph. Returns each update's source+target tokens."""
    graphed = GraphedTrainStep(list(model.parameters()), step, bench_optimizer(model, capturable=True),
                               bf16=precision == "bf16-mixed", buckets=Buckets(1, 1))

    def update(b: dict[str, torch.Tensor]) -> int:
        graphed(b)
        return batch_tokens(b)
    return update


def update_of(name: str) -> Callable[..., Update]:
    """What makes a lever's update from (model, step, precision): the graphed one for `step graphs`, else the
    bench's eager update."""
    return graphed_update if name == GRAPHED else eager_update


def first_loss(model: Model, batch: dict[str, torch.Tensor], cfg: BenchConfig, fused: bool,
               precision: str, compiled_loss: bool = False, bf16: bool = False) -> float:
    """The mean loss of one batch in `precision`, dropout off: what each lever must keep."""
    model.eval()
    with torch.no_grad(), bf16_autocast(batch["src"].device.type, precision == "bf16-mixed"):
        loss, _, n = step_loss(model, batch["src"], batch["pad"], batch["tgt_in"], batch["tgt"], cfg.label_smoothing,
                               fused, compiled_loss, bf16)
    model.train()
    return float(loss / n)


def warm_up(update: Update, batches: list[dict[str, torch.Tensor]]) -> float:
    """Seconds of the first updates (each lever's update on a fresh optimizer): a compiled model compiles here,
    a graphed step captures."""
    start = time.perf_counter()
    for b in batches:
        update(b)
    sync(batches[0]["src"].device)
    return time.perf_counter() - start


def to_dict(rows: list[LeverTiming]) -> list[dict]:
    return [asdict(r) for r in rows]
