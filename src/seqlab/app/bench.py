"""`make bench`: seqlab against Hugging Face MarianMTModel, same shapes, batches and precision
(seqlab.bench.run measures; this command writes the JSON and prints the table).

seqlab bench [out=results/bench.json] [ckpt=RUN_DIR] [scaling=true] [positions=true] [profile=true] [bench.batch=64 ...]
seqlab bench families=true: decoding at t5-small's, bart-base's and opus-mt's shapes (bench.families)
seqlab bench language_models=true: causal LMs at GPT-2 small's and SmolLM-135M's shapes (bench.causal), and the
decoder-only and prefix LMs trained beside the encoder-decoder at equal parameters (bench.architectures);
with shapes=[qwen2.5-0.5b-instruct]: that shape alone (an instruct model's end tokens and chat-laid-out prompts),
no training
seqlab bench one_source=true: one source a call at the families' and the causal LMs' shapes, the compiled step
(engine=seqlab_compiled) against the eager one and CTranslate2 (bench.one_source)
seqlab bench int8=true: int8 decoding at the same shapes, seqlab's int8 engine (eager and compiled) against
CTranslate2's int8, 64 sources a call and one a call, each compared with seqlab fp32's outputs (bench.int8)
seqlab bench features=true: ensembles, the coverage penalty and contrastive search against the plain searches
(bench.features)
seqlab bench levers=true: each training lever (fused loss, compiled layers) against the plain step and HF
(bench.levers)
seqlab bench norms=true: LayerNorm against RMSNorm, a training step and greedy/beam-5 decoding (bench.norms)
seqlab bench finetune=true: a fine-tuning step at mBART-large's, NLLB-1.3B's and flan-t5-large's shapes, full, LoRA
and LoRA with activation checkpointing, against HF with peft: memory and speed (bench.finetune)
seqlab bench architectures=true: the encoder-decoder, a decoder-only LM and a prefix LM at equal parameters
decoding the same sources at three source lengths, every output forced to one length (bench.architectures)
seqlab bench checkpoints=[A,B,...]: trained checkpoints decoding their test sentences (bench.checkpoints)
seqlab bench speculative=true ckpt=RUN [drafts=[A,B]]: speculative decoding (prompt lookup, draft checkpoints)
against plain greedy search and CTranslate2 on the checkpoint's test sentences; without ckpt, prompt lookup on a
random model of GPT-2 small's shape at batches of 1, 8 and 32 (bench.speculative)
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig

from seqlab.app.cli import reraise
from seqlab.app.configs import plain, typed
from seqlab.app.store import CONF_DIR
from seqlab.bench.architectures import architecture_decoding, architecture_training
from seqlab.bench.architectures import to_dict as architectures_dict
from seqlab.bench.causal import causal_bench, pick_shapes
from seqlab.bench.checkpoints import checkpoint_bench
from seqlab.bench.checkpoints import to_dict as checkpoints_dict
from seqlab.bench.families import family_bench, to_dict
from seqlab.bench.features import feature_bench
from seqlab.bench.features import to_dict as features_dict
from seqlab.bench.finetune import ROUNDS as FINETUNE_ROUNDS
from seqlab.bench.finetune import finetune_bench
from seqlab.bench.finetune import to_dict as finetune_dict
from seqlab.bench.int8 import int8_bench
from seqlab.bench.int8 import to_dict as int8_dict
from seqlab.bench.levers import lever_bench
from seqlab.bench.levers import to_dict as levers_dict
from seqlab.bench.norms import norm_bench
from seqlab.bench.norms import to_dict as norms_dict
from seqlab.bench.one_source import one_source_bench
from seqlab.bench.one_source import to_dict as one_source_dict
from seqlab.bench.run import run_bench
from seqlab.bench.speculative import causal_speculative_bench, speculative_bench
from seqlab.bench.speculative import to_dict as speculative_dict
from seqlab.bench.speed import BenchConfig
from seqlab.config import ConfigError, resolve_device
from seqlab.engines.choice import choose_engine
from seqlab.hardware import CpuClock, cpu_description
from seqlab.io import atomic_write_text
from seqlab.memory import keep_freed_memory


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="bench")
def main(cfg: DictConfig) -> None:
    keep_freed_memory()  # every bench times seqlab under the allocator its commands run under (seqlab.memory)
    try:
        bench = typed(BenchConfig, plain(cfg.bench), "bench")
        shapes = [str(s) for s in cfg.get("shapes") or []]
        if shapes and not cfg.get("language_models"):
            raise ConfigError("shapes: names causal LM shapes, read with language_models=true only")
        if cfg.get("families"):
            record, text = families(bench)
        elif cfg.get("language_models"):
            record, text = families(bench, causal=True, shapes=shapes)
        elif cfg.get("one_source"):
            record, text = one_source_speeds(bench)
        elif cfg.get("int8"):
            record, text = int8_speeds(bench)
        elif cfg.get("features"):
            record, text = feature_costs(bench)
        elif cfg.get("levers"):
            record, text = lever_speeds(bench, bool(cfg.profile))
        elif cfg.get("norms"):
            record, text = norm_speeds(bench)
        elif cfg.get("finetune"):
            record, text = finetune_costs(bench)
        elif cfg.get("speculative"):
            record, text = speculative_speeds(bench, cfg.ckpt, [str(d) for d in cfg.get("drafts") or []])
        elif cfg.get("comet"):
            record, text = neural_speeds(bench, cfg.get("comet_python"))
        elif cfg.get("architectures"):
            record, text = architecture_speeds(bench)
        elif cfg.get("checkpoints"):
            record, text = checkpoint_speeds(bench, [str(c) for c in cfg.checkpoints])
        else:
            result = run_bench(bench, cfg.ckpt, cfg.scaling, cfg.positions, cfg.profile)
            record, text = result.to_dict(), result.table()
    except Exception as err:
        reraise("bench", err)
    out = Path(cfg.out)
    atomic_write_text(out, json.dumps(record, indent=2, default=str))
    print(text)
    print(f"wrote {out}")


def measured(key: str, rows: list[dict], bench: BenchConfig, clock: CpuClock) -> dict:
    """A side bench's record: its rows under `key`, the config, the machine and other processes' load since
    `clock` (a bench that others kept busy is not archived)."""
    return {key: rows, "config": asdict(bench), "cpu": cpu_description(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "others_busy_cores": clock.others_busy_cores(CpuClock.now())}


def families(bench: BenchConfig, causal: bool = False, shapes: list[str] | None = None) -> tuple[dict, str]:
    """The families' decoding bench (the encoder-decoders', or the causal LMs': the base shapes with the
    architectures' training, or the `shapes` named alone): its record and a text table."""
    picked = pick_shapes(shapes or []) if causal else None  # an unknown name fails before anything is timed
    clock = CpuClock.now()
    rows = causal_bench(bench, shapes=picked) if causal else family_bench(bench)
    lines = [f"{r.shape:<10}{r.decoding:<8}seqlab {r.tokens / r.seqlab_s:>8,.0f} tok/s  {r.x_hf:.2f}x generate"
             + (f"  {r.x_ct2:.2f}x CTranslate2" if r.x_ct2 is not None else "")
             + f"  ({r.equal_hf} of {r.sources} equal generate's)" for r in rows]
    if not causal:
        auto = auto_choices()
        lines += [f"engine=auto, {where}: {choice['engine']} ({choice['reason']})" for where, choice in auto.items()]
        return {**measured("families", to_dict(rows), bench, clock), "engine_auto": auto}, "\n".join(lines)
    if shapes:
        return measured("language_models", to_dict(rows), bench, clock), "\n".join(lines)
    trained = architecture_training(bench)  # the decoder-only and prefix LMs trained beside the encoder-decoder
    lines += [f"train {t.precision} {t.architecture:<16}{t.tokens_per_s:>8,.0f} tok/s  MFU {t.mfu:.1%}"
              for t in trained]
    record = measured("language_models", to_dict(rows), bench, clock)
    return {**record, "architectures": architectures_dict(trained)}, "\n".join(lines)


