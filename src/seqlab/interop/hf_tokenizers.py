"""A family's tokenizer as seqlab stores it, read from a Hugging Face folder through transformers' own
tokenizer class (the reference), and checked against it before anything is written.

transformers 5 runs BART, mBART(-50), PEGASUS, T5 and NLLB through the `tokenizers` library: seqlab keeps
the very `tokenizer.json` (data.hf_tokenizer.JsonTokenizer). Marian and M2M100 stay SentencePiece plus a
`vocab.json` numbering (data.mapped.MappedTokenizer). Where each family puts its special tokens and
language codes is read off the reference tokenizer by encoding a probe (`learn_layout`), then every probe
text is encoded and decoded by both; a difference refuses the import, naming the tokenizer's file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqlab.data.chat import ChatTemplate, chosen_template
from seqlab.data.hf_tokenizer import JsonTokenizer
from seqlab.data.layout import SRC, TEXT, TGT, Item, TextLayout
from seqlab.data.mapped import MappedTokenizer
from seqlab.interop.families import InteropError
from seqlab.interop.hf_folder import read_json

PROBES = ("Hello world, this is a test.", "Numbers 12 and 3.5 appear; so does 'quoted' text!", "  spaced   out  ",
          "déjà vu — naïve café", "a", "")


def languages_of(hf: Any) -> dict[str, int]:
    """Hugging Face's language names -> the ids of their codes (mBART, M2M100: lang_code_to_id; NLLB: its
    extra special tokens, which are the codes)."""
    table = getattr(hf, "lang_code_to_id", None)
    if isinstance(table, dict) and table:
        return {str(k): int(v) for k, v in table.items()}
    if hasattr(hf, "src_lang"):
        extra = list(getattr(hf, "extra_special_tokens", None) or getattr(hf, "additional_special_tokens", []) or [])
        names = [str(t) for t in extra if isinstance(t, str) and "_" in t and not t.startswith("<")]
        return {n: int(hf.convert_tokens_to_ids(n)) for n in names}
    return {}


def template(full: list[int], content: list[int], code: int | None, slot: str) -> tuple[Item, ...]:
    """The template that turns `content` into `full`, with the language code `code` (if any) as `slot`."""
    for i in range(len(full) - len(content) + 1):
        if full[i : i + len(content)] == content:
            items: list[Item] = [*full[:i], TEXT, *full[i + len(content) :]]
            return tuple(slot if code is not None and x == code else x for x in items)
    raise ValueError("the text's ids are not a contiguous part of the encoded text")


def encode(hf: Any, text: str, side: str) -> list[int]:
    out = hf(text) if side == "source" else hf(text_target=text)
    return list(out["input_ids"])


def learn_layout(hf: Any, where: Path) -> TextLayout:
    """The reference tokenizer's templates, language codes and decoding rules."""
    languages = languages_of(hf)
    src, tgt = (getattr(hf, "src_lang", None), getattr(hf, "tgt_lang", None)) if languages else (None, None)
    if languages:
        src = src if src in languages else sorted(languages)[0]
        tgt = tgt if tgt in languages else src
        hf.src_lang, hf.tgt_lang = src, tgt
    probe = PROBES[0]
    content = list(hf(probe, add_special_tokens=False)["input_ids"])
    try:
        source = template(encode(hf, probe, "source"), content, languages.get(src), SRC)
        target = template(encode(hf, probe, "target"), content, languages.get(tgt), TGT)
    except ValueError as err:
        raise InteropError(f"{where}: {err}; seqlab cannot place this tokenizer's special tokens") from None
    return TextLayout(source, target, languages, src, tgt, "", special_ids(hf),
                      bool(getattr(hf, "clean_up_tokenization_spaces", False)))


def special_ids(hf: Any) -> tuple[int, ...]:
    """The ids batch_decode(skip_special_tokens=True) drops: the named special tokens and every added token
    marked special (an instruct model's <|im_start|>, <|eot_id|>, ...)."""
    added = getattr(hf, "added_tokens_decoder", None) or {}
    marked = {int(i) for i, token in added.items() if getattr(token, "special", False)}
    return tuple(sorted({*(int(i) for i in hf.all_special_ids), *marked}))


