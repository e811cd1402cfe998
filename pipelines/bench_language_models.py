"""Causal LMs decoding at real shapes (`seqlab bench language_models=true`): GPT-2 small and SmolLM-135M
(Llama's code, grouped-query attention) with random weights, seqlab against Hugging Face `generate` on the
same prompts and against CTranslate2's Generator on an export of the same model, greedy and beam 5, outputs
compared; and the decoder-only and prefix LMs trained beside the encoder-decoder at equal layer parameters.
An instruct model's shape (Qwen2.5-0.5B-Instruct: two end tokens, chat-laid-out prompts) is its own stage: one
such row costs as much as the base record, so it is timed once after its warm-up. One record per stage and CPU
model (results/bench_language_models/language_models-<cpu>.json, instruct-<cpu>.json), one table per record."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from pipelines.bench import bench_records, machine_heading, side_heading
from pipelines.tables import table
from seqlab.bench.architectures import from_dict as trained_from_dict
from seqlab.bench.families import from_dict
from seqlab.pipeline.core import Pipeline, Stage, Table

# the instruct record's prompts (seqlab.bench.causal.CHAT)
CHAT_LAYOUT = (", each source between 64 tokens (a system turn and the user header) and 5 (the turn's end, the "
               "assistant header)")


def render(archive: Path, stage: str = "language_models", layout: str = "") -> str:
    """The decoding rows of each `stage` record (`layout`: how its prompts are laid out, for the heading)."""
    parts = []
    for record in bench_records(archive, f"{stage}-*.json"):
        found = from_dict(record["result"]["language_models"])
        with_ct2 = any(r.ct2_s is not None for r in found)  # records before the Generator export have none
        with_onednn = any(r.onednn_s is not None for r in found)  # nor the oneDNN engine's column
        rows = [[r.shape, f"{r.decoding}, one prompt a call" if r.one_at_a_time else r.decoding,
                 f"{r.tokens / r.seqlab_s:,.0f}", f"{r.hf_s and r.tokens / r.hf_s:,.0f}",
                 f"{r.x_hf:.2f}x", f"{r.equal_hf} of {r.sources}",
                 *([f"{r.x_ct2:.2f}x" if r.ct2_s else "-", f"{r.equal_ct2} of {r.sources}" if r.ct2_s else "-"]
                   if with_ct2 else []),
                 *([f"{r.hf_s / r.onednn_s:.2f}x" if r.onednn_s else "-",
                    f"{r.onednn_x_ct2:.2f}x" if r.onednn_x_ct2 is not None else "-",
                    f"{r.equal_onednn} of {r.sources}" if r.onednn_s else "-"] if with_onednn else [])]
                for r in found]
        header = ["shape (random weights)", "decoding", "seqlab tokens/s", "generate tokens/s", "seqlab vs generate",
                  "outputs equal generate's", *(["seqlab vs CTranslate2", "outputs equal CTranslate2's"]
                                                if with_ct2 else []),
                  *(["oneDNN engine vs generate", "oneDNN engine vs CTranslate2", "oneDNN outputs equal generate's"]
                    if with_onednn else [])]
        parts.append(side_heading(record, layout) + "\n\n" + table(header, rows))
    run = f"make pipeline NAME={archive.name} ARGS=\"--only {stage}\""
    return "\n\n".join(parts) or f"_No archived bench yet: `{run}`._"


def render_training(archive: Path) -> str:
    """The architectures trained at equal layer parameters, per record that has them."""
    parts = []
    for record in bench_records(archive, "language_models-*.json"):
        if "architectures" not in record["result"]:
            continue
        found = trained_from_dict(record["result"]["architectures"])
        base = {r.precision: r for r in found if r.architecture == "encoder_decoder"}
        rows = [[r.architecture.replace("_", "-"), r.precision, f"{r.layer_parameters:,}", str(r.d_ff),
                 f"{r.tokens_per_s:,.0f}", f"{r.tokens_per_s / base[r.precision].tokens_per_s:.2f}x",
                 f"{r.step_flops / 1e9:,.0f}", f"{r.mfu:.1%}", f"{r.peak_mem_mb:,.0f}"] for r in found]
        cfg = record["result"]["config"]
        heading = machine_heading(record, f"batches of {cfg['batch']} x {cfg['seq_len']} source and {cfg['seq_len']} "
                                          f"target tokens, best of {cfg['train_repeats']} x {cfg['train_steps']} steps")
        parts.append(heading + "\n\n" + table(
            ["architecture", "precision", "layer parameters", "d_ff", "tokens/s", "vs encoder-decoder",
             "GFLOP a step", "MFU", "peak MiB"], rows))
    return "\n\n".join(parts) or "_No archived training measurement yet: `make pipeline NAME=bench_language_models`._"


PIPELINE = Pipeline(
    "bench_language_models", "causal LMs decoding at GPT-2 small's and SmolLM-135M's shapes against generate",
    (Stage("language_models", "bench", ("language_models=true",)),
     Stage("instruct", "bench", ("language_models=true", "shapes=[qwen2.5-0.5b-instruct]", "bench.decode_repeats=1"))),
    (Table("bench_language_models", render, "docs/language_models.md"),
     Table("bench_instruct", partial(render, stage="instruct", layout=CHAT_LAYOUT), "docs/language_models.md"),
     Table("bench_architectures", render_training, "docs/language_models.md")),
)
