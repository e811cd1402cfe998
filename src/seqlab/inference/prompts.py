"""A command's prompt settings made concrete for its checkpoint: the shots drawn from the corpus it decodes (or
the checkpoint's own), the checkpoint's chat template, the tokenizer that asks through them (data.prompting)."""

from __future__ import annotations

from typing import Any

from seqlab.checkpoint import CheckpointInfo
from seqlab.config import ConfigError, typed
from seqlab.constants import TRAIN
from seqlab.data import CorpusConfig, DataConfig, load_split
from seqlab.data.prompting import Completions, Prompt, Prompted, PromptSettings, draw_shots


def corpus_of(info: CheckpointInfo) -> CorpusConfig | None:
    """The checkpoint's own corpus (None: an imported model has none), typed alone: what is decoded or prompted
    from it does not depend on the training's other data settings."""
    if not info.data_config:
        return None
    return typed(CorpusConfig, dict(info.data_config["corpus"]), "data.corpus")


def prompted(tokenizer: Any, settings: PromptSettings, corpus: CorpusConfig | None, split: str | None,
             command: str) -> Prompted:
    """`tokenizer` asking every source through `settings`; shots from `corpus`'s shots split, which must not be
    the decoded `split` (errors name `command.prompt.key`)."""
    return Prompted(tokenizer, prompt_of(tokenizer, settings, corpus, split, f"{command}.prompt"))


def completions(tokenizer: Any, settings: PromptSettings, data: DataConfig) -> Completions:
    """An imported causal LM's fine-tuning tokenizer on `data`'s corpus (data.prompting.Completions); its shots
    never from the training split it learns from."""
    return Completions(tokenizer, prompt_of(tokenizer, settings, data.corpus, TRAIN, "prompt"))


def prompt_of(tokenizer: Any, settings: PromptSettings, corpus: CorpusConfig | None, split: str | None,
              owner: str) -> Prompt:
    """The prompt of `settings` for `tokenizer`'s checkpoint: its shots drawn, its chat template."""
    shots: tuple[tuple[str, str], ...] = ()
    if settings.shots:
        if split == TRAIN and settings.shots_split == TRAIN:
            raise ConfigError(f"{owner}.shots_split=train: a fine-tuning run learns from its training split; draw "
                              f"the shots from another ({owner}.shots_split=validation)")
        if split is not None and settings.shots_split == split:
            raise ConfigError(f"{owner}.shots_split={split} is the split being decoded: its examples would be "
                              f"shown with their answers; draw them from another ({owner}.shots_split=train)")
        if corpus is None:
            raise ConfigError(f"{owner}.shots={settings.shots} draws examples from a corpus, and this checkpoint "
                              "has none (an imported model): name one with corpus=NAME")
        pool = [(e.source, e.target) for e in load_split(corpus, settings.shots_split)]
        shots = draw_shots(pool, settings, owner)
    return Prompt(settings, shots, getattr(tokenizer, "chat", None))
