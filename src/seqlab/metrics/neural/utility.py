"""Neural metrics as MBR utilities and rerankers (Fernandes et al. 2022; Freitag et al. 2022): COMET and
BERTScore's F1 between every candidate and every pseudo-reference, each sentence embedded once per model and
process (comet-mbr's and mbrs's scheme), and CometKiwi's reference-free score of each candidate, which ranks an
n-best list by estimated quality (QE reranking). All on a 0-100 scale, as the other utilities."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np

from seqlab.metrics import keys as K
from seqlab.metrics.neural.bertscore import BertScoreSettings
from seqlab.metrics.neural.errors import MetricModelError
from seqlab.metrics.neural.suite import NeuralSettings, scorer

NeuralUtility = Literal["comet", "bertscore", "cometkiwi"]
NEURAL_UTILITIES = get_args(NeuralUtility)
RERANKERS = (K.COMETKIWI,)  # scores of a candidate alone, no pseudo-references (QE reranking)


def utility_settings(utility: str, model: str | None, layers: int | None) -> NeuralSettings:
    """The neural settings of one utility: its model (None: the metric's default), BERTScore's layer."""
    base = NeuralSettings()
    if utility == K.BERTSCORE:
        return NeuralSettings(bertscore=BertScoreSettings(model=model or base.bertscore.model, num_layers=layers))
    if utility == K.COMET:
        return NeuralSettings(comet=model or base.comet)
    return NeuralSettings(cometkiwi=model or base.cometkiwi)


def neural_utility(utility: str, source: str | None, hyps: Sequence[str], refs: Sequence[str],
                   model: str | None = None, layers: int | None = None) -> np.ndarray:
    """(N, M) utility of candidate i against pseudo-reference j; a reranker's (N, 1) score of each candidate."""
    settings = utility_settings(utility, model, layers)
    metric = scorer(utility, settings)
    if utility == K.BERTSCORE:
        return 100.0 * metric.pairwise(hyps, refs).numpy()
    if source is None:
        raise MetricModelError(f"decoding.mbr.utility={utility} reads the source; none was given")
    if utility == K.COMET:
        return 100.0 * metric.pairwise(source, hyps, refs).double().numpy()
    return 100.0 * np.asarray(metric.score([source] * len(hyps), hyps, None), dtype=np.float64)[:, None]
