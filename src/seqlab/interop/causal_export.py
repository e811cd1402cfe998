"""A decoder-only model seqlab trained, as the Hugging Face causal LM it is.

A one-stack model seqlab trains reads one sequence: the source's tokens, its end token, the decoder start token
(BOS, the separator) and the target (model.start=bos). A causal LM continues a prompt (model.start=prompt). Both
compute the same function of the same token sequence, so the export is exact once the layout moves from the
model into the prompt: the folder's chat template writes each user message as `source </s>`, each assistant
message as `<s> target </s>`, and the opened assistant turn as `<s>`, the token the target starts from.
`apply_chat_template([{"role": "user", "content": SOURCE}], add_generation_prompt=True)` therefore gives the
very ids the trained model decodes from, and `generate` continues them as seqlab's own search does (tested).

seqlab's SentencePiece vocabulary becomes a `tokenizer.json` through transformers' own converter of a
SentencePiece model (its normalizer spec, dummy prefix and byte fallback), its special pieces as special added
tokens, so that a chat template's `</s>` and `<s>` are read as the single tokens they are; the ids are
SentencePiece's, which are seqlab's. Checked before anything is written: the exported tokenizer encodes a probe
text as seqlab's tokenizer does.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from seqlab.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seqlab.interop.families import InteropError
from seqlab.model import Model
from seqlab.model.layout import DECODER_ONLY

# The trained layout as a chat template (transformers' Jinja environment: trim_blocks and lstrip_blocks). A
# system message has no place in it (the model never saw one): refused by the template, as Gemma 2's refuses.
LAYOUT_TEMPLATE = (
    "{%- for message in messages %}\n"
    "{%- if message['role'] == 'user' %}{{ message['content'] + eos_token }}\n"
    "{%- elif message['role'] == 'assistant' %}{{ bos_token + message['content'] + eos_token }}\n"
    "{%- else %}{{ raise_exception('this model was trained on source and target pairs: it takes user and "
    "assistant messages only, no ' + message['role'] + ' message') }}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{ bos_token }}{% endif %}"
)
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)  # seqlab's, fixed when its SentencePiece model is trained
# what the exported tokenizer is checked on before it is written: words, digits, accents, punctuation, a byte
PROBE = "En el principio creó Dios los cielos y la tierra. In the beginning, 1:1 — God's “word”… ✓"


def needs_layout(model: Model) -> bool:
    """Whether the model is a one-stack model seqlab trained (its target starts from BOS after the source)."""
    return model.cfg.layout == DECODER_ONLY


def as_causal_lm(model: Model) -> Model:
    """The model as a causal LM continuing its prompt (model.start=prompt): the same weights, the same function
    of the sequence; the prompt (the chat template) now carries the source's end token and the start token.
    (A prefix LM is no causal LM: its source attends to itself both ways; no family takes it, and export says so.)"""
    model.cfg = replace(model.cfg, start="prompt")
    return model


def tokenizer_files(tokenizer: Any, max_positions: int) -> dict[str, str]:
    """seqlab's joint SentencePiece tokenizer as `tokenizer.json` + `tokenizer_config.json` (with the layout's
    chat template), by file name, checked on a probe text before anything is written; refused where seqlab's
    vocabularies are two (a causal LM has one)."""
    if not tokenizer.joint or not hasattr(tokenizer, "src_model"):
        raise InteropError("a causal LM reads one vocabulary: this model was trained with separate source and "
                           "target vocabularies (data.tokenizer.joint=false) and cannot be exported as one")
    backend = backend_of(tokenizer.src_model)
    ours = tokenizer.encode_target([PROBE])[0][:-1]  # without the end token seqlab's layout appends
    theirs = backend.encode(PROBE, add_special_tokens=False).ids
    if ours != theirs:
        raise InteropError(f"the exported tokenizer.json encodes {PROBE!r} as {theirs}, seqlab as {ours}; "
                           "this SentencePiece model's normalization is not one the tokenizers library reproduces")
    name = backend.id_to_token  # the special pieces as the SentencePiece model names them
    config = {"tokenizer_class": "TokenizersBackend", "bos_token": name(BOS_ID), "eos_token": name(EOS_ID),
              "unk_token": name(UNK_ID), "pad_token": name(PAD_ID), "add_bos_token": False, "add_eos_token": False,
              "clean_up_tokenization_spaces": False, "model_max_length": max_positions,
              "chat_template": LAYOUT_TEMPLATE}
    return {"tokenizer.json": backend.to_str(),
            "tokenizer_config.json": json.dumps(config, indent=1, ensure_ascii=False) + "\n"}


def backend_of(model_proto: bytes) -> Any:
    """A `tokenizers.Tokenizer` of a SentencePiece model, built by transformers' converter (its normalizer spec
    and byte fallback), with the special pieces as special added tokens."""
    try:
        from tokenizers import AddedToken
        from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf
    except ImportError:
        raise InteropError("writing a tokenizer.json needs transformers: pip install 'seqlab[hf]'") from None
    proto = import_protobuf().ModelProto()
    proto.ParseFromString(model_proto)
    pieces = [(piece.piece, piece.score) for piece in proto.pieces]
    bpe = proto.trainer_spec.model_type == proto.trainer_spec.BPE
    vocab = {piece: i for i, (piece, _) in enumerate(pieces)} if bpe else pieces
    backend = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab)
    if backend is None:
        raise InteropError("this SentencePiece model is neither unigram nor BPE; it has no tokenizer.json form")
    backend.add_special_tokens([AddedToken(proto.pieces[i].piece, special=True, normalized=False)
                                for i in SPECIAL_IDS])
    return backend
