"""A quick greedy BLEU/ROUGE on a fixed validation subset, logged at each validation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seqlab.constants import VALIDATION
from seqlab.data.corpora import Example, load_split
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig
from seqlab.evaluation import EvalSettings, evaluate
from seqlab.metrics import keys as K
from seqlab.train.config import LoopConfig


@dataclass
class QuickEval:
    """Greedy decoding of the first N validation examples (the same ones every time)."""

    examples: list[Example]
    tokenizer: Tokenizer
    decoding: DecodingConfig

    @classmethod
    def from_datamodule(cls, datamodule: Any, loop: LoopConfig) -> QuickEval:
        examples = load_split(datamodule.cfg.corpus, VALIDATION)[: loop.quick_eval_size]
        return cls(examples, datamodule.tokenizer, DecodingConfig(max_length=loop.quick_eval_max_len))

    def __call__(self, module: Any) -> dict[str, float]:
        if module.global_rank != 0:
            return {}
        _, metrics = evaluate(module.model, self.tokenizer, self.examples, self.decoding,
                              EvalSettings(split=VALIDATION, score_references=False, n_bootstrap=0))
        return {f"val/greedy_{k}": float(metrics[k]) for k in (K.BLEU, K.CHRF, K.ROUGE1, K.ROUGEL)}
