"""Speculative decoding against plain greedy search (`seqlab bench speculative=true ckpt=RUN [drafts=[A,B]]`): a
trained checkpoint decodes its test sentences (the first `bench.decode_sources`; 0: all) as an evaluation batches
them (`decode_texts`, fp32, seqlab's engine) greedily, then with prompt lookup (k = 2, 5 and adaptive) and with
each draft checkpoint (k = 3, 5), the runs alternating and each the best of `bench.decode_repeats`; CTranslate2's
greedy search on an export of the same checkpoint beside, and Hugging Face's `generate` on the same weights one
source a call, greedy and with its prompt lookup (which takes no batch). Each row: tokens/s and the time
against plain greedy (generate's: against its own), the share of proposals kept, tokens per decoder call, the
time spent proposing, and how many outputs equal seqlab's plain greedy's (all of them, but for a logit tie
within rounding: decoding.speculative).
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqlab.bench.speed import BenchConfig, less_pipe
from seqlab.checkpoint import load_for_inference, resolve
from seqlab.config import ConfigError
from seqlab.data import DataConfig
from seqlab.data.corpora import load_split
from seqlab.decoding import DecodingConfig
from seqlab.decoding.config import DRAFT_CHECKPOINT
from seqlab.decoding.speculative import SpeculativeStats
from seqlab.hardware import best_of
from seqlab.inference.evaluation import decode_texts, encode_sources
from seqlab.interop.families import InteropError
from seqlab.model import Model

log = logging.getLogger("seqlab.bench")
MAX_TOKENS = 8000  # source tokens x rows per batch: the evaluation's default


@dataclass(frozen=True)
class SpeculativeTiming:
    """One decoding of the test sentences against plain greedy search on the same sentences."""

    setting: str  # the decoding's label (greedy, greedy_lookup5, greedy_draft3, ctranslate2_greedy)
    draft: str  # none | lookup | the draft checkpoint
    sources: int
    tokens: int
    seconds: float
    greedy_seconds: float
    equal: int  # outputs equal plain greedy's
    acceptance: float | None = None  # the share of proposed tokens kept
    tokens_per_call: float | None = None  # tokens per row and decoder call
    draft_seconds: float | None = None  # of `seconds`, proposing
    model: str = ""  # the random shape and engine (`causal_speculative_bench`); "": the checkpoint's model
    batch: int = 0  # sources per call (`causal_speculative_bench`); 0: the evaluation's token-budget batches

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def speedup(self) -> float:
        """> 1: faster than plain greedy search."""
        return self.greedy_seconds / self.seconds


def settings(drafts: list[str]) -> dict[str, DecodingConfig]:
    """Plain greedy search first, then prompt lookup and each draft checkpoint."""
    greedy = DecodingConfig()
    out = {"greedy": greedy}
    for k, schedule in ((2, "fixed"), (5, "fixed"), (5, "adaptive")):
        cfg = replace(greedy, draft="lookup", draft_tokens=k, draft_schedule=schedule)
        out[cfg.label] = cfg
    for path in drafts:
        for k in (3, 5):
            cfg = replace(greedy, draft=f"{DRAFT_CHECKPOINT}{resolve(path)}", draft_tokens=k)
            out[f"{cfg.label}_{Path(path).name}"] = cfg
    return out


def speculative_bench(cfg: BenchConfig, checkpoint: str | None, drafts: list[str]) -> list[SpeculativeTiming]:
    """Every setting of `settings(drafts)` and CTranslate2's greedy search on `checkpoint`'s test sentences."""
    if not checkpoint:
        raise ConfigError("speculative=true times a trained model on its test sentences: give ckpt=RUN_DIR (and "
                          "drafts=[A,B] for draft models)")
    model, tokenizer, info = load_for_inference(resolve(checkpoint), device="cpu")
    if not info.data_config:
        raise ConfigError(f"ckpt={checkpoint} records no corpus; time a checkpoint of a seqlab training")
    sources = [e.source for e in load_split(DataConfig.from_dict(info.data_config).corpus, "test")]
    sources = sources[: cfg.decode_sources] if cfg.decode_sources else sources
    named = settings(drafts)
    runs = {name: (lambda d=decoding: decode_texts(model, tokenizer, sources, d, MAX_TOKENS))
            for name, decoding in named.items()}
    engine = ct2_engine(checkpoint, model, tokenizer)
    if engine is not None:
        runs["ctranslate2_greedy"] = lambda: decode_texts(model, tokenizer, sources, DecodingConfig(), MAX_TOKENS,
                                                          engine=engine)
    best = best_of({name: lambda run=run: less_pipe(engine, lambda: timed(run)) for name, run in runs.items()},
                   cfg.decode_repeats)
    rows = timings(best, "", 0, drafts={name: d.draft for name, d in named.items() if d.draft is not None})
    return rows + hf_rows(model, tokenizer, sources, cfg, best["greedy"])


# Hugging Face's prompt lookup (`generate(prompt_lookup_num_tokens=k)`) takes one source a call
HF_LOOKUP = (0, 2, 5)


def hf_rows(model: Any, tokenizer: Any, sources: list[str], cfg: BenchConfig, greedy: tuple
            ) -> list[SpeculativeTiming]:
    """`generate` on the checkpoint's Hugging Face model (interop.to_hf), one source a call, greedy and with
    prompt lookup of each k in HF_LOOKUP, on the same sources with seqlab's per-source length limits: each timed
    against generate's own greedy search, its outputs compared with seqlab's (`greedy`: its best run). No
    rows where transformers is missing or no family computes the model (said in the log)."""
    try:
        from seqlab.interop import to_hf

        hf = to_hf(model).eval()
    except (ImportError, ConfigError, InteropError) as err:
        log.warning("Hugging Face's rows are left out: %s", err)
        return []
    decoding = DecodingConfig()
    src_ids, _ = encode_sources(tokenizer, sources, model.cfg, decoding)
    runs = {"greedy" if k == 0 else f"greedy_lookup{k}": (lambda k=k: hf_one_at_a_time(hf, model, src_ids, decoding, k))
            for k in HF_LOOKUP}
    return timings(best_of(runs, cfg.decode_repeats), "hf generate", 1, greedy,
                   drafts={f"greedy_lookup{k}": "lookup" for k in HF_LOOKUP if k})


def hf_one_at_a_time(hf: Any, model: Any, src_ids: list[list[int]], decoding: DecodingConfig, k: int
                     ) -> tuple[tuple[list[list[int]], None], float]:
    """generate's greedy search on each source alone, with prompt lookup of k tokens (0: none), each limited to
    the new tokens seqlab's search gives that source (`generate.max_new_tokens`): (outputs cut at their end
    token), seconds."""
    from transformers import GenerationConfig

    from seqlab.decoding.generate import max_new_tokens
    from seqlab.interop.generation import generation_config

    values = generation_config(decoding, model.cfg)
    lookup = {"prompt_lookup_num_tokens": k} if k else {}
    prompts = [torch.tensor([ids]) for ids in src_ids]
    configs = [GenerationConfig(**{**values, "max_new_tokens": int(max_new_tokens(
        decoding, torch.zeros_like(src, dtype=torch.bool), model.cfg.max_positions)[0]), **lookup})
        for src in prompts]
    return generate_each(hf, prompts, configs, model.cfg.end_ids, continues=False)


def generate_each(hf: Any, prompts: list[Tensor], configs: list[Any], ends: tuple[int, ...], continues: bool
                  ) -> tuple[tuple[list[list[int]], None], float]:
    """generate on each (1, P) prompt alone under its GenerationConfig, timed: (the outputs cut at their end
    token, None), the seconds summed. An output starts after the prompt where the model continues it (a causal
    LM), else after the decoder start token."""
    from seqlab.bench.families import until_end

    outputs, seconds = [], 0.0
    for ids, gen in zip(prompts, configs, strict=True):
        start = time.perf_counter()
        with torch.no_grad():
            out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen)
        seconds += time.perf_counter() - start
        outputs.append(until_end(out[0, ids.shape[1] if continues else 1:].tolist(), ends))
    return (outputs, None), seconds


def timed(run: Any) -> tuple[tuple[list[list[int]], Any], float]:
    """((each source's best output, the speculation's stats), seconds) of one decoding."""
    decoded = run()
    return ([nbest[0][0] for nbest in decoded.hypotheses], decoded.speculation), decoded.seconds


BATCHES = ((1, [slice(i, i + 1) for i in range(4)]), (8, [slice(0, 8)]), (32, [slice(0, 32)]), (64, [slice(0, 64)]))


def causal_speculative_bench(cfg: BenchConfig) -> list[SpeculativeTiming]:
    """Prompt lookup against plain greedy search on a random model of GPT-2 small's shape (bench.causal), on
    seqlab's engine and on oneDNN's packed weights, at batches of 1 (the first 4 prompts one at a time), 8, 32
    and 64 prompts, each lookup verifying the proposals that pay (`draft_positions=paying`, the default) and, at
    k = 5, every proposal (`all`): what verifying several positions per call costs and gains at a real shape
    on this machine;
    beside it Hugging Face's prompt lookup (`generate(prompt_lookup_num_tokens=k)`, one prompt at a time: it
    takes no batch) against its own greedy search, and CTranslate2's greedy search against seqlab's. Random
    weights: how often the proposals are kept is what the random model's outputs give, not a real model's (the
    reference models' are in `speculative_bench`)."""
    from seqlab.bench.families import ct2_engine as random_ct2
    from seqlab.model.onednn import onednn_available, onednn_linears

    hf, model, src, mask = random_gpt2(cfg, max(batch for batch, _ in BATCHES))
    greedy = DecodingConfig(max_length=cfg.max_new_tokens, suppress_special=False)
    lookups = [replace(greedy, draft="lookup", draft_tokens=k, draft_positions=positions)
               for k, positions in ((2, "paying"), (5, "paying"), (5, "all"))]
    named = {"greedy": greedy, **{d.label: d for d in lookups}}
    decoders = {"seqlab": model, **({"seqlab_onednn": onednn_linears(model)} if onednn_available() else {})}
    drafted = {name: d.draft for name, d in named.items() if d.draft is not None}
    rows, plain = [], {}  # plain: seqlab's own greedy run per batch, what the peers' outputs are compared with
    for engine, decoder in decoders.items():
        for batch, groups in BATCHES:
            runs = {name: (lambda d=d, m=decoder, g=groups: seqlab_run(m, src, mask, g, d))
                    for name, d in named.items()}
            best = best_of(runs, cfg.decode_repeats)
            plain.setdefault(batch, best["greedy"])
            rows += timings(best, f"gpt2 (random), {engine}", batch, drafts=drafted)
    engine = random_ct2(model)
    if engine is not None:
        for batch, groups in BATCHES:
            best = best_of({"ctranslate2_greedy": lambda g=groups: ct2_run(engine, src, mask, g, greedy)},
                           cfg.decode_repeats)
            rows += timings(best, "gpt2 (random), ctranslate2", batch, plain[batch])
    runs = {"greedy" if k == 0 else f"greedy_lookup{k}": (lambda k=k: hf_run(hf, src, mask, BATCHES[0][1], cfg, k))
            for k in (0, 2, 5)}
    return rows + timings(best_of(runs, cfg.decode_repeats), "gpt2 (random), hf generate", 1, plain[1],
                          drafts={"greedy_lookup2": "lookup", "greedy_lookup5": "lookup"})


def timings(best: dict, model: str, batch: int, reference: tuple | None = None,
            drafts: dict[str, str] | None = None) -> list[SpeculativeTiming]:
    """The rows of one engine and batch, `best` as `best_of` gives it (name -> ((outputs, stats), seconds)): each
    timed against the run's own plain greedy search ("greedy"; where it has none, `reference`'s time) and its
    outputs compared with `reference`'s, seqlab's plain greedy run (default: the run's own). `drafts`: each
    speculative setting's draft (the others have none)."""
    base = reference or best["greedy"]  # ((outputs, stats), seconds)
    own = best["greedy"][1] if "greedy" in best else base[1]
    rows = []
    for name, ((outputs, stats), seconds) in best.items():
        measured = (stats.acceptance, stats.tokens_per_call, stats.draft_seconds) if stats is not None else (
            None, None, None)
        rows.append(SpeculativeTiming(name, (drafts or {}).get(name, "none"), len(outputs), sum(map(len, outputs)),
                                      seconds, own, sum(a == b for a, b in zip(outputs, base[0][0], strict=True)),
                                      *measured, model, batch))
        log.info("%s batch %d %s: %.1fs, %.2fx greedy", model or "checkpoint", batch, name, seconds,
                 rows[-1].speedup)
    return rows


def random_gpt2(cfg: BenchConfig, prompts: int) -> tuple[Any, Model, Tensor, Tensor]:
    """The causal speculative bench's inputs (and its profiling scripts'): a random model of GPT-2 small's shape
    (bench.causal) as Hugging Face's and as seqlab's import of it, and `prompts` random prompts (ids, pad mask),
    all from `cfg.seed`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from seqlab.bench.causal import SHAPES
    from seqlab.bench.families import random_sources
    from seqlab.interop.hf import from_hf

    torch.manual_seed(cfg.seed)
    kind, values = SHAPES["gpt2"]
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **values)).eval()
    model = from_hf(hf)
    src, mask = random_sources(prompts, cfg.seq_len, model.cfg.src_vocab_size, model.cfg.pad_id, model.cfg.eos_id,
                               torch.Generator().manual_seed(cfg.seed))
    return hf, model, src, mask


def seqlab_run(model: Any, src: Tensor, mask: Tensor, groups: list[slice], decoding: DecodingConfig
               ) -> tuple[tuple[list[list[int]], SpeculativeStats | None], float]:
    """Each group of prompts decoded in one call: (outputs, stats), seconds."""
    from seqlab.bench.families import timed_seqlab

    stats = SpeculativeStats() if decoding.draft is not None else None
    outputs, seconds = [], 0.0
    for rows in groups:
        out, s = timed_seqlab(model, src[rows], mask[rows], decoding, stats)
        outputs, seconds = outputs + out, seconds + s
    return (outputs, stats), seconds


def ct2_run(engine: Any, src: Tensor, mask: Tensor, groups: list[slice], decoding: DecodingConfig
            ) -> tuple[tuple[list[list[int]], None], float]:
    from seqlab.bench.families import timed_ct2

    outputs, seconds = [], 0.0
    for rows in groups:
        out, s = timed_ct2(engine, src[rows], mask[rows], decoding)
        outputs, seconds = outputs + out, seconds + s
    return (outputs, None), seconds


def hf_run(hf: Any, src: Tensor, mask: Tensor, groups: list[slice], cfg: BenchConfig, k: int
           ) -> tuple[tuple[list[list[int]], None], float]:
    """Hugging Face's greedy search, with prompt lookup of k tokens (0: none), one prompt per call."""
    from transformers import GenerationConfig

    eos = hf.config.eos_token_id
    lookup = {"prompt_lookup_num_tokens": k} if k else {}
    gen = GenerationConfig(max_new_tokens=cfg.max_new_tokens, do_sample=False, pad_token_id=eos, eos_token_id=eos,
                           **lookup)
    prompts = [src[rows][~mask[rows]][None] for rows in groups]  # (1, P) each prompt, unpadded
    return generate_each(hf, prompts, [gen] * len(prompts), (eos,), continues=True)


def ct2_engine(checkpoint: str, model: Any, tokenizer: Any) -> Any:
    """CTranslate2 fp32 on an export of the checkpoint, or None without CTranslate2 or where its Transformer cannot
    compute the model (copy attention, say: refused by name in the log, the row left out)."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        log.warning("ctranslate2 is not installed: its row is left out (pip install 'seqlab[ct2]')")
        return None
    from seqlab.engines.ct2 import CT2Engine

    try:
        return CT2Engine.for_checkpoint(resolve(checkpoint), model, tokenizer, Path(tempfile.mkdtemp()), None,
                                        "float32", own_process=True)  # its threads apart from PyTorch's
    except (ConfigError, InteropError) as err:
        log.warning("CTranslate2's row is left out: %s", err)
        return None


def to_dict(rows: list[SpeculativeTiming]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def from_dict(values: list[dict[str, Any]]) -> list[SpeculativeTiming]:
    return [SpeculativeTiming(**v) for v in values]
