"""The draft model of `decoding.draft=ckpt:PATH` (decoding.speculative), loaded once per path and device."""

from __future__ import annotations

from seqlab.checkpoint import CheckpointError, load_for_inference, resolve
from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig
from seqlab.decoding.speculative import check_draft
from seqlab.model import Model

_LOADED: dict[tuple[str, str], Model] = {}


def load_draft(cfg: DecodingConfig, model: Model) -> Model | None:
    """`cfg.draft`'s checkpoint as a model on `model`'s device, in eval mode, checked against `model`; None where
    `cfg` names no draft model (no draft, or prompt lookup)."""
    if cfg.draft is None or not cfg.draft.startswith("ckpt:"):
        return None
    device = next(model.parameters()).device
    try:
        path = resolve(cfg.draft[len("ckpt:"):])
        key = (str(path), str(device))
        if key not in _LOADED:
            draft, _, _ = load_for_inference(path, device)
            _LOADED[key] = draft.eval()
    except CheckpointError as err:
        raise ConfigError(f"decoding.draft={cfg.draft}: {err}") from None
    check_draft(_LOADED[key].cfg, model.cfg, cfg.draft)
    return _LOADED[key]


def check_draft_file(cfg: DecodingConfig) -> None:
    """Fail, naming the key, where `decoding.draft=ckpt:PATH` names no checkpoint (before anything loads)."""
    if cfg.draft is not None and cfg.draft.startswith("ckpt:"):
        try:
            resolve(cfg.draft[len("ckpt:"):])
        except CheckpointError as err:
            raise ConfigError(f"decoding.draft={cfg.draft}: {err}") from None
