"""How a causal LM is asked a task: a template around every source, zero or k examples before it, plain text or
the model's own chat format (the `prompt.*` keys of evaluate, translate and train: one declaration, recorded
with every result and checkpoint).

- Plain (`prompt.chat=false`): the template with the source in its `{source}` slot, GPT-2's "TL;DR:" summaries
  (Radford et al. 2019, Section 3.6) being `prompt.template="{source}\\nTL;DR:"`. With k shots, each shot is
  the template around its source, a space and its target, one per line before the query (the line format of
  Vilar et al. 2023, "Prompting PaLM for Translation": `prompt.template="{src_lang}: {source}\\n{tgt_lang}:"`).
  The text is tokenized as the tokenizer tokenizes any source (Llama's `<s>` first).
- Chat (`prompt.chat=true`): the messages [system?, (user: shot source, assistant: shot target) x k, user:
  the query], rendered by the checkpoint's own chat template as `apply_chat_template(...,
  add_generation_prompt=True)` renders it (data.chat), then tokenized without adding special tokens.

The template's `{src_lang}` and `{tgt_lang}` are `prompt.source_language` and `prompt.target_language`. The
shots are drawn once, with `prompt.shots_seed`, from `prompt.shots_split` of the corpus (never the split being
evaluated), and the same k precede every source.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from seqlab.config import ConfigError, check_types, typed
from seqlab.constants import TEST, TRAIN, VALIDATION
from seqlab.data.chat import ChatTemplate, Message

SLOT = "{source}"
SLOTS = ("{source}", "{src_lang}", "{tgt_lang}")


@dataclass(frozen=True)
class PromptSettings:
    """The prompt.* keys (module docstring); the defaults ask nothing: the source as it is."""

    template: str = SLOT  # the source in its slot; {src_lang} / {tgt_lang}: the language names below
    chat: bool = False  # render the checkpoint's chat template (an instruct model's format)
    system: str | None = None  # chat: the system message (None: none given; the template may add its own)
    shots: int = 0  # examples before the source
    shots_split: str = VALIDATION  # where they are drawn from (never the evaluated split, never test)
    shots_seed: int = 0
    source_language: str | None = None  # fills {src_lang}: "Spanish"
    target_language: str | None = None  # fills {tgt_lang}: "English"
    variables: dict[str, Any] = field(default_factory=dict)  # chat: further template variables (date_string)

    def check(self, owner: str) -> None:
        check_types(self, owner)
        check_template(self.template, f"{owner}.template")
        for slot, key, value in (("{src_lang}", "source_language", self.source_language),
                                 ("{tgt_lang}", "target_language", self.target_language)):
            if slot in self.template and value is None:
                raise ConfigError(f"{owner}.template={self.template!r} holds {slot}: set {owner}.{key} (the "
                                  "language's name as the prompt says it, e.g. Spanish)")
        if self.shots < 0:
            raise ConfigError(f"{owner}.shots={self.shots} must be >= 0")
        if self.shots and self.shots_split not in (TRAIN, VALIDATION):
            raise ConfigError(f"{owner}.shots_split={self.shots_split!r}: shots come from the {TRAIN} or "
                              f"{VALIDATION} split, never from {TEST}")
        if self.variables and not self.chat:
            raise ConfigError(f"{owner}.variables are a chat template's; set {owner}.chat=true or remove them")
        if self.system is not None and not self.chat:
            raise ConfigError(f"{owner}.system is a chat message; set {owner}.chat=true, or put the instruction "
                              f"in {owner}.template")

    @cached_property
    def asks_nothing(self) -> bool:
        """The defaults: every source as it is."""
        return self == PromptSettings()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, value: Any, owner: str) -> PromptSettings:
        """The settings from a config node (a mapping) or as they are, checked, errors naming `owner.key`."""
        settings = value if isinstance(value, cls) else typed(cls, dict(value or {}), owner)
        settings.check(owner)
        return settings


def check_template(template: str, key: str) -> None:
    """A template holds the source exactly once (`key`: the config key that gave it)."""
    if not isinstance(template, str) or template.count(SLOT) != 1:
        raise ConfigError(f"{key}={template!r} must hold {SLOT} exactly once, where the source goes (e.g. "
                          f"'{SLOT}\\nTL;DR:')")


@dataclass(frozen=True)
class Prompt:
    """A PromptSettings made concrete: its shots drawn, the chat template it renders with."""

    settings: PromptSettings
    shots: tuple[tuple[str, str], ...] = ()  # (source, target) pairs
    chat: ChatTemplate | None = None

    def __post_init__(self) -> None:
        if self.settings.chat and self.chat is None:
            raise ConfigError("prompt.chat=true: this checkpoint's tokenizer has no chat template (a base model, "
                              "or a folder without tokenizer_config.json's chat_template or chat_template.jinja); "
                              "set prompt.chat=false and prompt.template")

    def fill(self, source: str) -> str:
        s = self.settings
        return (s.template.replace("{src_lang}", s.source_language or "").replace("{tgt_lang}", s.target_language or "")
                .replace(SLOT, source))

    def messages(self, source: str) -> list[Message]:
        """The chat of one source: system, the shots as turns, the query."""
        out: list[Message] = [{"role": "system", "content": self.settings.system}] if self.settings.system else []
        for src, tgt in self.shots:
            out += [{"role": "user", "content": self.fill(src)}, {"role": "assistant", "content": tgt}]
        return out + [{"role": "user", "content": self.fill(source)}]

    def text(self, source: str) -> str:
        """The prompt's text: the rendered chat, or the shot lines and the filled template."""
        if self.settings.chat:
            assert self.chat is not None
            return self.chat.render(self.messages(source), self.settings.variables)
        return "".join(f"{self.fill(src)} {tgt}\n" for src, tgt in self.shots) + self.fill(source)


