"""Tiny random encoder folders with their tokenizers in the layouts bert-base and roberta-large ship (WordPiece
vocab.txt; byte-level BPE vocab.json and merges.txt), saved by transformers: what the BERTScore tests score with."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from tests.hf_tokenizer_folders import TEXT


def randomised(model):
    with torch.no_grad():  # weights larger than the init's, so that tokens get distinct embeddings
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


def bert_folder(root: Path) -> Path:
    from tokenizers import BertWordPieceTokenizer

    folder = root / "bert"
    folder.mkdir()
    wordpiece = BertWordPieceTokenizer()
    wordpiece.train_from_iterator(TEXT, vocab_size=200, min_frequency=1)
    wordpiece.save_model(str(folder))
    tok = transformers.BertTokenizer.from_pretrained(folder, model_max_length=24)
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=40)
    randomised(transformers.BertModel(cfg, add_pooling_layer=False)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def roberta_folder(root: Path) -> Path:
    from tokenizers import ByteLevelBPETokenizer

    folder = root / "roberta"
    folder.mkdir()
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXT, vocab_size=300, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(folder))
    tok = transformers.RobertaTokenizer.from_pretrained(folder, model_max_length=30)
    torch.manual_seed(0)
    cfg = transformers.RobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=40, pad_token_id=1)
    randomised(transformers.RobertaModel(cfg, add_pooling_layer=False)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
