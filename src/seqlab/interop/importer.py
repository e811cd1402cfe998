"""A Hugging Face Marian folder (e.g. a downloaded Helsinki-NLP/opus-mt-*) as a seqlab checkpoint:
`seqlab import --hf DIR --out FILE.ckpt` (`make import`).

The weights go through interop.hf.from_hf (same logits); the tokenizer keeps Marian's SentencePiece
models and its `vocab.json` numbering (data.mapped.MappedTokenizer, MarianTokenizer's rule); the
folder's `generation_config.json` becomes the checkpoint's decoding defaults
(DecodingConfig.from_generation_config), which `decoding_from_checkpoint=true` uses in
`make eval` / `make translate`. The checkpoint has no training corpus: evaluate it on
`corpus=...` or `source=... references=[...]`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqlab.checkpoint import git_revision
from seqlab.data.mapped import MappedTokenizer
from seqlab.decoding import DecodingConfig
from seqlab.interop.hf import from_hf


def read_vocab(path: Path) -> list[str]:
    """vocab.json (piece -> id) as a list indexed by id; ids must be 0..n-1."""
    mapping = json.loads(path.read_text(encoding="utf-8"))
    pieces = [""] * len(mapping)
    for piece, i in mapping.items():
        if not 0 <= int(i) < len(mapping):
            raise ValueError(f"{path}: id {i} of {piece!r} is outside 0..{len(mapping) - 1}")
        pieces[int(i)] = piece
    return pieces


def marian_tokenizer(folder: Path, hf_config: Any) -> MappedTokenizer:
    settings = json.loads((folder / "tokenizer_config.json").read_text()) if (folder / "tokenizer_config.json"
                                                                               ).is_file() else {}
    pieces = read_vocab(folder / "vocab.json")
    tgt_pieces = read_vocab(folder / "target_vocab.json") if settings.get("separate_vocabs") else None
    unk = pieces.index(settings.get("unk_token", "<unk>")) if settings.get("unk_token", "<unk>") in pieces else 0
    eos = hf_config.eos_token_id if isinstance(hf_config.eos_token_id, int) else hf_config.eos_token_id[0]
    special = (hf_config.pad_token_id, unk, hf_config.decoder_start_token_id, eos)
    return MappedTokenizer((folder / "source.spm").read_bytes(), (folder / "target.spm").read_bytes(), pieces,
                           tgt_pieces, special)


def import_marian(folder: str | Path) -> dict[str, Any]:
    """The checkpoint dict (weights + seqlab description) of a Marian save_pretrained folder."""
    from transformers import GenerationConfig, MarianMTModel

    folder = Path(folder)
    hf = MarianMTModel.from_pretrained(folder)
    model = from_hf(hf)
    tokenizer = marian_tokenizer(folder, hf.config)
    gc = GenerationConfig.from_pretrained(folder) if (folder / "generation_config.json").is_file() else hf.config
    decoding = DecodingConfig.from_generation_config(gc if isinstance(gc, GenerationConfig) else
                                                     GenerationConfig.from_model_config(gc))
    return {
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "global_step": 0,
        "seqlab": {"model_config": model.cfg.to_dict(), "tokenizer": tokenizer.to_checkpoint(), "data_config": {},
                   "run_config": {"run_name": folder.name}, "git_revision": git_revision(), "step": 0,
                   "decoding": decoding.to_dict(), "imported_from": str(folder.resolve())},
    }
