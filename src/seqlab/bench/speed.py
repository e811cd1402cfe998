"""Speed measurements of seqlab against Hugging Face `MarianMTModel` with identical weights and batches.

Both sides get the same model (seqlab's weights copied with `to_hf`), the same
token batches, the same optimizer and the same precision; the decoding runs
check that both produce identical outputs. FLOPs are counted analytically
(`train_flops`), peak FLOP/s is measured with a large matmul on this machine.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from seqlab.bench.result import Throughput
from seqlab.bf16_gemm import bf16_gemms
from seqlab.constants import BOS_ID, EOS_ID, PAD_ID
from seqlab.data.sequences import pad_right
from seqlab.decoding import DecodingConfig, generate, precision_context
from seqlab.engines.graphs import GraphedStep
from seqlab.hardware import gemm_rate, sync, timed
from seqlab.memory import release_freed_memory
from seqlab.model import Model, ModelConfig
from seqlab.train.levers import step_loss
from seqlab.train.optim import adamw

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchConfig:
    """Model shape, batch shape and repetitions."""

    d_model: int = 256
    n_heads: int = 4
    layers: int = 3
    d_ff: int = 1024
    vocab: int = 8000
    batch: int = 64
    seq_len: int = 40
    train_steps: int = 10  # timed steps per measurement (after warmup_steps); fewer drift with the VM
    warmup_steps: int = 3
    train_repeats: int = 3  # training rates are the best of this many measurements, seqlab and HF alternating
    decode_sources: int = 64
    max_new_tokens: int = 40
    num_beams: int = 5
    decode_repeats: int = 3  # decoding times: the best of this many runs, alternating, after one memory run
    label_smoothing: float = 0.1
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N (`seqlab.config.resolve_device`)
    decode: bool = True  # false: time training only

    def shaped_like(self, model: ModelConfig) -> BenchConfig:
        """This config with a loaded model's shape: the random training batches then hold token ids the model
        has (a smaller vocabulary than `vocab` would fail on them), and the archived config describes the
        model that was timed. Fresh models (scaling, position schemes) take the encoder's depth for both."""
        vocab = min(model.src_vocab_size, model.tgt_vocab_size or model.src_vocab_size)
        return replace(self, d_model=model.d_model, n_heads=model.n_heads, layers=model.encoder_layers,
                       d_ff=model.d_ff, vocab=vocab)

    def model_config(self, **overrides: Any) -> ModelConfig:
        values = dict(src_vocab_size=self.vocab, d_model=self.d_model, n_heads=self.n_heads,
                      encoder_layers=self.layers, decoder_layers=self.layers, d_ff=self.d_ff, dropout=0.1,
                      tie_embeddings="all", max_positions=512)
        values.update(overrides)
        return ModelConfig(**values)


