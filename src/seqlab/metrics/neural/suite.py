"""The neural metrics as evaluation chooses them (`metrics=[..., comet, cometkiwi, bertscore, metricx]`): which
model each reads (`neural.*`, NeuralSettings), a check that runs before any decoding (every model folder
found, every metric's inputs there), and each metric's segment scores with its signature.

Scales: COMET, CometKiwi and BERTScore's F1 are reported x100 (as BLEU, chrF and ROUGE are), MetricX on its own
0-25 error scale, lower is better. COMET and MetricX read one reference: with several reference streams they
read the first, and their signatures say so. Loaded models are kept for the process, with their caches, so the
settings of a multirun share one model and encode each shared sentence once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from seqlab import hub
from seqlab.config import ConfigError
from seqlab.metrics import declarations as M
from seqlab.metrics import keys as K
from seqlab.metrics.neural.bertscore import BertScoreSettings, load_bertscore
from seqlab.metrics.neural.comet_checkpoint import reads_references
from seqlab.metrics.neural.errors import MetricModelError
from seqlab.metrics.neural.metricx import MetricXSettings, load_metricx

REFERENCE_BASED = frozenset({K.COMET, K.BERTSCORE})  # MetricX: its QE models need none (MetricXScorer.qe)


@dataclass(frozen=True)
class NeuralSettings:
    """The models the neural metrics read: hub names in the local cache, or folders."""

    comet: str = "Unbabel/wmt22-comet-da"
    cometkiwi: str = "Unbabel/wmt22-cometkiwi-da"
    bertscore: BertScoreSettings = field(default_factory=BertScoreSettings)
    metricx: MetricXSettings = field(default_factory=MetricXSettings)
    device: str = "auto"  # auto = the GPU when there is one, else the CPU

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None, key: str = "neural") -> NeuralSettings:
        values = dict(values or {})
        parts: dict[str, Any] = {}
        for name, part in (("bertscore", BertScoreSettings), ("metricx", MetricXSettings)):
            if name in values:
                parts[name] = typed(part, values.pop(name), f"{key}.{name}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{key}: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**values, **parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def of(self, metric: str) -> Any:
        """The model settings of one metric (each metric's are the field of its name)."""
        return getattr(self, metric)

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


def typed(cls: type, values: Any, key: str) -> Any:
    if not isinstance(values, Mapping):
        raise ConfigError(f"{key}: expected a mapping of {[f.name for f in fields(cls)]}")
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    if unknown:
        raise ConfigError(f"{key}: unknown keys {unknown}; known: {[f.name for f in fields(cls)]}")
    return cls(**values)


def model_names(metric: str, settings: NeuralSettings) -> list[str]:
    """The folders or hub names `metric` reads."""
    return {K.COMET: [settings.comet], K.COMETKIWI: [settings.cometkiwi], K.BERTSCORE: [settings.bertscore.model],
            K.METRICX: [settings.metricx.model, settings.metricx.tokenizer]}[metric]


def check_neural(chosen: Sequence[str], settings: NeuralSettings, have_references: bool) -> None:
    """Before any decoding: every chosen neural metric's model is a folder or in the local hub cache, the device
    exists, and a reference-based metric has references."""
    for metric in (m for m in chosen if m in M.neural()):
        if metric in REFERENCE_BASED and not have_references:
            raise MetricModelError(f"metrics: {metric} compares with references and this test set has none; "
                                   "choose cometkiwi (reference-free) or a MetricX QE model")
        for name in model_names(metric, settings):
            try:
                folder = hub.resolve_folder(name)
            except hub.HubError as err:
                raise MetricModelError(f"neural.{metric}: {err}") from None
        if metric in (K.COMET, K.COMETKIWI):
            check_comet_kind(metric, settings.of(metric), folder)
        if metric == K.BERTSCORE:
            settings.bertscore.layers()
        if metric == K.METRICX:
            settings.metricx.resolved_version()
    if settings.torch_device().type == "cuda" and not torch.cuda.is_available():
        raise MetricModelError(f"neural.device={settings.device}: no GPU here; use neural.device=cpu")


def check_comet_kind(metric: str, name: str, folder: Path) -> None:
    """COMET scores with references, CometKiwi without: a model of the other kind is refused by its key, before
    decoding (its hparams.yaml says which it is)."""
    with_refs = reads_references(folder)
    if metric == K.COMET and not with_refs:
        raise MetricModelError(f"neural.comet={name}: a reference-free COMET model (it reads no references); "
                               "give it as neural.cometkiwi and choose metrics=[..., cometkiwi]")
    if metric == K.COMETKIWI and with_refs:
        raise MetricModelError(f"neural.cometkiwi={name}: a reference-based COMET model (it scores with "
                               "references); give it as neural.comet and choose metrics=[..., comet]")


LOADED: dict[tuple[str, Any, str], Any] = {}  # (metric, its settings, device) -> the loaded scorer, for the process


def scorer(metric: str, settings: NeuralSettings) -> Any:
    """The metric's scorer, loaded once per process and settings."""
    from seqlab.metrics.neural.comet import load_comet

    part = settings.of(metric)
    key = (metric, part, settings.device)
    if key not in LOADED:
        device = settings.torch_device()
        LOADED[key] = (load_comet(part, device) if metric in (K.COMET, K.COMETKIWI)
                       else load_bertscore(part, device) if metric == K.BERTSCORE else load_metricx(part, device))
    return LOADED[key]


@dataclass
class NeuralScores:
    """One metric's segment scores on its reported scale, any further per-segment values, its signature."""

    metric: str
    segments: list[float]
    extra: dict[str, list[float]]
    signature: str


def neural_scores(metric: str, settings: NeuralSettings, sources: Sequence[str], hyps: Sequence[str],
                  refs: Sequence[Sequence[str]] | None) -> NeuralScores:
    """`metric`'s scores of the hypotheses (refs: reference streams, or None)."""
    model = scorer(metric, settings)
    first = None if not refs else refs[0]
    note = f"|refs:1 of {len(refs)}" if refs and len(refs) > 1 and metric != K.BERTSCORE else ""
    if metric == K.BERTSCORE:
        if not refs:
            raise MetricModelError("bertscore compares with references and none were given")
        out = model.score(hyps, refs)
        return NeuralScores(metric, [100 * x for x in out.f1],
                            {K.BERTSCORE_P: [100 * x for x in out.precision],
                             K.BERTSCORE_R: [100 * x for x in out.recall]}, model.signature())
    if metric == K.METRICX:
        return NeuralScores(metric, model.score(sources, hyps, first), {}, model.signature() + note)
    if metric == K.COMETKIWI:
        first = None  # reference-free: the QE score, whatever the test set holds
    return NeuralScores(metric, [100 * x for x in model.score(sources, hyps, first)], {}, model.signature() + note)


def encoded_sentences() -> dict[str, int]:
    """How many inputs each loaded model has encoded (not read from its cache), by metric and model."""
    return {f"{metric}:{m.folder.name}": m.encoded for (metric, _, _), m in LOADED.items()}