def check_same(hf: Any, ours: Any, layout: TextLayout, where: Path) -> None:
    """Every probe encodes to the same ids (both sides, two languages where it has them) and decodes to the
    same text as batch_decode(skip_special_tokens=True); else refuse, naming the file."""
    names = sorted(layout.languages)
    pairs = [(layout.src_lang, layout.tgt_lang)] + ([(names[-1], names[0])] if len(names) > 1 else [])
    for src, tgt in pairs:
        if src is not None:
            hf.src_lang, hf.tgt_lang = src, tgt
        tok = ours.with_settings(src, tgt)
        for text in PROBES:
            for side, mine in (("source", tok.encode_source([text])[0]), ("target", tok.encode_target([text])[0])):
                theirs = encode(hf, text, side)
                if mine != theirs:
                    raise InteropError(f"{where}: seqlab cannot reproduce this tokenizer: {side} {text!r} "
                                       f"({src}->{tgt}) gives {mine} where transformers gives {theirs}")
            ids = list(hf(text, add_special_tokens=False)["input_ids"])
            noise = [i for i in layout.skipped if i != tok.eos_id][:3]  # (generation ends at the first EOS)
            noisy = [*ids[:1], *noise, *ids[1:]]  # special ids inside a text are dropped
            for row in (ids, noisy):
                theirs = hf.batch_decode([row], skip_special_tokens=True)[0]
                mine = tok.decode_target([*row, tok.eos_id])
                if mine != theirs:
                    raise InteropError(f"{where}: seqlab cannot reproduce this tokenizer's decoding: {row} gives "
                                       f"{mine!r} where transformers gives {theirs!r}")
    if layout.src_lang is not None:
        hf.src_lang, hf.tgt_lang = layout.src_lang, layout.tgt_lang


def read_vocab(path: Path) -> list[str]:
    """vocab.json (piece -> id) as a list indexed by id; ids must be 0..n-1."""
    mapping = read_json(path)
    pieces = [""] * len(mapping)
    for piece, i in mapping.items():
        if not 0 <= int(i) < len(mapping):
            raise InteropError(f"{path}: id {i} of {piece!r} is outside 0..{len(mapping) - 1}")
        pieces[int(i)] = piece
    return pieces


def vocab_pieces(hf: Any, languages: dict[str, int]) -> list[str]:
    """Every id's piece as a list indexed by id, the language codes included (M2M100 numbers them past its
    vocabulary without listing them in get_vocab)."""
    vocab = {**hf.get_vocab(), **{hf.convert_ids_to_tokens(i): i for i in languages.values()}}
    pieces = [""] * (max(vocab.values()) + 1)
    for piece, i in vocab.items():
        pieces[int(i)] = piece
    return pieces


def sentencepiece_file(folder: Path, names: tuple[str, ...]) -> bytes:
    for name in names:
        if (folder / name).is_file():
            return (folder / name).read_bytes()
    raise InteropError(f"{folder}: no {' or '.join(names)}; the tokenizer's SentencePiece model is missing")


# the files transformers reads a tokenizer's class and settings from, kept beside it for `seqlab export`
# (tokenizer.json and the SentencePiece models are stored as the tokenizer itself); M2M100's vocab.json too
CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                "chat_template.json")
# the files a Hugging Face tokenizer is read from (any one of them: the family decides which it needs)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "source.spm", "spiece.model",
                   "sentencepiece.bpe.model", "spm.model", "vocab.json")


def config_files(folder: Path, kind: str) -> dict[str, str]:
    names = CONFIG_FILES + (("vocab.json",) if kind == "M2M100Tokenizer" else ())
    return {name: (folder / name).read_text(encoding="utf-8") for name in names if (folder / name).is_file()}


