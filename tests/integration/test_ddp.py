"""Two-process DDP on CPU (gloo): ranks see disjoint data and end with identical weights, for the encoder-decoder
and the one-stack architectures alike."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest
import torch

from seqlab.data import CorpusConfig, DataConfig, Seq2SeqDataModule, TokenizerConfig
from seqlab.model import ModelConfig
from seqlab.train.config import OptimConfig, TrainConfig
from seqlab.train.module import Seq2SeqModule


class Record(L.Callback):
    """Each rank writes the example indices it trained on and a fingerprint of its final weights."""

    def __init__(self, out: Path) -> None:
        self.out, self.seen = out, []

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.seen.extend(batch.index.tolist())

    def on_train_end(self, trainer, module) -> None:
        flat = torch.cat([p.detach().flatten() for p in module.parameters()])
        (self.out / f"rank{trainer.global_rank}.json").write_text(
            json.dumps({"seen": self.seen, "weights": flat.tolist()[:: max(1, flat.numel() // 5000)]}))


def bible_data(tmp_path: Path) -> DataConfig:
    return DataConfig(corpus=CorpusConfig(name="bible", kind="embedded", task="translation", path="bible_es_en",
                                          src_lang="es", tgt_lang="en"),
                      tokenizer=TokenizerConfig(vocab_size=1000, max_sentences=20000), max_tokens=1024,
                      cache_dir=str(tmp_path / "cache"))


STACKS = {"encoder_decoder": dict(encoder_layers=1, decoder_layers=1),
          "decoder_only": dict(architecture="decoder_only", encoder_layers=0, decoder_layers=2),
          "prefix_lm": dict(architecture="prefix_lm", encoder_layers=0, decoder_layers=2)}


@pytest.mark.slow
@pytest.mark.parametrize("architecture", list(STACKS))
def test_two_process_ddp_on_cpu(tmp_path, architecture):
    data_cfg = bible_data(tmp_path)
    dm = Seq2SeqDataModule(data_cfg)
    dm.setup()  # tokenizer and token ids cached once, before the processes start
    model_cfg = ModelConfig(src_vocab_size=dm.tokenizer.src_vocab_size, d_model=32, n_heads=4, d_ff=64,
                            max_positions=512, dropout=0.1, **STACKS[architecture])
    module = Seq2SeqModule(model_cfg, OptimConfig(warmup_steps=2), TrainConfig(quick_eval_size=0))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_steps=4, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, use_distributed_sampler=False,
                        limit_val_batches=0, callbacks=[Record(tmp_path)], num_sanity_val_steps=0)
    trainer.fit(module, datamodule=Seq2SeqDataModule(data_cfg))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert len(ranks[0]["seen"]) > 0 and len(ranks[1]["seen"]) > 0
    assert not set(ranks[0]["seen"]) & set(ranks[1]["seen"]), "ranks must see disjoint examples"
    assert ranks[0]["weights"] == ranks[1]["weights"], "ranks must end with identical weights"


class CacheMustExist(Seq2SeqDataModule):
    """setup() on every rank finds the token ids already prepared: only prepare_data (rank 0) tokenizes."""

    def setup(self, stage=None):
        from seqlab.data.prepare import load_tokenizer, split_folder

        tokenizer = load_tokenizer(self.cfg)
        for split in ("train", "validation"):
            assert (split_folder(self.cfg, tokenizer, split) / "meta.json").is_file(), "setup would tokenize"
        super().setup(stage)


@pytest.mark.slow
def test_ddp_prepares_a_fresh_cache_once(tmp_path):
    data_cfg = bible_data(tmp_path)
    model_cfg = ModelConfig(src_vocab_size=1000, d_model=32, n_heads=4, encoder_layers=1, decoder_layers=1, d_ff=64,
                            max_positions=256)
    module = Seq2SeqModule(model_cfg, OptimConfig(warmup_steps=2), TrainConfig(quick_eval_size=0))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_steps=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, use_distributed_sampler=False,
                        limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=CacheMustExist(data_cfg))
    folders = sorted(p.name for p in (tmp_path / "cache").glob("data-*/*"))
    assert folders == ["train", "validation"]  # one copy each, no private folder of a second preparation
