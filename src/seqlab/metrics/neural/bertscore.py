"""BERTScore (Zhang et al. 2020) as bert-score 0.3.13 computes it, on any Hugging Face encoder folder: the
tokens' embeddings at one layer, each hypothesis token matched to its most similar reference token by cosine
(precision), each reference token to its most similar hypothesis token (recall), weighted by idf or evenly
with [CLS] and [SEP] at 0, F1 = 2PR/(P+R).

bert-score's rules kept: the text is stripped; it is encoded with the tokenizer's special tokens, truncated
at `model_max_length`, RoBERTa's and GPT-2's tokenizers with a prefix space; the model is cut after
`num_layers` layers (bert-score's tuned layer by default for the models it names); special tokens take part
in the matching; a sentence with no tokens besides the two special ones scores 0; several references give each
of P, R and F its best reference; rescaling maps x to (x - b) / (1 - b) with the baseline file's row for the
layer. One difference, deliberate: bert-score pads a batch's embeddings and lets the padding's similarity of 0
enter the maximum, so a token whose best cosine is negative scores 0 next to a longer sentence but its cosine
alone; seqlab takes the maximum over real tokens only, which equals bert-score at batch size 1 (and whenever
the best cosine is positive, as it nearly always is with a trained model).

Embeddings depend on the sentence alone and are cached by text: a sweep encodes its references once.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from seqlab import hub
from seqlab.data.sequences import pad_right
from seqlab.metrics.neural.errors import MetricModelError

# bert-score's tuned layers (its model2layers) for the models its defaults use or the papers report
DEFAULT_LAYERS = {"roberta-large": 17, "roberta-base": 10, "bert-base-uncased": 9, "bert-base-multilingual-cased": 9,
                  "bert-base-chinese": 8, "distilbert-base-uncased": 5, "xlm-roberta-base": 9,
                  "xlm-roberta-large": 17, "microsoft/deberta-xlarge-mnli": 40, "microsoft/deberta-large-mnli": 18,
                  "microsoft/deberta-base": 9, "facebook/bart-large": 10}
PREFIX_SPACE = ("GPT2Tokenizer", "GPT2TokenizerFast", "RobertaTokenizer", "RobertaTokenizerFast")
BATCH_SENTENCES = 64


@dataclass(frozen=True)
class BertScoreSettings:
    """Which encoder and how: the model (hub name or folder), its layer, idf weighting, a rescale baseline."""

    model: str = "roberta-large"
    num_layers: int | None = None  # None = bert-score's tuned layer for the model (DEFAULT_LAYERS)
    idf: bool = False  # idf weights from the references (bert-score's idf=True)
    baseline: str | None = None  # a rescale baseline file (bert-score's rescale_baseline/<lang>/<model>.tsv)

    def layers(self) -> int:
        if self.num_layers is not None:
            return self.num_layers
        if self.model not in DEFAULT_LAYERS:
            raise MetricModelError(f"bertscore.num_layers: {self.model} has no tuned layer seqlab knows; set "
                                   f"bertscore.num_layers (bert-score's defaults: {DEFAULT_LAYERS})")
        return DEFAULT_LAYERS[self.model]


@dataclass
class BertScores:
    """Per-hypothesis precision, recall and F1 (0-1, rescaled if a baseline was given)."""

    precision: list[float]
    recall: list[float]
    f1: list[float]


@dataclass
class BertScorer:
    settings: BertScoreSettings
    folder: Path
    tokenizer: object
    model: torch.nn.Module
    device: torch.device
    baseline: tuple[float, float, float] | None = None  # the rescale baseline's P, R, F at the model's layer
    cache: dict[str, tuple[list[int], Tensor]] = field(default_factory=dict)
    encoded: int = 0

    def ids(self, text: str) -> list[int]:
        """bert-score's sent_encode."""
        text = text.strip()
        special = [self.tokenizer.cls_token_id, self.tokenizer.sep_token_id]
        if not text:
            return [i for i in special if i is not None]
        extra = {"add_prefix_space": True} if type(self.tokenizer).__name__ in PREFIX_SPACE else {}
        return self.tokenizer.encode(text, add_special_tokens=True, truncation=True,
                                     max_length=self.tokenizer.model_max_length, **extra)

    def embed(self, texts: Sequence[str]) -> None:
        """Cache each new text's ids and unit-length token embeddings, in length-sorted batches."""
        todo = sorted({t for t in texts if t not in self.cache}, key=lambda t: len(t.split(" ")), reverse=True)
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(todo), BATCH_SENTENCES):
            batch = todo[start: start + BATCH_SENTENCES]
            rows = [self.ids(t) for t in batch]
            ids, padded = pad_right(rows, pad)
            with torch.no_grad():
                out = self.model(ids.to(self.device), attention_mask=(~padded).long().to(self.device))[0]
            out = out.float().cpu()
            for i, (text, r) in enumerate(zip(batch, rows, strict=True)):
                emb = out[i, : len(r)]
                self.cache[text] = (r, emb / emb.norm(dim=-1, keepdim=True))
            self.encoded += len(batch)

    def weights(self, ids: list[int], idf: dict[int, float] | None) -> Tensor:
        special = {self.tokenizer.cls_token_id, self.tokenizer.sep_token_id}
        if idf is None:
            return torch.tensor([0.0 if i in special else 1.0 for i in ids])
        default = idf.get(-1, 0.0)
        return torch.tensor([idf.get(i, default) for i in ids])

    def pair(self, hyp: str, ref: str, idf: dict[int, float] | None) -> tuple[float, float, float]:
        (h_ids, h), (r_ids, r) = self.cache[hyp], self.cache[ref]
        sim = h @ r.T  # (hyp tokens, ref tokens)
        wh, wr = self.weights(h_ids, idf), self.weights(r_ids, idf)
        p = float((sim.max(dim=1)[0] * wh / wh.sum()).sum())
        rc = float((sim.max(dim=0)[0] * wr / wr.sum()).sum())
        f = 2 * p * rc / (p + rc) if not (math.isnan(p) or math.isnan(rc)) and p + rc != 0 else 0.0
        f = 0.0 if math.isnan(f) else f
        if len(h_ids) == 2 or len(r_ids) == 2:  # bert-score: an empty sentence scores 0 (F as computed)
            p = rc = 0.0
        return p, rc, f

    def pairwise(self, hyps: Sequence[str], refs: Sequence[str]) -> Tensor:  # -> (N, M) F1 of hyp i against ref j
        """F1 of every pair (rescaled if a baseline was given), each sentence embedded once: MBR's utility."""
        self.embed([*hyps, *refs])
        idf = self.idf(refs) if self.settings.idf else None
        f1 = [[self.rescale(self.pair(h, r, idf))[2] for r in refs] for h in hyps]
        return torch.tensor(f1, dtype=torch.float64)

    def score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> BertScores:
        """Scores of each hypothesis against its references (`refs`: one list of strings per stream)."""
        for stream in refs:
            if len(stream) != len(hyps):
                raise MetricModelError(f"bertscore: {len(hyps)} hypotheses but a reference stream of {len(stream)}")
        flat = [stream[i] for i in range(len(hyps)) for stream in refs]
        self.embed([*flat, *hyps])
        idf = self.idf(flat) if self.settings.idf else None
        out = BertScores([], [], [])
        for i, hyp in enumerate(hyps):
            best = [max(col) for col in zip(*(self.pair(hyp, stream[i], idf) for stream in refs), strict=True)]
            for values, x in zip((out.precision, out.recall, out.f1), self.rescale(best), strict=True):
                values.append(x)
        return out

    def idf(self, refs: Sequence[str]) -> dict[int, float]:
        """bert-score's idf over the references: log((M + 1) / (df + 1)), unseen tokens log(M + 1) (key -1)."""
        counts: Counter[int] = Counter()
        for ref in refs:
            counts.update(set(self.ids(ref)))
        m = len(refs)
        return {-1: math.log(m + 1), **{i: math.log((m + 1) / (c + 1)) for i, c in counts.items()}}

    def rescale(self, values: Sequence[float]) -> list[float]:
        if self.baseline is None:
            return list(values)
        return [(x - b) / (1 - b) for x, b in zip(values, self.baseline, strict=True)]

    def signature(self) -> str:
        s = self.settings
        return (f"bertscore:{s.model}|L{s.layers()}|{'idf' if s.idf else 'no-idf'}"
                f"{'|rescaled' if s.baseline else ''}|version:{hub.snapshot_id(self.folder)}|seqlab-fp32")