def draw_shots(pool: Sequence[tuple[str, str]], settings: PromptSettings, owner: str) -> tuple[tuple[str, str], ...]:
    """`settings.shots` (source, target) pairs of `pool` (the shots split), drawn once with its seed."""
    if settings.shots > len(pool):
        raise ConfigError(f"{owner}.shots={settings.shots} but the {settings.shots_split} split has only "
                          f"{len(pool)} examples; ask for fewer shots or another {owner}.shots_split")
    picked = random.Random(settings.shots_seed).sample(range(len(pool)), settings.shots)
    return tuple((pool[i][0], pool[i][1]) for i in picked)


class Prompted:
    """A tokenizer whose sources are asked through `prompt`; everything else is the tokenizer's."""

    def __init__(self, tokenizer: Any, prompt: Prompt) -> None:
        self.tokenizer, self.prompt = tokenizer, prompt

    def encode_source(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        prompts = [self.prompt.text(t) for t in texts]
        if self.prompt.settings.chat:  # the template wrote its special tokens (transformers: tokenize=True)
            return self.tokenizer.encode_text(prompts)
        return self.tokenizer.encode_source(prompts, threads)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)


class Completions(Prompted):
    """An imported causal LM's fine-tuning tokenizer: each source asked through the prompt, each target the
    continuation the model is to generate after it (the target's tokens and the end token, no start token:
    `encode_continuation`), as decoding and the reference log-probs see it. A pair longer than the data's
    limits is dropped, never cut: a cut prompt would lose its cue (a template's "TL;DR:"), a cut target its end.
    Its digest keys the tokenized splits by the prompt too."""

    drops_long_pairs = True

    def encode_target(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        return self.tokenizer.encode_continuation(list(texts))

    @property
    def digest(self) -> str:
        h = hashlib.sha256(self.tokenizer.digest.encode())
        h.update(json.dumps([self.prompt.settings.to_dict(), self.prompt.shots], sort_keys=True).encode())
        return h.hexdigest()
