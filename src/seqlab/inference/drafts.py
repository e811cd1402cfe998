"""The draft model of `decoding.draft=ckpt:PATH` (decoding.speculative), loaded once per path and device."""

from __future__ import annotations

from pathlib import Path

from seqlab.checkpoint import CheckpointError, load_for_inference, resolve
from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig
from seqlab.model import Model

_LOADED: dict[tuple[str, str], Model] = {}


def load_draft(cfg: DecodingConfig, model: Model) -> Model | None:
    """`cfg.draft`'s checkpoint as a model on `model`'s device, in eval mode; None where `cfg` names no draft model
    (no draft, or prompt lookup). `generate` checks that it can draft for `model` (decoding.speculative)."""
    path = draft_file(cfg)
    if path is None:
        return None
    device = next(model.parameters()).device
    key = (str(path), str(device))
    if key not in _LOADED:
        try:
            draft, _, _ = load_for_inference(path, device)
        except CheckpointError as err:
            raise ConfigError(f"decoding.draft={cfg.draft}: {err}") from None
        _LOADED[key] = draft.eval()
    return _LOADED[key]


def draft_file(cfg: DecodingConfig) -> Path | None:
    """The checkpoint file `decoding.draft=ckpt:PATH` names (None: no draft model); fails, naming the key, where
    it names none. Called before anything loads, so a missing draft fails first."""
    if cfg.draft is None or cfg.draft_checkpoint is None:  # no draft, or prompt lookup: no file
        return None
    try:
        return resolve(cfg.draft_checkpoint)
    except CheckpointError as err:
        raise ConfigError(f"decoding.draft={cfg.draft}: {err}") from None
