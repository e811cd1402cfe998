"""Decoding speed of causal LMs at real shapes (`seqlab bench language_models=true`): GPT-2 small and SmolLM-135M
(Llama's code: RMSNorm, RoPE, SwiGLU, grouped-query attention), built with random weights from the family's
transformers config class (nothing downloaded) and imported into seqlab (interop.hf.from_hf). Each continues
the same random prompts greedily and with beam 5 under one rule set (no forced or banned tokens, HF's early
stopping, length penalty 1), seqlab's right-padded batch against `generate`'s left-padded one and against
CTranslate2's `Generator` (fp32) on an export of the same model, all prompts in one call (its own batching:
beam search there forces the longer prompts' last tokens through the search, so some beam outputs may differ);
outputs compared with seqlab's. The first `families.ONE_AT_A_TIME` prompts are timed again one per call, as a
user continuing one prompt at a time calls (each trimmed of its padding: nobody pads a prompt alone).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import torch

from seqlab.bench.families import (
    DECODINGS,
    FamilyTiming,
    ct2_engine,
    random_sources,
    timed_both_ways,
    timed_ct2,
    timed_seqlab,
    until_end,
)
from seqlab.bench.speed import BenchConfig
from seqlab.config import ConfigError
from seqlab.data.sequences import pad_right
from seqlab.decoding import DecodingConfig

log = logging.getLogger("seqlab.bench")

SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt2": ("gpt2", dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                          bos_token_id=50256, eos_token_id=50256)),
    "smollm-135m": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                  num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                                  tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)),
}
# the instruct shapes, timed on their own (`shapes=[...]`: one such row costs as much as the base record)
INSTRUCT: dict[str, tuple[str, dict[str, Any]]] = {
    # an instruct model: Qwen2.5-0.5B-Instruct's shape and its two end tokens (<|im_end|>, <|endoftext|>)
    "qwen2.5-0.5b-instruct": ("qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                            num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                            max_position_embeddings=32768, tie_word_embeddings=True,
                                            bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=151643)),
}
# the shapes whose prompts are laid out as a chat template lays them out: (tokens before the source, after it),
# the same for every prompt (Qwen2.5's default system turn and user header; the turn's end and the assistant
# header): with sources of 20-40 tokens, prompts of ~100
CHAT: dict[str, tuple[int, int]] = {"qwen2.5-0.5b-instruct": (64, 5)}


def pick_shapes(names: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The shapes named (none: the base shapes, SHAPES), from SHAPES and INSTRUCT; an unknown name is refused
    with the known ones."""
    known = {**SHAPES, **INSTRUCT}
    if unknown := [n for n in names if n not in known]:
        raise ConfigError(f"shapes: no causal shape {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    return {n: known[n] for n in names} if names else dict(SHAPES)


def chat_prompts(src: torch.Tensor, mask: torch.Tensor, around: tuple[int, int], vocab: int, end: int, pad: int,
                 g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each source (its end token dropped) between one fixed run of `around[0]` tokens and one of `around[1]`
    that starts with the turn's end token, right-padded: a chat template's layout of random ids."""
    before = torch.randint(3, vocab - 1, (around[0],), generator=g).tolist()
    after = [end, *torch.randint(3, vocab - 1, (around[1] - 1,), generator=g).tolist()]
    rows = [[*before, *row[~pad_row][:-1].tolist(), *after] for row, pad_row in zip(src, mask, strict=True)]
    return pad_right(rows, pad)


def left_padded(src: torch.Tensor, mask: torch.Tensor, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """generate's batch of the same prompts: each row's tokens moved to the right, its padding to the left."""
    lengths = (~mask).sum(1)
    ids = torch.full_like(src, pad)
    for i, n in enumerate(lengths.tolist()):
        ids[i, src.shape[1] - n :] = src[i, :n]
    attention = torch.arange(src.shape[1])[None, :] >= (src.shape[1] - lengths)[:, None]
    return ids, attention.long()


def timed_generate(hf: Any, ids: torch.Tensor, attention: torch.Tensor, ends: tuple[int, ...]
                   ) -> tuple[list[list[int]], float]:
    import time

    start = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=attention)
    seconds = time.perf_counter() - start
    return [until_end(row[ids.shape[1]:], ends) for row in out.tolist()], seconds


def causal_bench(cfg: BenchConfig, repeats: int | None = None, shapes: dict | None = None,
                 chat: dict[str, tuple[int, int]] | None = None) -> list[FamilyTiming]:
    """Every shape in `shapes` (default SHAPES), greedy and beam 5: seqlab (its default engine and its oneDNN
    engine) against generate and CTranslate2's Generator (CPU, fp32); the shapes in `chat` (default CHAT)
    continue chat-laid-out prompts and end at any of their end tokens."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    from seqlab.interop.hf import from_hf
    from seqlab.model.onednn import onednn_available, onednn_linears

    chat = CHAT if chat is None else chat
    rows = []
    for shape, (kind, values) in (shapes or SHAPES).items():
        torch.manual_seed(cfg.seed)
        hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **values)).eval()
        model = from_hf(hf)
        pad, eos = model.cfg.pad_id, model.cfg.eos_id
        g = torch.Generator().manual_seed(cfg.seed)
        src, mask = random_sources(cfg.decode_sources, cfg.seq_len, model.cfg.src_vocab_size, pad, eos, g)
        if shape in chat:
            src, mask = chat_prompts(src, mask, chat[shape], model.cfg.src_vocab_size, eos, pad, g)
        ends = model.cfg.end_ids
        engine = ct2_engine(model)
        packed = onednn_linears(model) if onednn_available() else None
        for name, beams in DECODINGS:
            decoding = DecodingConfig(method="beam" if beams > 1 else "greedy", num_beams=beams,
                                      max_length=cfg.max_new_tokens, early_stopping=True, suppress_special=False)
            beam_rules = dict(early_stopping=True, length_penalty=1.0) if beams > 1 else {}
            hf.generation_config = GenerationConfig(num_beams=beams, max_new_tokens=cfg.max_new_tokens,
                                                    do_sample=False, pad_token_id=pad, eos_token_id=list(ends),
                                                    **beam_rules)
            calls = {"seqlab": partial(timed_seqlab, model, decoding=decoding),
                     "hf": partial(timed_generate_of, hf, pad=pad, ends=ends)}
            if engine is not None:
                calls["ct2"] = partial(timed_ct2, engine, decoding=decoding)
            if packed is not None:
                calls["onednn"] = partial(timed_seqlab, packed, decoding=decoding)
            rows += timed_both_ways(shape, name, calls, src, mask, repeats or cfg.decode_repeats)
    return rows


def timed_generate_of(hf: Any, src: torch.Tensor, mask: torch.Tensor, pad: int, ends: tuple[int, ...]
                      ) -> tuple[list[list[int]], float]:
    """`timed_generate` on seqlab's right-padded prompts, laid out as generate takes them (`left_padded`)."""
    return timed_generate(hf, *left_padded(src, mask, pad), ends)
