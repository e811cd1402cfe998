"""A Hugging Face folder of an encoder-decoder or a causal LM, base or instruct (or a hub name in the local
cache), as a seqlab checkpoint: `seqlab import --hf DIR_OR_NAME --out FILE.ckpt` (`make import`).

The weights go through interop.hf.from_state (the family's variant, same logits); the tokenizer is the
family's own, checked against transformers' (interop.hf_tokenizers); the folder's `generation_config.json`
becomes the checkpoint's decoding defaults (interop.generation.decoding_of), which
`decoding_from_checkpoint=true` uses in `make eval` / `make translate`; its end-token list (an instruct model's
several) ends rows, its pad token (or the tokenizer's) pads them, and its chat template is kept with the
tokenizer (data.chat). Language codes (`src_lang`, `tgt_lang`) and T5's task prefix are stored as the
tokenizer's defaults; evaluation and translation can change them. The checkpoint has no training corpus:
evaluate it on `corpus=...` or `source=... references=[...]`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from seqlab.checkpoint import git_revision, start_from
from seqlab.decoding import DecodingConfig
from seqlab.interop.families import InteropError, first_id
from seqlab.interop.generation import decoding_of
from seqlab.interop.hf import from_state
from seqlab.interop.hf_folder import read_json, read_weights, resolve_folder
from seqlab.interop.hf_tokenizers import read_tokenizer

# config.json keys transformers reads as generation defaults when the folder has no generation_config.json
GENERATION_KEYS = ("max_length", "min_length", "num_beams", "length_penalty", "no_repeat_ngram_size",
                   "early_stopping", "forced_bos_token_id", "forced_eos_token_id", "bad_words_ids",
                   "decoder_start_token_id", "max_new_tokens", "do_sample")


def decoding_defaults(folder: Path, config: dict[str, Any]) -> DecodingConfig:
    """The folder's generation defaults as transformers' `generate` reads them."""
    path = folder / "generation_config.json"
    given = read_json(path) if path.is_file() else {k: config[k] for k in GENERATION_KEYS if k in config}
    try:
        return decoding_of(given)
    except ValueError as err:
        raise InteropError(f"{path}: a generation setting seqlab cannot reproduce ({err})") from None


def end_tokens(folder: Path, config: dict[str, Any], eos: int, vocab: int) -> tuple[int, ...]:
    """The ids generation ends at, in their order: generation_config.json's `eos_token_id` where it has one (it
    wins over config.json's, as in `generate`), else config.json's, else the model's. An instruct model lists
    several (Qwen2.5-Instruct's <|im_end|> and <|endoftext|>, Llama 3.x's three): any ends a row, the first is
    what a forced or padded end writes. An id outside the vocabulary is refused, naming the file."""
    path = folder / "generation_config.json"
    named = path if path.is_file() and read_json(path).get("eos_token_id") is not None else folder / "config.json"
    given = read_json(path).get("eos_token_id") if path.is_file() else None
    given = config.get("eos_token_id") if given is None else given
    listed = given if isinstance(given, list) else ([given] if given is not None else [eos])
    ids = tuple(dict.fromkeys(int(i) for i in listed))
    outside = [i for i in ids if not 0 <= i < vocab]
    if outside or not ids:
        raise InteropError(f"{named}: eos_token_id={given} names {outside or 'no'} ids outside the vocabulary of "
                           f"{vocab}; the file belongs to another model")
    return ids


def given_pad(folder: Path, config: dict[str, Any]) -> int | None:
    """The pad token the folder names: config.json's, else generation_config.json's; None leaves it to the
    tokenizer (an instruct model's often has one; a base model without one pads with its EOS)."""
    path = folder / "generation_config.json"
    given = config.get("pad_token_id")
    given = read_json(path).get("pad_token_id") if given is None and path.is_file() else given
    return None if given is None else first_id(given)


def import_hf(source: str | Path, task_prefix: str | None = None, src_lang: str | None = None,
              tgt_lang: str | None = None) -> dict[str, Any]:
    """The checkpoint dict (weights + seqlab description) of a Hugging Face folder of a family seqlab computes
    (interop.catalog: the encoder-decoders and the causal LMs)."""
    folder = resolve_folder(source)
    config = read_json(folder / "config.json")
    model = from_state(config, read_weights(folder), str(folder / "config.json"))
    ends = end_tokens(folder, config, model.cfg.eos_id, model.cfg.target_vocab_size)
    pad = given_pad(folder, config)
    cfg = replace(model.cfg, eos_id=ends[0], extra_eos_ids=ends[1:], pad_id=model.cfg.pad_id if pad is None else pad)
    pad_from_tokenizer = cfg.layout.one_sequence and pad is None  # a causal LM's config names no pad token
    tokenizer = read_tokenizer(folder, (cfg.pad_id, 0, cfg.bos_id, cfg.eos_id), ends, pad_from_tokenizer)
    cfg = replace(cfg, pad_id=tokenizer.pad_id)
    try:
        tokenizer = tokenizer.with_settings(src_lang, tgt_lang, task_prefix)
    except ValueError as err:
        raise InteropError(str(err)) from None
    for side, pieces, rows in (("source", tokenizer.src_vocab_size, cfg.src_vocab_size),
                               ("target", tokenizer.tgt_vocab_size, cfg.target_vocab_size)):
        if pieces > rows:  # more rows than pieces is how T5 (32,128 for 32,100) and NLLB ship
            raise InteropError(f"{folder}: the tokenizer has {pieces} {side} pieces but the model only {rows} "
                               "embedding rows; the tokenizer belongs to another model")
    model.cfg = cfg
    cfg = start_from(model, tokenizer).cfg  # mBART-cc25 starts from its target language's code
    decoding = decoding_defaults(folder, config)
    forced = tokenizer.layout.forced_first
    if forced is not None and decoding.forced_bos_token_id is None:  # the target language's code comes first
        decoding = replace(decoding, forced_bos_token_id=forced)
    return {
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "global_step": 0,
        "seqlab": {"model_config": cfg.to_dict(), "tokenizer": tokenizer.to_checkpoint(), "data_config": {},
                   "run_config": {"run_name": folder.name if Path(source).is_dir() else str(source)},
                   "git_revision": git_revision(), "step": 0, "decoding": decoding.to_dict(),
                   "imported_from": str(source), "family": config.get("model_type")},
    }

