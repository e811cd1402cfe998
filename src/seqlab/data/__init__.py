"""Corpora, tokenizer and token-budget batching."""

from seqlab.data.config import DataConfig
from seqlab.data.corpora import CorpusConfig, CorpusError, Example, examples_from_text_files, load_split
from seqlab.data.datamodule import Batch, Seq2SeqDataModule, collate
from seqlab.data.tokenizer import Tokenizer, TokenizerConfig

__all__ = ["Batch", "CorpusConfig", "CorpusError", "DataConfig", "Example", "Seq2SeqDataModule",
           "Tokenizer", "TokenizerConfig", "collate", "examples_from_text_files", "load_split"]
