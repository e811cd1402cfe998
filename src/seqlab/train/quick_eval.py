"""A quick greedy BLEU/ROUGE on a fixed validation subset, logged at each validation (a Lightning callback)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from seqlab.constants import VALIDATION
from seqlab.data.corpora import Example, load_split
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig
from seqlab.inference.evaluation import EvalSettings, evaluate
from seqlab.metrics import keys as K
from seqlab.train.config import TrainConfig

TABLE_ROWS = 20  # quick-eval sentences shown in the W&B table at each validation


def eager() -> contextlib.AbstractContextManager:
    """Compiled modules run eagerly inside (torch >= 2.6's `set_stance`; with an older torch nothing is compiled
    to bypass: `train.compile=layers` refuses it)."""
    stance = getattr(torch.compiler, "set_stance", None)
    return stance("force_eager") if stance is not None else contextlib.nullcontext()


class QuickEval(Callback):
    """Greedy decoding of the first N validation examples (the same ones every time), after each validation.

    A plain class, not a dataclass: Hydra would turn a dataclass among the Trainer's arguments into a config.
    """

    def __init__(self, examples: list[Example], tokenizer: Tokenizer, decoding: DecodingConfig) -> None:
        self.examples, self.tokenizer, self.decoding = examples, tokenizer, decoding

    @classmethod
    def from_datamodule(cls, datamodule: Any, train: TrainConfig) -> QuickEval:
        examples = load_split(datamodule.cfg.corpus, VALIDATION)[: train.quick_eval_size]
        layout = getattr(datamodule.tokenizer, "layout", None)  # a family that opens the target with its code
        forced = layout.forced_first if layout is not None else None
        return cls(examples, datamodule.tokenizer, DecodingConfig(max_length=train.quick_eval_max_len,
                                                                  forced_bos_token_id=forced))

    def metrics(self, module: Any) -> tuple[list[Any], dict[str, float]]:
        with eager():  # train.compile=layers: the layers are compiled for training, not for decoding
            records, metrics = evaluate(module.model, self.tokenizer, self.examples, self.decoding,
                                        EvalSettings(split=VALIDATION, score_references=False, n_bootstrap=0))
        return records, {f"val/greedy_{k}": float(metrics[k]) for k in (K.BLEU, K.CHRF, K.ROUGE1, K.ROUGEL)}

    def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
        if trainer.sanity_checking or trainer.global_rank != 0:
            return
        records, metrics = self.metrics(module)
        for key, value in metrics.items():
            module.log(key, value, rank_zero_only=True)
        for logger in trainer.loggers:  # the dashboard shows the outputs improving over the steps
            if type(logger).__name__ == "WandbLogger":
                rows = [[r.id, r.source, r.reference, r.hypothesis] for r in records[:TABLE_ROWS]]
                logger.log_table(key="val/quick_eval", columns=["id", "source", "reference", "hypothesis"],
                                 data=rows, step=trainer.global_step)
