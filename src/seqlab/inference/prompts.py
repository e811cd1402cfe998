"""A command's prompt settings made concrete for its checkpoint: the shots drawn from the corpus it decodes (or
the checkpoint's own), the checkpoint's chat template, the tokenizer that asks through them (data.prompting)."""

from __future__ import annotations

from typing import Any

from seqlab.checkpoint import CheckpointInfo
from seqlab.config import ConfigError
from seqlab.data import CorpusConfig, DataConfig, load_split
from seqlab.data.prompting import Prompt, Prompted, PromptSettings, draw_shots


def corpus_of(info: CheckpointInfo) -> CorpusConfig | None:
    """The checkpoint's own corpus (None: an imported model has none)."""
    return DataConfig.from_dict(info.data_config).corpus if info.data_config else None


def prompted(tokenizer: Any, settings: PromptSettings, corpus: CorpusConfig | None, split: str | None,
             command: str) -> Prompted:
    """`tokenizer` asking every source through `settings`; shots from `corpus`'s shots split, which must not be
    the decoded `split` (errors name `command.prompt.key`)."""
    owner = f"{command}.prompt"
    shots: tuple[tuple[str, str], ...] = ()
    if settings.shots:
        if split is not None and settings.shots_split == split:
            raise ConfigError(f"{owner}.shots_split={split} is the split being decoded: its examples would be "
                              f"shown with their answers; draw them from another ({owner}.shots_split=train)")
        if corpus is None:
            raise ConfigError(f"{owner}.shots={settings.shots} draws examples from a corpus, and this checkpoint "
                              "has none (an imported model): name one with corpus=NAME")
        pool = [(e.source, e.target) for e in load_split(corpus, settings.shots_split)]
        shots = draw_shots(pool, settings, owner)
    return Prompted(tokenizer, Prompt(settings, shots, getattr(tokenizer, "chat", None)))