# -- memory ---------------------------------------------------------------------------------
def on_cuda(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda"


def reset_peak_memory(device: torch.device | str = "cpu") -> None:
    """Reset the peak that `peak_memory_mb` reads: CUDA's peak-allocated counter on a GPU, else the
    process's peak RSS (Linux: free heap memory back to the OS, then write 5 to clear_refs)."""
    if on_cuda(device):
        torch.cuda.reset_peak_memory_stats(device)
        return
    release_freed_memory()  # else the heap kept from earlier phases hides this phase's peak
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_memory_mb(device: torch.device | str = "cpu") -> float:
    """Peak resident memory since the last reset (CUDA: the device's peak allocated), in MiB."""
    if on_cuda(device):
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# -- FLOPs ----------------------------------------------------------------------------------
def forward_flops(cfg: ModelConfig, batch: int, src_len: int, tgt_len: int) -> float:
    """Forward-pass FLOPs (2 per multiply-add) of one padded batch: projections, attention, output layer (a
    one-stack model's layers over the source and target as one sequence)."""
    d, f, v = cfg.d_model, cfg.d_ff, cfg.target_vocab_size
    if cfg.layout.one_sequence:  # one stack over source + decoder inputs; logits at the target positions only
        n = src_len + tgt_len
        return 2.0 * batch * (cfg.decoder_layers * n * (4 * d * d + 2 * d * f + 2 * n * d) + tgt_len * d * v)
    enc = cfg.encoder_layers * src_len * (4 * d * d + 2 * d * f + 2 * src_len * d)
    dec = cfg.decoder_layers * (tgt_len * (4 * d * d + 2 * d * d + 2 * d * f + 2 * tgt_len * d + 2 * src_len * d)
                                + src_len * 2 * d * d)  # cross-attention keys/values, once per source token
    out = tgt_len * d * v
    return 2.0 * batch * (enc + dec + out)


def train_flops(cfg: ModelConfig, batch: int, src_len: int, tgt_len: int) -> float:
    """Forward + backward (backward = 2x forward)."""
    return 3.0 * forward_flops(cfg, batch, src_len, tgt_len)


def matmul_peak(dtype: torch.dtype, device: torch.device | str = "cpu", repeats: int = 5) -> float:
    """Best measured FLOP/s of a square matmul in `dtype` on `device`: 2048 x 2048 on a CPU, 8192 x 8192
    on a GPU (a 2048 product is too small to keep a data-centre GPU busy)."""
    return gemm_rate(dtype, 8192 if on_cuda(device) else 2048, repeats, str(device))


# -- inputs -----------------------------------------------------------------------------------
def random_batch(cfg: BenchConfig, g: torch.Generator, seq_len: int | None = None,
                 device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Full-length sources and targets (no padding), as in the `batch x seq_len` target shape; drawn on
    the CPU (the same batches on every device), then moved to `device`."""
    n = seq_len or cfg.seq_len
    src = torch.randint(4, cfg.vocab, (cfg.batch, n), generator=g)
    src[:, -1] = EOS_ID
    tgt = torch.randint(4, cfg.vocab, (cfg.batch, n), generator=g)
    tgt[:, -1] = EOS_ID
    tgt_in = torch.cat([torch.full((cfg.batch, 1), BOS_ID), tgt[:, :-1]], 1)
    batch = {"src": src, "pad": torch.zeros_like(src, dtype=torch.bool), "tgt_in": tgt_in, "tgt": tgt}
    return {name: t.to(device) for name, t in batch.items()}


# -- training -------------------------------------------------------------------------------
def seqlab_train_step(model: Model, eps: float, fused_loss: bool = False, compiled_loss: bool = False,
                      bf16: bool = False) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    def step(b: dict[str, torch.Tensor]) -> torch.Tensor:
        loss, _, n = step_loss(model, b["src"], b["pad"], b["tgt_in"], b["tgt"], eps, fused_loss, compiled_loss,
                               bf16)
        return loss / n
    return step


def hf_train_step(model: Any, eps: float) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    """HF's forward plus the label-smoothed CE that HF's Trainer applies (`label_smoothing_factor`)."""
    def step(b: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = model(input_ids=b["src"], attention_mask=(~b["pad"]).long(), decoder_input_ids=b["tgt_in"]).logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), b["tgt"].view(-1),
                               ignore_index=PAD_ID, label_smoothing=eps)
    return step


def bench_optimizer(model: torch.nn.Module, capturable: bool = False) -> torch.optim.Optimizer:
    """The optimizer every timed training step uses, on both sides: AdamW as seqlab's training builds it
    (fused where torch has the kernel); `capturable` for a graphed step."""
    return adamw([{"params": list(model.parameters())}], lr=1e-4, betas=(0.9, 0.98), capturable=capturable)


def run_train_step(step: Callable[[dict[str, torch.Tensor]], torch.Tensor], opt: torch.optim.Optimizer,
                   b: dict[str, torch.Tensor], precision: str) -> int:
    """One update (forward under `precision`'s autocast, backward, optimizer); its source+target tokens. The
    backward runs in `bf16_gemms` as training's does: on a CPU without bf16 kernels its products too take
    the fp32 kernel, not the scalar bf16 fallback (seqlab.bf16_gemm)."""
    device, bf16 = b["src"].device.type, precision == "bf16-mixed"
    with bf16_gemms(device, bf16):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = step(b)
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return batch_tokens(b)


def batch_tokens(b: dict[str, torch.Tensor]) -> int:
    """A training batch's source + target tokens, what the training rates count."""
    return int((~b["pad"]).sum() + (b["tgt"] != PAD_ID).sum())


Update = Callable[[dict[str, torch.Tensor]], int]  # one update on a batch -> its source+target tokens


def eager_update(model: torch.nn.Module, step: Callable[[dict[str, torch.Tensor]], torch.Tensor],
                 precision: str) -> Update:
    """`run_train_step` with a fresh bench optimizer."""
    opt = bench_optimizer(model)
    return lambda b: run_train_step(step, opt, b, precision)


def train_throughput(model: torch.nn.Module, step: Callable[[dict[str, torch.Tensor]], torch.Tensor],
                     batches: list[dict[str, torch.Tensor]], precision: str, warmup: int,
                     update: Callable[..., Update] | None = None) -> Throughput:
    """Source+target tokens per second over the batches after `warmup` steps, and peak memory. `update`
    makes the update from (model, step, precision) in place of `run_train_step` (a graphed one)."""
    model.train()
    run = update(model, step, precision) if update is not None else eager_update(model, step, precision)
    device = batches[0]["src"].device
    reset_peak_memory(device)
    tokens, start = 0, 0.0
    for i, b in enumerate(batches):
        if i == warmup:
            sync(device)
            start, tokens = time.perf_counter(), 0
        tokens += run(b)
    sync(device)
    elapsed = time.perf_counter() - start
    return Throughput(tokens / elapsed, elapsed / (len(batches) - warmup), peak_memory_mb(device))


def profile_table(run: Callable[[], object], device: torch.device | str, repeats: int = 5, rows: int = 15) -> str:
    """Where `run`'s time goes: torch.profiler over `repeats` calls after one warm-up, operators by self time
    on the device (a GPU's kernels; the host's on a CPU), the top `rows`. The table's last lines give the
    host's and the device's totals: a device total far under the host's means the device waits on Python
    and kernel launches, not on arithmetic."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_cuda(device):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    run()
    sync(device)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(repeats):
            run()
        sync(device)
    key = "self_device_time_total" if on_cuda(device) else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows)


# -- decoding -------------------------------------------------------------------------------
def decode_sources(cfg: BenchConfig, g: torch.Generator, tokenizer: Any = None, texts: list[str] | None = None,
                   device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Real sentences when a tokenizer and texts are given, else random token sources of mixed lengths;
    (B, S) ids and pad mask on `device`."""
    if tokenizer is not None and texts:
        seqs = tokenizer.encode_source(texts[: cfg.decode_sources])
    else:
        lengths = torch.randint(cfg.seq_len // 2, cfg.seq_len + 1, (cfg.decode_sources,), generator=g)
        seqs = [torch.randint(4, cfg.vocab, (int(n) - 1,), generator=g).tolist() + [EOS_ID] for n in lengths]
    src, pad = pad_right(seqs, PAD_ID)
    return src.to(device), pad.to(device)


def seqlab_decode(model: Model, src: torch.Tensor, pad: torch.Tensor, beams: int,
                  max_new: int, bf16: bool = False, memory: bool = True, graphs: bool = False, min_new: int = 0
                  ) -> tuple[list[list[int]], float, float]:
    """Decode (greedy or beam), optionally in bf16 (`precision_context`) and with the decoder step replayed as a
    CUDA graph (`graphs`): sequences, seconds, peak MiB. `min_new`: EOS banned before that many tokens (an
    untrained model then runs to the limit, whatever its random weights say of EOS).

    memory=True measures the peak from a trimmed heap (`reset_peak_memory`), so this run pays its page
    faults; time later runs with memory=False, on the heap the earlier ones left (peak MiB: nan)."""
    cfg = DecodingConfig(method="beam", num_beams=beams, max_length=max_new, min_length=min_new) if beams > 1 else \
        DecodingConfig(max_length=max_new, min_length=min_new)
    if memory:
        reset_peak_memory(src.device)
    start = time.perf_counter()
    with precision_context("bf16" if bf16 else "fp32", src.device):
        out = generate(model, src, pad, cfg, step=GraphedStep if graphs else None)
    sync(src.device)
    elapsed = time.perf_counter() - start
    seqs = [out.sequences[i, 0, : out.lengths[i, 0]].tolist() for i in range(src.shape[0])]
    return seqs, elapsed, peak_memory_mb(src.device) if memory else float("nan")


def ct2_decode(engine: Any, src: torch.Tensor, pad: torch.Tensor, beams: int, max_new: int
               ) -> tuple[list[list[int]], float]:
    """CTranslate2's search on the same sources (seqlab's ids as its tokens), pad and BOS never emitted:
    sequences (EOS included where one was emitted) and seconds (`engines.ct2.CT2Engine`). Its beam search bans
    pad and BOS before its softmax: seqlab's beam search with `renormalize_logits=true`."""
    cfg = DecodingConfig(method="beam", num_beams=beams, max_length=max_new, renormalize_logits=True) \
        if beams > 1 else DecodingConfig(max_length=max_new)
    sources = [row[~p].tolist() for row, p in zip(src.cpu(), pad.cpu(), strict=True)]
    nbest, elapsed = less_pipe(engine, lambda: timed(lambda: engine.translate_ids(sources, cfg, max_new)))
    return [hyps[0] for hyps in nbest], elapsed


def less_pipe(engine: Any, run: Callable[[], tuple[Any, float]]) -> tuple[Any, float]:
    """run()'s (result, seconds), less the seconds spent meanwhile in the pipe to CTranslate2's own process
    (`CT2Engine.pipe_seconds`; nothing to subtract without an engine): every bench's CTranslate2 timing."""
    before = 0.0 if engine is None else engine.pipe_seconds
    out, seconds = run()
    return out, seconds - ((0.0 if engine is None else engine.pipe_seconds) - before)


def hf_decode(model: Any, src: torch.Tensor, pad: torch.Tensor, beams: int,
              max_new: int, memory: bool = True) -> tuple[list[list[int]], float, float]:
    """HF generate with the same rules: pad and BOS never emitted, HF's early stopping (`memory`: as
    in `seqlab_decode`)."""
    if memory:
        reset_peak_memory(src.device)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=src, attention_mask=(~pad).long(), num_beams=beams, do_sample=False,
                             max_new_tokens=max_new, early_stopping=True, length_penalty=1.0,
                             bad_words_ids=[[PAD_ID], [BOS_ID]], decoder_start_token_id=BOS_ID,
                             pad_token_id=PAD_ID, eos_token_id=EOS_ID, forced_eos_token_id=None)
    sync(src.device)
    elapsed = time.perf_counter() - start
    seqs = []
    for row in out[:, 1:].tolist():
        end = row.index(EOS_ID) + 1 if EOS_ID in row else len(row)
        seqs.append(row[:end])
    return seqs, elapsed, peak_memory_mb(src.device) if memory else float("nan")