# what engine=auto is asked on a CPU: (where, rows per source, one source a call), greedy and beam 5
AUTO_CASES = (("many sources a call, greedy", 1, False), ("many sources a call, beam 5", 5, False),
              ("one source a call, greedy", 1, True), ("one source a call, beam 5", 5, True))


def auto_choices() -> dict[str, dict[str, str]]:
    """What `engine=auto` takes on this machine in each of AUTO_CASES, from fresh probes (not the cache), so that
    a record of both engines' speeds says which one a user gets."""
    return {where: asdict(choose_engine("fp32", "cpu", None, rows, one)) for where, rows, one in AUTO_CASES}


def one_source_speeds(bench: BenchConfig) -> tuple[dict, str]:
    """One source a call, the compiled step against the eager one and CTranslate2: the record and a text table."""
    clock = CpuClock.now()
    rows = one_source_bench(bench)
    lines = [f"{r.shape:<12}{r.decoding:<8}compiled {r.tokens / r.compiled_s:>7,.0f} tok/s  {r.compiled_x_seqlab:.2f}x "
             f"eager" + (f"  {r.compiled_x_ct2:.2f}x CTranslate2" if r.compiled_x_ct2 is not None else "")
             + f"  first pass {r.first_pass_s:.1f} s" for r in rows]
    return measured("one_source", one_source_dict(rows), bench, clock), "\n".join(lines)


