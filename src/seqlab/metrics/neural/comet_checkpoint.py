"""A COMET checkpoint read as unbabel-comet reads it, without unbabel-comet: the folder's hparams.yaml names the
model class, checkpoints/model.ckpt holds the weights and (as Lightning saves them) every other
hyper-parameter, which win over the YAML's as they do in `comet.load_from_checkpoint`. The encoder is the
`pretrained_model` the hyper-parameters name (XLM-R's config and tokenizer, from a folder or the local hub
cache); its weights come from the checkpoint.

What a checkpoint decides is read into a CometSpec, never assumed: the layer (one, or all mixed by softmax or
sparsemax weights, with or without per-sentence layer norm), the pooling, the estimator's sizes and activations,
and for the unified models (CometKiwi, XCOMET's architecture) which segments are joined into one input.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab import hub
from seqlab.metrics.neural.errors import MetricModelError

HPARAMS, CHECKPOINT = "hparams.yaml", Path("checkpoints") / "model.ckpt"
KINDS = ("regression_metric", "referenceless_regression_metric", "unified_metric")
ENCODERS = ("XLM-RoBERTa", "XLM-RoBERTa-XL")
POOLS = ("avg", "max", "cls", "default")
MIXES = ("softmax", "sparsemax")


@dataclass(frozen=True)
class CometSpec:
    """The hyper-parameters that decide a COMET model's scores."""

    kind: str  # KINDS
    encoder: str  # ENCODERS
    pretrained_model: str  # the encoder's config and tokenizer: a hub name or a folder
    layer: str | int  # "mix" (all layers, weighted) or one layer (0 = the embeddings)
    mix: str  # MIXES: how the layer weights are normalised
    layer_norm: bool  # mixing normalises each layer per sentence first
    pool: str  # POOLS (regression models); unified models always take the first token
    hidden_sizes: tuple[int, ...]
    activation: str  # torch.nn's class, by COMET's rule (name.title())
    final_activation: str | None
    input_segments: tuple[str, ...]  # unified: the segments joined after the translation (src, ref)

    @property
    def needs_reference(self) -> bool:
        return self.kind == "regression_metric"


def read_hparams(folder: Path) -> dict[str, Any]:
    import yaml

    path = folder / HPARAMS
    if not path.is_file():
        raise MetricModelError(f"{path}: missing; a COMET model folder holds hparams.yaml and {CHECKPOINT}")
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise MetricModelError(f"{path}: not valid YAML ({err}); re-copy the model folder") from None
    if not isinstance(values, dict):
        raise MetricModelError(f"{path}: expected a mapping of hyper-parameters")
    return values


class AttributeDict(dict):
    """Lightning's hyper-parameter dict, read back as a plain dict (the only non-tensor class a COMET checkpoint
    holds besides containers)."""


