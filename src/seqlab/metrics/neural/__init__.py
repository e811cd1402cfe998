"""Metrics computed by a model: COMET and CometKiwi (comet), BERTScore (bertscore), MetricX (metricx), each exact
to its reference implementation; suite chooses and runs them for an evaluation."""

from seqlab.metrics.neural.errors import MetricModelError
from seqlab.metrics.neural.suite import (
    NeuralScores,
    NeuralSettings,
    check_neural,
    encoded_sentences,
    neural_scores,
)

__all__ = ["MetricModelError", "NeuralScores", "NeuralSettings", "check_neural",
           "encoded_sentences", "neural_scores"]