def int8_speeds(bench: BenchConfig) -> tuple[dict, str]:
    """int8 decoding, seqlab (eager and compiled) against CTranslate2: the record and a text table."""
    clock = CpuClock.now()
    rows = int8_bench(bench)
    lines = [f"{r.shape:<12}{r.decoding:<6}{'one a call' if r.one_at_a_time else 'batch':<11}int8 "
             f"{r.tokens / r.seqlab_s:>7,.0f} tok/s"
             + (f"  {r.x_ct2:.2f}x, compiled {r.compiled_x_ct2:.2f}x CTranslate2 int8" if r.ct2_s is not None else "")
             + f"  ({r.equal_fp32} of {r.sources} equal fp32's)" for r in rows]
    return measured("int8", int8_dict(rows), bench, clock), "\n".join(lines)


def feature_costs(bench: BenchConfig) -> tuple[dict, str]:
    """The decoding features' bench: its record and a text table."""
    clock = CpuClock.now()
    rows = feature_bench(bench)
    lines = [f"{r.name:<36}{r.tokens / r.seconds:>8,.0f} tok/s  {r.cost:.2f}x {r.base}" for r in rows]
    return measured("features", features_dict(rows), bench, clock), "\n".join(lines)


def lever_speeds(bench: BenchConfig, profile: bool) -> tuple[dict, str]:
    """The training levers' bench: its record (with the device and any profile) and a text table."""
    clock = CpuClock.now()
    precision, rows, profiles = lever_bench(bench, profile)
    device = resolve_device("bench", bench.device)
    plain = next(r for r in rows if r.name == "plain")
    hf = next(r for r in rows if r.name == "Hugging Face")
    lines = [f"{r.name:<30}{r.tokens_per_s:>10,.0f} tok/s  {r.tokens_per_s / plain.tokens_per_s:.2f}x plain  "
             f"{r.tokens_per_s / hf.tokens_per_s:.2f}x HF  MFU {100 * r.mfu:.1f}%  {r.peak_mb:,.0f} MiB  "
             f"warm-up {r.warmup_s:.1f} s" for r in rows]
    record = measured("levers", levers_dict(rows), bench, clock)
    record["device"] = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    record["profiles"], record["precision"] = profiles, precision
    return record, "\n".join(lines)


