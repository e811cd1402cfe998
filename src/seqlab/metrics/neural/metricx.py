"""MetricX-23 and MetricX-24 (Juraska et al. 2023, 2024) as google-research/metricx predicts them: an mT5
encoder-decoder read as a regression model. The input is one string, tokenized with the mT5 tokenizer, cut at
`max_input_length` and stripped of its final EOS; the decoder runs one step from id 0, and the score is that
step's logit of id 250089 (`<extra_id_10>`) clamped to [0, 25]. It is an error score: lower is better.

The logit is computed here from the checkpoint's own output row, by MetricX's rule (its own head where the
checkpoint has one, `tie_word_embeddings: false` as in every MetricX checkpoint; else the shared embedding's row
with the decoder state scaled by d^-1/2), and transformers runs only the mT5 encoder and decoder stacks: the
output head's tying is a rule transformers versions disagree on (5.x ties mT5's head to the embedding always).

Inputs: MetricX-23 `candidate: H reference: R` (QE models: `candidate: H source: S`); MetricX-24 (hybrid)
`source: S candidate: H reference: R`, or `source: S candidate: H` without a reference. The hub folders hold
no tokenizer; MetricX's own instructions name google/mt5-xl's (`metricx.tokenizer`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from seqlab import hub
from seqlab.data.sequences import pad_right
from seqlab.metrics.neural.errors import MetricModelError

SCORE_ID = 250089  # <extra_id_10>: the logit MetricX reads as its score
MAX_SCORE = 25.0
DEFAULT_LENGTH = {"23": 1024, "24": 1536}  # the max_input_length MetricX's instructions use
BATCH_SENTENCES = 16


@dataclass(frozen=True)
class MetricXSettings:
    model: str = "google/metricx-24-hybrid-large-v2p6"
    tokenizer: str = "google/mt5-xl"
    version: str | None = None  # 23 | 24; None = read from the model's name
    qe: bool | None = None  # score without references; None = MetricX-23: from the name, MetricX-24: no refs given
    max_input_length: int | None = None  # None = DEFAULT_LENGTH of the version

    def resolved_version(self) -> str:
        version = self.version or next((v for v in DEFAULT_LENGTH if f"metricx-{v}" in self.model.lower()), None)
        if version not in DEFAULT_LENGTH:
            raise MetricModelError(f"metricx.version: cannot tell MetricX-23 from -24 by the name {self.model}; "
                                   "set metricx.version=23 or 24")
        return str(version)


def metricx_input(version: str, hyp: str, src: str | None, ref: str | None) -> str:
    """The one string MetricX reads (predict.py's _make_input)."""
    if version == "23":
        return f"candidate: {hyp} reference: {ref}" if ref is not None else f"candidate: {hyp} source: {src}"
    text = f"source: {src} candidate: {hyp}"
    return text if ref is None else f"{text} reference: {ref}"


@dataclass
class MetricXScorer:
    settings: MetricXSettings
    folder: Path
    tokenizer: object
    model: torch.nn.Module
    device: torch.device
    cache: dict[str, float] = field(default_factory=dict)
    encoded: int = 0

    @property
    def version(self) -> str:
        return self.settings.resolved_version()

    def qe(self, have_refs: bool) -> bool:
        if self.settings.qe is not None:
            return self.settings.qe
        return "-qe-" in self.settings.model.lower() if self.version == "23" else not have_refs

    def ids(self, text: str) -> list[int]:
        limit = self.settings.max_input_length or DEFAULT_LENGTH[self.version]
        return self.tokenizer(text, max_length=limit, truncation=True)["input_ids"][:-1]  # MetricX drops the EOS

    def score(self, sources: Sequence[str] | None, hyps: Sequence[str],
              refs: Sequence[str] | None = None) -> list[float]:
        qe = self.qe(refs is not None)
        if not qe and refs is None:
            raise MetricModelError(f"metricx: {self.settings.model} is reference-based; this test set has no "
                                   "references (use a QE model or metricx.qe=true)")
        if (qe or self.version == "24") and sources is None:
            raise MetricModelError(f"metricx: {self.settings.model} reads the sources; none were given")
        texts = [metricx_input(self.version, h, None if sources is None else sources[i],
                               None if qe else refs[i]) for i, h in enumerate(hyps)]
        todo = sorted({t for t in texts if t not in self.cache}, key=len)
        for start in range(0, len(todo), BATCH_SENTENCES):
            batch = todo[start: start + BATCH_SENTENCES]
            for text, value in zip(batch, self.predict([self.ids(t) for t in batch]), strict=True):
                self.cache[text] = value
            self.encoded += len(batch)
        return [self.cache[t] for t in texts]

    row: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # (d,): the output row of SCORE_ID
    scale: float = 1.0  # the decoder state's scale before the row (d^-1/2 for a tied head)

    @torch.no_grad()
    def predict(self, rows: list[list[int]]) -> list[float]:
        ids, padded = pad_right(rows, self.tokenizer.pad_token_id)
        start = torch.zeros(len(rows), 1, dtype=torch.long)
        state = self.model(input_ids=ids.to(self.device), attention_mask=(~padded).long().to(self.device),
                           decoder_input_ids=start.to(self.device)).last_hidden_state[:, 0]  # (batch, d)
        logits = (state * self.scale) @ self.row.to(state)
        return logits.float().clamp(0.0, MAX_SCORE).cpu().tolist()

    def signature(self) -> str:
        s = self.settings
        return (f"metricx:{s.model}|v{self.version}|tok:{s.tokenizer}|"
                f"len:{s.max_input_length or DEFAULT_LENGTH[self.version]}|version:{hub.snapshot_id(self.folder)}"
                "|seqlab-fp32")


def weight_row(folder: Path, name: str) -> torch.Tensor | None:
    """Row SCORE_ID of the tensor `name` in the folder's weights (safetensors, whole or sharded, or a pickled
    state dict read with weights_only), or None where the checkpoint does not hold it."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"] if index.is_file() else {}
    files = [folder / weight_map[name]] if name in weight_map else [folder / "model.safetensors"]
    for path in files:
        if path.is_file():
            with safe_open(str(path), framework="pt") as f:
                return f.get_slice(name)[SCORE_ID].clone() if name in f.keys() else None  # noqa: SIM118
    pickled = folder / "pytorch_model.bin"
    if pickled.is_file():
        state = torch.load(pickled, map_location="cpu", weights_only=True, mmap=True)
        return state[name][SCORE_ID].clone() if name in state else None
    return None


def output_row(folder: Path, config: dict) -> tuple[torch.Tensor, float]:
    """MetricX's head: its own row where the checkpoint is untied, else the shared row at scale d^-1/2."""
    tied = config.get("tie_word_embeddings", True) is not False
    row = None if tied else weight_row(folder, "lm_head.weight")
    if row is not None:
        return row.float(), 1.0
    if not tied:
        raise MetricModelError(f"{folder}: tie_word_embeddings is false but the weights hold no lm_head.weight")
    shared = weight_row(folder, "shared.weight")
    if shared is None:
        raise MetricModelError(f"{folder}: no shared.weight in the weights; not an mT5 checkpoint")
    return shared.float(), float(config["d_model"]) ** -0.5


def load_metricx(settings: MetricXSettings, device: torch.device | str = "cpu") -> MetricXScorer:
    from transformers import AutoTokenizer, MT5Model

    settings.resolved_version()
    try:
        folder = hub.resolve_folder(settings.model)
        tok_folder = hub.resolve_folder(settings.tokenizer)
    except hub.HubError as err:
        raise MetricModelError(f"metricx: {err}") from None
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if config.get("model_type") not in ("mt5", "t5"):
        raise MetricModelError(f"metricx.model={settings.model}: {folder / 'config.json'} is not an mT5 model "
                               f"(model_type {config.get('model_type')!r})")
    if config.get("vocab_size", 0) <= SCORE_ID:
        raise MetricModelError(f"metricx.model={settings.model}: its vocabulary ({config.get('vocab_size')}) has no "
                               f"id {SCORE_ID}, the logit MetricX reads; not a MetricX model")
    row, scale = output_row(folder, config)
    model = MT5Model.from_pretrained(folder).eval().to(device)  # the stacks; the head is `row`
    return MetricXScorer(settings, folder, AutoTokenizer.from_pretrained(tok_folder), model, torch.device(device),
                         row=row, scale=scale)