def read_baseline(path: Path, layer: int) -> tuple[float, float, float]:
    """The P, R, F baselines of `layer` from bert-score's CSV (LAYER,P,R,F, one row per layer from 0)."""
    try:
        rows = [line.split(",") for line in path.read_text(encoding="utf-8").split("\n")[1:] if line.strip()]
        return tuple(float(x) for x in rows[layer][1:4])  # type: ignore[return-value]
    except (OSError, IndexError, ValueError) as err:
        raise MetricModelError(f"bertscore.baseline={path}: no P,R,F row for layer {layer} ({err})") from None


def load_bertscore(settings: BertScoreSettings, device: torch.device | str = "cpu") -> BertScorer:
    """The encoder (cut after settings.layers() layers) and its tokenizer, from a folder or the local cache."""
    from transformers import AutoModel, AutoTokenizer

    try:
        folder = hub.resolve_folder(settings.model)
    except hub.HubError as err:
        raise MetricModelError(f"bertscore.model: {err}") from None
    model = AutoModel.from_pretrained(folder).eval()
    if hasattr(model, "encoder") and hasattr(model, "decoder"):
        model = model.encoder
    layers = settings.layers()
    stack = getattr(getattr(model, "encoder", None), "layer", None)
    if stack is None:
        raise MetricModelError(f"bertscore.model={settings.model}: {type(model).__name__} is not an encoder "
                               "whose layers seqlab can cut (BERT, RoBERTa, XLM-R, DeBERTa, ELECTRA do)")
    if not 0 <= layers <= len(stack):
        raise MetricModelError(f"bertscore.num_layers={layers}: {settings.model} has {len(stack)} layers")
    model.encoder.layer = torch.nn.ModuleList(list(stack)[:layers])
    baseline = None if settings.baseline is None else read_baseline(Path(settings.baseline), layers)
    return BertScorer(settings, folder, AutoTokenizer.from_pretrained(folder), model.to(device), torch.device(device),
                      baseline)