LIGHTNING_DICTS = [(AttributeDict, f"{m}.AttributeDict") for m in
                   ("lightning_fabric.utilities.data", "pytorch_lightning.utilities.parsing",
                    "lightning.fabric.utilities.data")]


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The Lightning checkpoint through torch.load(weights_only=True): no code from the file ever runs."""
    if not path.is_file():
        raise MetricModelError(f"{path}: missing; a COMET model folder holds {HPARAMS} and {CHECKPOINT}")
    try:
        with torch.serialization.safe_globals(LIGHTNING_DICTS):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as err:
        first = str(err).strip().splitlines()[0][:200]
        raise MetricModelError(f"{path}: cannot be read ({first}); the file is truncated or corrupt") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise MetricModelError(f"{path}: not a Lightning checkpoint (no state_dict)")
    return checkpoint


def choice(values: dict[str, Any], key: str, allowed: tuple[str, ...], where: Path) -> str:
    value = values.get(key)
    if value not in allowed:
        raise MetricModelError(f"{where}: {key}={value!r} is not computed by seqlab (it computes {list(allowed)})")
    return value


def read_spec(folder: Path, hparams: dict[str, Any], checkpoint: dict[str, Any]) -> CometSpec:
    """The spec from hparams.yaml's class and the checkpoint's hyper-parameters (the YAML's where it has none)."""
    where = folder / HPARAMS
    kind = choice(hparams, "class_identifier", KINDS, where)
    values = {**hparams, **dict(checkpoint.get("hyper_parameters") or {})}
    mix = values.get("layer_transformation", "softmax")
    mix = "softmax" if mix == "sparsemax_patch" else mix  # unbabel-comet >= 2.2.4 reads the patch as softmax
    layer = values.get("sent_layer" if kind == "unified_metric" else "layer", "mix")
    if layer != "mix" and not isinstance(layer, int):
        raise MetricModelError(f"{where}: layer={layer!r}: expected 'mix' or a layer number")
    return CometSpec(
        kind=kind, encoder=choice(values, "encoder_model", ENCODERS, where),
        pretrained_model=str(values.get("pretrained_model")), layer=layer,
        mix=choice({"layer_transformation": mix}, "layer_transformation", MIXES, where),
        layer_norm=bool(values.get("layer_norm", True)),
        pool="cls" if kind == "unified_metric" else choice(values, "pool", POOLS, where),
        hidden_sizes=tuple(int(h) for h in values.get("hidden_sizes", (3072, 1024))),
        activation=str(values.get("activations", "Tanh")), final_activation=values.get("final_activation"),
        input_segments=tuple(values.get("input_segments", ("mt", "src", "ref"))))


def encoder_folder(spec: CometSpec, folder: Path) -> Path:
    """The encoder's config and tokenizer (its weights are in the COMET checkpoint): a path relative to the
    model folder as written (`../encoder`), else a folder of that name beside the model folder (`xlm-roberta-
    large` next to `wmt22-comet-da`), else the hub name in the local cache."""
    name = spec.pretrained_model
    for candidate in ((folder / name,) if name.startswith(".") else (folder.parent / name,)):
        if candidate.is_dir():
            return candidate
    try:
        return hub.resolve_folder(name)
    except hub.HubError as err:
        raise MetricModelError(f"{folder / HPARAMS}: its encoder pretrained_model={name}: not a folder beside "
                               f"the model folder ({folder.parent / name}), and {err}") from None


def reads_references(folder: Path) -> bool:
    """Whether a COMET model scores with references, from its hparams.yaml alone (before any weights load):
    a regression model with them, a referenceless one without, a unified model as its input segments say."""
    hparams = read_hparams(folder)
    kind = choice(hparams, "class_identifier", KINDS, folder / HPARAMS)
    if kind == "unified_metric":
        return "ref" in tuple(hparams.get("input_segments", ("mt", "src", "ref")))
    return kind == "regression_metric"


def activation(name: str, where: Path) -> nn.Module:
    """COMET's rule: the torch.nn class whose name is `name.title()` (Tanh, Sigmoid, ...)."""
    cls = getattr(nn, name.title(), None)
    if cls is None:
        raise MetricModelError(f"{where}: activation {name!r} names no torch.nn class (as {name.title()!r})")
    return cls()


def estimator(spec: CometSpec, in_dim: int, state: dict[str, Tensor], where: Path) -> nn.Sequential:
    """COMET's feed-forward head without its dropout: Linear + activation per hidden size, a Linear to one
    score, then the final activation if any; weights from `estimator.ff.<i>` (i counts COMET's dropouts)."""
    layers: list[nn.Module] = []
    sizes = (in_dim, *spec.hidden_sizes, 1)
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
        linear = nn.Linear(n_in, n_out)
        prefix = f"estimator.ff.{3 * i}."
        try:
            linear.load_state_dict({"weight": state[prefix + "weight"], "bias": state[prefix + "bias"]})
        except (KeyError, RuntimeError) as err:
            raise MetricModelError(f"{where}: the estimator's layer {prefix[:-1]} does not match hidden_sizes="
                                   f"{list(spec.hidden_sizes)} ({str(err)[:160]})") from None
        layers.append(linear)
        if i < len(sizes) - 2:
            layers.append(activation(spec.activation, where))
    if spec.final_activation is not None:
        layers.append(activation(spec.final_activation, where))
    return nn.Sequential(*layers).eval()


def sub_state(state: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
