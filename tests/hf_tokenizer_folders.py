"""Hugging Face folders of every family with a tokenizer in the family's own file layout, built here: a
SentencePiece model trained on a few sentences (spiece.model for T5 and PEGASUS, sentencepiece.bpe.model for
mBART, NLLB and M2M100 with M2M100's vocab.json), BART's byte-level BPE (vocab.json, merges.txt), loaded by
the family's transformers tokenizer class and saved by it, beside a tiny random model of the matching size."""

from __future__ import annotations

import io
import json
from pathlib import Path

import sentencepiece as spm
import torch
import transformers

from tests.hf_families import COMMON, T5

TEXT = ["the quick brown fox jumps over the lazy dog", "a stitch in time saves nine",
        "summaries of packages and their uses", "Hello World! How are you today?",
        "numbers 123 and 4567 appear here", "el perro come la comida rápida", "déjà vu, naïve café"] * 30
SOURCES = ["the lazy dog saves nine", "Hello, how are you?", "numbers 42 appear"]
NLLB_CODES = ["eng_Latn", "fra_Latn", "spa_Latn"]


def train_spm(path: Path, **kw) -> None:
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT), model_writer=buffer, vocab_size=90, minloglevel=2,
                                   hard_vocab_limit=False, **kw)
    path.write_bytes(buffer.getvalue())


def spm_dir(root: Path, name: str, **kw) -> Path:
    folder = root / f"spm-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    train_spm(folder / name, **kw)
    return folder


def fairseq_spm(root: Path) -> Path:
    return spm_dir(root, "sentencepiece.bpe.model", model_type="bpe")


def t5_spm(root: Path) -> Path:
    return spm_dir(root, "spiece.model", pad_id=0, eos_id=1, unk_id=2, bos_id=-1)


def tokenizer(family: str, root: Path):
    """The family's transformers tokenizer over files built here."""
    if family in ("t5_v1.0", "t5_v1.1"):
        return transformers.T5Tokenizer.from_pretrained(t5_spm(root), extra_ids=5)
    if family == "pegasus":
        return transformers.PegasusTokenizer.from_pretrained(t5_spm(root))
    if family == "mbart":
        return transformers.MBartTokenizer.from_pretrained(fairseq_spm(root), src_lang="en_XX", tgt_lang="ro_RO")
    if family == "mbart50":
        return transformers.MBart50Tokenizer.from_pretrained(fairseq_spm(root), src_lang="en_XX", tgt_lang="ro_RO")
    if family == "nllb":
        return transformers.NllbTokenizer.from_pretrained(fairseq_spm(root), extra_special_tokens=NLLB_CODES,
                                                          src_lang="eng_Latn", tgt_lang="fra_Latn")
    if family == "m2m_100":
        folder = fairseq_spm(root)
        model = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.bpe.model"))
        pieces = [model.id_to_piece(i) for i in range(3, model.get_piece_size())]  # fairseq's dictionary order
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{p: i + 4 for i, p in enumerate(pieces)}}
        (folder / "vocab.json").write_text(json.dumps(vocab))
        return transformers.M2M100Tokenizer(str(folder / "vocab.json"), str(folder / "sentencepiece.bpe.model"),
                                            src_lang="en", tgt_lang="fr")
    if family == "bart":
        from tokenizers import ByteLevelBPETokenizer

        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(TEXT, vocab_size=300, min_frequency=1,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        folder = root / "bpe"
        folder.mkdir(parents=True, exist_ok=True)
        bpe.save_model(str(folder))
        return transformers.BartTokenizer.from_pretrained(folder)  # vocab.json and merges.txt, as bart-base ships
    raise KeyError(family)


def model(family: str, vocab: int, tok) -> transformers.PreTrainedModel:
    """A tiny random model of the family whose ids agree with the tokenizer's."""
    torch.manual_seed(0)
    if family.startswith("t5"):
        gated = family == "t5_v1.1"
        cfg = transformers.T5Config(**{**T5, "vocab_size": vocab + 4,  # more rows than pieces, as T5 ships
                                       "feed_forward_proj": "gated-gelu" if gated else "relu"})
        m = transformers.T5ForConditionalGeneration(cfg)
    else:
        cls, config_cls = {"pegasus": (transformers.PegasusForConditionalGeneration, transformers.PegasusConfig),
                           "bart": (transformers.BartForConditionalGeneration, transformers.BartConfig),
                           "m2m_100": (transformers.M2M100ForConditionalGeneration, transformers.M2M100Config)}.get(
            family, (transformers.MBartForConditionalGeneration, transformers.MBartConfig))
        if family == "nllb":
            cls, config_cls = transformers.M2M100ForConditionalGeneration, transformers.M2M100Config
        start = tok.eos_token_id if family != "pegasus" else tok.pad_token_id
        cfg = config_cls(**{**COMMON, "vocab_size": vocab}, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, decoder_start_token_id=start,
                         activation_function="gelu" if family in ("bart", "mbart", "mbart50") else "relu",
                         scale_embedding=family != "bart", forced_eos_token_id=tok.eos_token_id)
        m = cls(cfg)
    with torch.no_grad():
        for p in m.parameters():
            if p.requires_grad:
                p.add_(0.3 * torch.randn_like(p))
    return m.eval()


def folder(family: str, root: Path) -> tuple[Path, object, transformers.PreTrainedModel]:
    """(the saved folder, its transformers tokenizer, its transformers model)."""
    tok = tokenizer(family, root)
    codes = getattr(tok, "lang_code_to_id", None) or {"": 0}
    rows = max(len(tok), max(codes.values()) + 1)  # M2M100 numbers its language codes past len()
    hf = model(family, rows + (8 if family == "m2m_100" else 0), tok)  # and keeps 8 "made-up words" after them
    out = root / family
    hf.save_pretrained(out)
    tok.save_pretrained(out)
    return out, transformers.AutoTokenizer.from_pretrained(out), hf
