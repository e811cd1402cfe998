"""Where a pretrained family puts its special tokens around a text, as its Hugging Face tokenizer does.

A template is a tuple of items: an id, TEXT (the text's own ids) or SRC / TGT (the source or target
language's code). Examples: T5 `(TEXT, </s>)`; BART `(<s>, TEXT, </s>)`; mBART-cc25 `(TEXT, </s>, SRC)`;
mBART-50, NLLB and M2M100 `(SRC, TEXT, </s>)` and `(TGT, TEXT, </s>)`. Where the target code opens the
target, the model must generate it first: decoding forces it (`forced_bos_token_id`, as their model cards
tell `generate` to). Where it closes the target (mBART-cc25), the decoder starts from it (`decoder_start`):
mBART's `shift_tokens_right` moves the target's last token to the front of the decoder input, as fairseq's
mBART was pretrained, and the model card passes it to `generate` as `decoder_start_token_id`. Language
names are Hugging Face's (`eng_Latn`, `en_XX`, `en`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from seqlab.config import ConfigError

TEXT, SRC, TGT = "text", "src_lang", "tgt_lang"
Item = int | str


@dataclass(frozen=True)
class TextLayout:
    """The templates of each side, the language codes and the decoding rules of a family's tokenizer."""

    source: tuple[Item, ...]
    target: tuple[Item, ...]
    languages: dict[str, int] = field(default_factory=dict)  # HF name -> id of its code
    src_lang: str | None = None
    tgt_lang: str | None = None
    task_prefix: str = ""  # T5's "summarize: ", put before every source text
    skipped: tuple[int, ...] = ()  # the ids batch_decode(skip_special_tokens=True) drops
    clean_up_spaces: bool = False  # transformers' clean_up_tokenization (" ." -> "."), where the family sets it

    def __post_init__(self) -> None:
        for side, template in (("source", self.source), ("target", self.target)):
            if template.count(TEXT) != 1 or any(isinstance(i, str) and i not in (TEXT, SRC, TGT) for i in template):
                raise ValueError(f"layout.{side}={template!r}: one {TEXT!r} and ids or {SRC!r}/{TGT!r} only")
        for key in (SRC, TGT):
            name = getattr(self, key)
            if name is not None and name not in self.languages:
                known = ", ".join(sorted(self.languages)[:8]) or "none: this model has no language codes"
                raise ConfigError(f"{key}={name!r} is not a language of this tokenizer (it has {known}"
                                  f"{', ...' if len(self.languages) > 8 else ''}); use Hugging Face's name of the "
                                  "language, as the model card gives it")

    @property
    def forced_first(self) -> int | None:
        """The target language's code where it opens the target: the token decoding must force first."""
        if self.target and self.target[0] == TGT and self.tgt_lang is not None:
            return self.languages[self.tgt_lang]
        return None

    @property
    def decoder_start(self) -> int | None:
        """The target language's code where it closes the target: the token the decoder starts from."""
        if self.target and self.target[-1] == TGT and self.tgt_lang is not None:
            return self.languages[self.tgt_lang]
        return None

    def with_settings(self, src_lang: str | None = None, tgt_lang: str | None = None,
                      task_prefix: str | None = None) -> TextLayout:
        """This layout with other languages or task prefix (None keeps each as it is)."""
        return replace(self, src_lang=self.src_lang if src_lang is None else src_lang,
                       tgt_lang=self.tgt_lang if tgt_lang is None else tgt_lang,
                       task_prefix=self.task_prefix if task_prefix is None else task_prefix)

    def wrap(self, ids: Sequence[int], side: str) -> list[int]:
        """The text's ids inside the side's template."""
        out: list[int] = []
        for item in self.source if side == "source" else self.target:
            if item == TEXT:
                out.extend(ids)
            elif isinstance(item, str):
                name = getattr(self, item)
                if name is None:
                    example = sorted(self.languages)[0] if self.languages else "?"
                    raise ConfigError(f"this model's tokenizer puts the {side} language's code in every {side} "
                                      f"text: set {item} (Hugging Face's name, e.g. {item}={example})")
                out.append(self.languages[name])
            else:
                out.append(item)
        return out

    def split(self, ids: Sequence[int], side: str) -> tuple[list[int], list[int], list[int]]:
        """`wrap`'s inverse: a side's ids as (the template's ids before the text, the text's own ids, those after).

        Why by the template and not by dropping EOS: the template may put a language code or BOS on either
        side of the text (mBART-cc25's target is `TEXT </s> CODE`, mBART-50's and NLLB's `CODE TEXT </s>`);
        a constraint is the text's ids alone, a forced prefix what the output opens with."""
        template = self.source if side == "source" else self.target
        at = template.index(TEXT)
        before, after = at, len(template) - at - 1
        if len(ids) < before + after:
            raise ValueError(f"{side} ids {list(ids)} are shorter than the {side} template {template!r}")
        ids = list(ids)
        return ids[:before], ids[before:len(ids) - after], ids[len(ids) - after:]

    def to_dict(self) -> dict[str, Any]:
        """Plain containers (a checkpoint is read with weights_only=True)."""
        return {"source": list(self.source), "target": list(self.target), "languages": dict(self.languages),
                "src_lang": self.src_lang, "tgt_lang": self.tgt_lang, "task_prefix": self.task_prefix,
                "skipped": list(self.skipped), "clean_up_spaces": self.clean_up_spaces}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> TextLayout:
        return cls(tuple(state["source"]), tuple(state["target"]), dict(state.get("languages") or {}),
                   state.get("src_lang"), state.get("tgt_lang"), state.get("task_prefix", ""),
                   tuple(state.get("skipped") or ()), bool(state.get("clean_up_spaces", False)))


def clean_up_tokenization(text: str) -> str:
    """transformers' `clean_up_tokenization`: spaces before punctuation and English contractions removed."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text