def read_tokenizer(folder: Path, special: tuple[int, int, int, int], ends: tuple[int, ...] = (),
                   pad_from_tokenizer: bool = False) -> JsonTokenizer | MappedTokenizer:
    """The folder's tokenizer as seqlab stores it, checked against transformers' own on every probe.
    `special` = the model's (pad, unk, decoder start, eos); unk is taken from the tokenizer. `ends`: every id
    the model ends at (its generation config's list), of which the tokenizer's EOS must be one;
    `pad_from_tokenizer`: the model names no pad token, so the tokenizer's (if it has one) is the pad."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise InteropError("reading a Hugging Face tokenizer needs transformers: pip install 'seqlab[hf]'") from None
    config = folder / "tokenizer_config.json"
    present = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not present:
        raise InteropError(f"{folder}: no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); copy the "
                           "model's tokenizer files into the folder beside config.json")
    try:
        hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InteropError(f"{folder}: transformers cannot load its tokenizer from {', '.join(present)} "
                           f"({type(err).__name__}: {str(err)[:200]}); a tokenizer.json, or the family's "
                           f"SentencePiece files with {config.name}, must be in the folder") from None
    pad, _, start, eos = special
    ends = ends or (eos,)
    named = config if config.is_file() else folder  # what an error names: a file that is there
    if pad_from_tokenizer and hf.pad_token_id is not None:
        pad = int(hf.pad_token_id)
    hf_pad = pad if hf.pad_token_id is None and pad in ends else hf.pad_token_id  # a causal LM pads with EOS
    if hf_pad != pad or hf.eos_token_id not in ends:
        raise InteropError(f"{named}: the tokenizer's pad and eos ids ({hf.pad_token_id}, {hf.eos_token_id}) are "
                           f"not the model's (pad {pad}, end tokens {list(ends)}); the folder mixes two models")
    # the tokenizer's own EOS is the one its texts end with (a chat turn's: Llama 3.x-Instruct's <|eot_id|>, the
    # third of its end tokens), what a fine-tuned continuation ends with (data.prompting.Completions)
    own_eos = int(hf.eos_token_id) if hf.eos_token_id is not None else eos
    special = (pad, int(hf.unk_token_id if hf.unk_token_id is not None else pad), start, own_eos)
    layout = learn_layout(hf, folder)
    kind = type(hf).__name__
    if getattr(hf, "backend_tokenizer", None) is not None:
        ours: JsonTokenizer | MappedTokenizer = JsonTokenizer(hf.backend_tokenizer.to_str(), layout, special)
        where = folder / "tokenizer.json"
    elif kind == "MarianTokenizer":
        settings = read_json(config) if config.is_file() else {}
        pieces = read_vocab(folder / "vocab.json")
        tgt_pieces = read_vocab(folder / "target_vocab.json") if settings.get("separate_vocabs") else None
        ours = MappedTokenizer(sentencepiece_file(folder, ("source.spm",)), sentencepiece_file(folder, ("target.spm",)),
                               pieces, tgt_pieces, special, layout)
        where = folder / "source.spm"
    elif kind == "M2M100Tokenizer":
        ours = MappedTokenizer(sentencepiece_file(folder, ("sentencepiece.bpe.model", "spm.model")), None,
                               vocab_pieces(hf, layout.languages), None, special, layout)
        where = folder / "vocab.json"
    else:
        raise InteropError(f"{named}: {kind} is neither a tokenizers-library tokenizer nor one seqlab "
                           "reimplements (Marian, M2M100); seqlab cannot store it exactly")
    check_same(hf, ours, layout, where)
    ours.hf_files = config_files(folder, kind)
    if isinstance(ours, JsonTokenizer):
        ours.chat = chat_of(hf, folder)
    return ours


def chat_of(hf: Any, folder: Path) -> ChatTemplate | None:
    """The tokenizer's chat template as transformers loaded it (tokenizer_config.json's `chat_template` or
    chat_template.jinja), with the special tokens it sees as variables (`special_tokens_map`)."""
    template = chosen_template(getattr(hf, "chat_template", None), str(folder))
    if template is None:
        return None
    variables = {k: v for k, v in dict(hf.special_tokens_map).items() if isinstance(v, str | list)}
    return ChatTemplate(template, variables, str(folder))
