"""A prompt template around every source, as a causal LM is asked a task: GPT-2's "TL;DR:" summaries (Radford
et al. 2019, Section 3.6) are `prompt_template="{source}\\nTL;DR:"`. The template is applied to the text before
the tokenizer, so it works with every tokenizer seqlab has."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seqlab.config import ConfigError

SLOT = "{source}"


def check_template(template: str, key: str) -> None:
    """A template holds the source exactly once (`key`: the config key that gave it)."""
    if template.count(SLOT) != 1:
        raise ConfigError(f"{key}={template!r} must hold {SLOT} exactly once, where the source goes (e.g. "
                          f"'{SLOT}\\nTL;DR:')")


class Templated:
    """A tokenizer whose sources are `template` with the text in its slot; everything else is the tokenizer's."""

    def __init__(self, tokenizer: Any, template: str) -> None:
        check_template(template, "prompt_template")
        self.tokenizer, self.template = tokenizer, template

    def encode_source(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        return self.tokenizer.encode_source([self.template.replace(SLOT, t) for t in texts], threads)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)