def norm_speeds(bench: BenchConfig) -> tuple[dict, str]:
    """LayerNorm against RMSNorm: the record and a text table."""
    clock = CpuClock.now()
    precision, rows = norm_bench(bench)
    lines = [f"{r.norm:<10} train {r.train_tokens_per_s:>8,.0f} tok/s ({r.train_x_layernorm:.2f}x)  greedy "
             f"{r.greedy_tokens_per_s:>7,.0f} ({r.greedy_x_layernorm:.2f}x)  beam 5 {r.beam5_tokens_per_s:>7,.0f} "
             f"({r.beam5_x_layernorm:.2f}x)" for r in rows]
    record = measured("norms", norms_dict(rows), bench, clock)
    record["precision"] = precision
    return record, "\n".join(lines)


def finetune_costs(bench: BenchConfig) -> tuple[dict, str]:
    """The fine-tuning bench: its record and a text table."""
    clock = CpuClock.now()
    rows = finetune_bench(bench)
    lines = [f"{r.shape:<14}{r.mode:<22}{r.side:<8}" + (f"skipped: {r.skipped}" if r.skipped else
                                                       f"{r.tokens_per_s:>8,.0f} tok/s  {r.peak_mb:>9,.0f} MiB  "
                                                       f"{r.trainable:,} of {r.parameters:,} trained")
             for r in rows]
    return {**measured("finetune", finetune_dict(rows), bench, clock), "rounds": FINETUNE_ROUNDS}, "\n".join(lines)


def architecture_speeds(bench: BenchConfig) -> tuple[dict, str]:
    """The three architectures decoding at equal parameters: the record and a text table."""
    clock = CpuClock.now()
    rows = architecture_decoding(bench)
    lines = [f"{r.architecture:<16}{r.decoding:<8}sources of {r.source_tokens:>3}  {r.tokens_per_s:>8,.0f} tok/s"
             for r in rows]
    return measured("architectures_decoding", architectures_dict(rows), bench, clock), "\n".join(lines)


def checkpoint_speeds(bench: BenchConfig, checkpoints: list[str]) -> tuple[dict, str]:
    """Trained checkpoints decoding their test sentences: the record and a text table."""
    clock = CpuClock.now()
    rows = checkpoint_bench(bench, checkpoints)
    lines = [f"{r.run:<28}{r.decoding:<8}{r.tokens_per_s:>8,.0f} tok/s  {r.speedup:.2f}x the first" for r in rows]
    return measured("checkpoints", checkpoints_dict(rows), bench, clock), "\n".join(lines)


def run() -> int:
    """`seqlab bench`."""
    main()
    return 0


def neural_speeds(bench: BenchConfig, library_python: str | None) -> tuple[dict, str]:
    """COMET scoring and COMET-MBR against unbabel-comet: the record and a text table."""
    from seqlab.bench.neural import neural_bench
    from seqlab.bench.neural import to_dict as neural_dict

    clock = CpuClock.now()
    rows = neural_bench(bench, library_python)
    lines = [f"{r.task:<6}{r.items:>7,} items  seqlab {r.seqlab_s:7.2f} s ({r.encoded} sentences encoded)"
             + (f"  unbabel-comet {r.library_s:7.2f} s  {r.x_library:.2f}x  max |diff| {r.max_diff:.1e}"
                if r.library_s is not None else "  (unbabel-comet: comet_python= not given)") for r in rows]
    return measured("neural", neural_dict(rows), bench, clock), "\n".join(lines)


def speculative_speeds(bench: BenchConfig, checkpoint: str | None, drafts: list[str]) -> tuple[dict, str]:
    """Speculative decoding against plain greedy search: the record and a text table."""
    clock = CpuClock.now()
    rows = speculative_bench(bench, checkpoint, drafts) if checkpoint else causal_speculative_bench(bench)
    lines = [f"{r.model:<28}{r.batch or '':>4} {r.setting:<40}{r.tokens_per_s:>8,.0f} tok/s  {r.speedup:.2f}x "
             f"greedy  {r.equal}/{r.sources} equal"
             + (f"  kept {r.acceptance:.0%}, {r.tokens_per_call:.2f} tokens/call" if r.acceptance is not None else "")
             for r in rows]
    return measured("speculative", speculative_dict(rows), bench, clock), "\n".join(lines)
