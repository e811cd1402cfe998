"""COMET and CometKiwi scores as unbabel-comet computes them (comet_checkpoint reads the model), in fp32 on the
CPU or a GPU, each sentence encoded once per model and process.

- Regression models (COMET-DA: wmt20/wmt22-comet-da): the source, translation and reference are encoded
  apart; each sentence embedding is the pooled mix of the encoder's layers; the estimator reads
  [mt, ref, mt*ref, |mt-ref|, mt*src, |mt-src|] (referenceless regression: [mt, src, mt*src, |mt-src|]).
  Sentence embeddings depend on the sentence alone, so they are cached by text: a sweep scored against one
  test set encodes its sources and references once (`encoded` counts the encoder's sentences).
- Unified models (CometKiwi: wmt22/wmt23-cometkiwi-da; XCOMET's architecture): the translation and the
  other segments are joined into one input (`<s> mt </s></s> src </s>`) and the first token's mixed
  embedding is scored; with source and reference both, the score is the mean of the (mt, src), (mt, ref) and
  (mt, src, ref) inputs' scores, as unbabel-comet averages them. Joined inputs are cached by their texts.

Segments are truncated as the library truncates them: each to the encoder's positions less four tokens, a
joined input to the encoder's positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from seqlab import hub
from seqlab.data.sequences import pad_right
from seqlab.metrics.neural.comet_checkpoint import (
    CHECKPOINT,
    CometSpec,
    encoder_folder,
    estimator,
    read_checkpoint,
    read_hparams,
    read_spec,
    sub_state,
)
from seqlab.metrics.neural.errors import MetricModelError
from seqlab.metrics.neural.mixing import mix_layers, pool

BATCH_SENTENCES = 32  # sentences per encoder call (sorted by length, so padding stays small)


@dataclass
class CometScorer:
    """A loaded COMET model and its cache of sentence (or joined-input) embeddings."""

    spec: CometSpec
    folder: Path
    tokenizer: object
    encoder: torch.nn.Module
    layer_weights: Tensor | None  # (layers,) before normalisation; None = one layer
    gamma: Tensor | None
    head: torch.nn.Sequential
    device: torch.device
    version: str
    name: str  # as the settings name the model: a hub name, or the folder's name (what the signature says)
    cache: dict[tuple[str, ...], Tensor] = field(default_factory=dict)
    encoded: int = 0  # encoder inputs computed (not read from the cache)

    @property
    def max_positions(self) -> int:
        return self.encoder.config.max_position_embeddings - 2

    def tokenize(self, text: str) -> list[int]:
        """One segment's ids with <s> and </s>, truncated as COMET's prepare_sample does."""
        return self.tokenizer(str(text), truncation=True, max_length=self.max_positions - 2)["input_ids"]

    def joined(self, texts: tuple[str, ...]) -> list[int]:
        """The segments as one input, COMET's concat_sequences: <s> a </s></s> b </s> ..., cut to the positions
        when the parts are longer than the positions less the special tokens."""
        parts = [self.tokenize(t) for t in texts]
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        ids = parts[0]
        for part in parts[1:]:  # XLM-R's pair rule (build_inputs_with_special_tokens)
            ids = [cls, *ids[1:-1], sep, sep, *part[1:-1], sep]
        if sum(len(p) - 2 for p in parts) > self.max_positions - (1 + 2 * len(parts)):
            ids = ids[: self.max_positions]
        return ids

    def embed(self, inputs: Sequence[tuple[str, ...]]) -> Tensor:  # -> (n, hidden)
        """Each input's sentence embedding (a 1-tuple: one segment; longer: joined), from the cache or encoded
        in length-sorted batches."""
        todo = [key for key in dict.fromkeys(inputs) if key not in self.cache]
        ids = {key: self.tokenize(key[0]) if len(key) == 1 else self.joined(key) for key in todo}
        todo.sort(key=lambda k: len(ids[k]))
        for start in range(0, len(todo), BATCH_SENTENCES):
            batch = todo[start: start + BATCH_SENTENCES]
            for key, row in zip(batch, self.encode([ids[k] for k in batch]), strict=True):
                self.cache[key] = row
            self.encoded += len(batch)
        return torch.stack([self.cache[key] for key in inputs])

    @torch.no_grad()
    def encode(self, rows: list[list[int]]) -> Tensor:  # -> (batch, hidden), on the CPU
        pad = self.tokenizer.pad_token_id
        ids, padded = pad_right(rows, pad)  # (batch, width) each
        ids, mask = ids.to(self.device), (~padded).long().to(self.device)
        out = self.encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        layers = out.hidden_states  # embeddings + every layer: (batch, width, hidden) each
        if self.layer_weights is None:
            mixed = layers[self.spec.layer]
        else:
            mixed = mix_layers(layers, mask, self.layer_weights, self.gamma, self.spec.mix, self.spec.layer_norm)
        return pool(self.spec.pool, ids, mixed, mask, pad, out.last_hidden_state).float().cpu()

    @torch.no_grad()
    def score(self, sources: Sequence[str] | None, hyps: Sequence[str],
              refs: Sequence[str] | None = None) -> list[float]:
        """One score per hypothesis (its source and reference at the same index)."""
        self.check_inputs(sources, hyps, refs)
        if self.spec.kind == "unified_metric":
            return self.unified(sources, hyps, refs)
        mt = self.embed([(h,) for h in hyps])
        src = self.embed([(s,) for s in sources])
        if self.spec.kind == "referenceless_regression_metric":
            features = [mt, src, mt * src, (mt - src).abs()]
        else:
            ref = self.embed([(r,) for r in refs])
            features = [mt, ref, mt * ref, (mt - ref).abs(), mt * src, (mt - src).abs()]
        return self.estimate(torch.cat(features, dim=1))

    def unified(self, sources: Sequence[str] | None, hyps: Sequence[str], refs: Sequence[str] | None
                ) -> list[float]:
        others = [seg for seg, texts in (("src", sources), ("ref", refs))
                  if seg in self.spec.input_segments and texts is not None]
        streams = {"src": sources, "ref": refs}
        # with both, the three inputs unbabel-comet averages
        combos = (("src",), ("ref",), ("src", "ref")) if len(others) == 2 else (tuple(others),)
        scores = [self.estimate(self.embed([(h, *(streams[s][i] for s in combo)) for i, h in enumerate(hyps)]))
                  for combo in combos]
        return [sum(column) / len(column) for column in zip(*scores, strict=True)]

    @torch.no_grad()
    def pairwise(self, source: str, hyps: Sequence[str], refs: Sequence[str]) -> Tensor:  # -> (N, M)
        """COMET(source, hyp i, ref j) for every pair, each sentence embedded once (comet-mbr's scheme): what
        MBR with a COMET utility needs. Regression models only."""
        if self.spec.kind != "regression_metric":
            raise MetricModelError(f"{self.folder}: MBR needs a reference-based COMET model ({self.spec.kind} "
                                   "reads no references; use it to rerank: decoding.mbr.utility=cometkiwi)")
        mt, ref = self.embed([(h,) for h in hyps]), self.embed([(r,) for r in refs])  # (N, d), (M, d)
        n, m = len(hyps), len(refs)
        h = mt[:, None, :].expand(n, m, -1).reshape(n * m, -1)  # every (hyp, ref) pair as one row
        r = ref[None, :, :].expand(n, m, -1).reshape(n * m, -1)
        s = self.embed([(source,)]).expand(n * m, -1)
        features = torch.cat([h, r, h * r, (h - r).abs(), h * s, (h - s).abs()], dim=1)
        return torch.tensor(self.estimate(features)).view(n, m)

    def estimate(self, features: Tensor) -> list[float]:
        return self.head(features.to(self.device)).view(-1).float().cpu().tolist()

    def check_inputs(self, sources: Sequence[str] | None, hyps: Sequence[str], refs: Sequence[str] | None) -> None:
        name = self.folder
        if self.spec.needs_reference and refs is None:
            raise MetricModelError(f"{name}: a reference-based COMET model; this test set has no references "
                                   "(use a reference-free model: cometkiwi)")
        if self.spec.kind != "unified_metric" and sources is None:
            raise MetricModelError(f"{name}: COMET reads the sources; none were given")
        given = {"src": sources is not None, "ref": refs is not None}
        if self.spec.kind == "unified_metric" and not any(given[s] for s in self.spec.input_segments if s in given):
            raise MetricModelError(f"{name}: reads the translation with {list(self.spec.input_segments[1:])}; "
                                   "none of them were given")
        for label, texts in (("sources", sources), ("references", refs)):
            if texts is not None and len(texts) != len(hyps):
                raise MetricModelError(f"{name}: {len(hyps)} hypotheses but {len(texts)} {label}")

    def signature(self) -> str:
        """The model as the settings name it (a hub name, or the folder's name), its kind, the cached commit."""
        return f"comet:{self.name}|kind:{self.spec.kind}|version:{self.version}|seqlab-fp32"


def model_name(name: str | Path) -> str:
    """How a signature names a model: a hub name as given, a folder by its own name (never a cache's
    snapshot hash)."""
    path = Path(name).expanduser()
    return path.name if path.is_dir() else str(name)


def load_comet(name: str | Path, device: torch.device | str = "cpu") -> CometScorer:
    """A COMET model from its folder or hub name (in the local cache; never downloaded)."""
    from transformers import AutoConfig, AutoTokenizer, XLMRobertaModel, XLMRobertaXLModel

    try:
        folder = hub.resolve_folder(name)
    except hub.HubError as err:
        raise MetricModelError(str(err)) from None
    hparams, checkpoint = read_hparams(folder), read_checkpoint(folder / CHECKPOINT)
    spec = read_spec(folder, hparams, checkpoint)
    enc_folder = encoder_folder(spec, folder)
    config = AutoConfig.from_pretrained(enc_folder)
    cls = XLMRobertaXLModel if spec.encoder == "XLM-RoBERTa-XL" else XLMRobertaModel
    encoder = cls(config, add_pooling_layer=False)
    state = checkpoint["state_dict"]
    missing, _ = encoder.load_state_dict(sub_state(state, "encoder.model."), strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing:
        raise MetricModelError(f"{folder / CHECKPOINT}: the encoder's weights {missing[:3]} are missing; "
                               f"is {spec.pretrained_model} the encoder it was trained with?")
    mixed = spec.layer == "mix"
    n_layers = config.num_hidden_layers + 1
    if not mixed and not 0 <= int(spec.layer) < n_layers:
        raise MetricModelError(f"{folder / CHECKPOINT}: layer={spec.layer}, the encoder has {n_layers}")
    weights = (torch.cat([state[f"layerwise_attention.scalar_parameters.{i}"] for i in range(n_layers)])
               if mixed else None)
    in_dim = config.hidden_size * {"regression_metric": 6, "referenceless_regression_metric": 4}.get(spec.kind, 1)
    device = torch.device(device)
    return CometScorer(spec=spec, folder=folder, tokenizer=AutoTokenizer.from_pretrained(enc_folder),
                       encoder=encoder.eval().to(device), layer_weights=None if weights is None else weights.to(device),
                       gamma=state["layerwise_attention.gamma"].to(device) if mixed else None,
                       head=estimator(spec, in_dim, state, folder / CHECKPOINT).to(device), device=device,
                       version=hub.snapshot_id(folder), name=model_name(name))
