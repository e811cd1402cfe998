"""Tiny random models of every Hugging Face family seqlab imports, built from the family's own config class
(nothing downloaded), saved as save_pretrained folders; shared by the family tests."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

VOCAB = 60
COMMON = dict(vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
              dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
T5 = dict(vocab_size=VOCAB, d_model=16, d_kv=6, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=4,
          dropout_rate=0.0, relative_attention_num_buckets=8, relative_attention_max_distance=20,
          pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)

# name -> (model class, config class, config); ids as each family numbers them
FAMILIES = {
    "marian": (transformers.MarianMTModel, transformers.MarianConfig,
               dict(COMMON, pad_token_id=59, eos_token_id=0, decoder_start_token_id=59, activation_function="swish",
                    scale_embedding=True)),
    "bart": (transformers.BartForConditionalGeneration, transformers.BartConfig,
             dict(COMMON, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                  forced_bos_token_id=0, activation_function="gelu")),
    "mbart": (transformers.MBartForConditionalGeneration, transformers.MBartConfig,
              dict(COMMON, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                   scale_embedding=True, activation_function="gelu")),
    "pegasus": (transformers.PegasusForConditionalGeneration, transformers.PegasusConfig,
                dict(COMMON, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, scale_embedding=True,
                     activation_function="relu")),
    "m2m_100": (transformers.M2M100ForConditionalGeneration, transformers.M2M100Config,
                dict(COMMON, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                     scale_embedding=True, activation_function="relu")),
    "t5_v1.0": (transformers.T5ForConditionalGeneration, transformers.T5Config,
                dict(T5, feed_forward_proj="relu")),
    "t5_v1.1": (transformers.T5ForConditionalGeneration, transformers.T5Config,
                dict(T5, feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
    # a decoder deeper than the encoder (transformers' own cache cannot generate with it, its forward can)
    "t5_deep_decoder": (transformers.T5ForConditionalGeneration, transformers.T5Config,
                        dict(T5, feed_forward_proj="gated-gelu", num_decoder_layers=3)),
}


def ids_of(name: str) -> tuple[int, int, int]:
    """(pad, eos, decoder start) of a family's tiny model."""
    c = FAMILIES[name][2]
    return c["pad_token_id"], c["eos_token_id"], c["decoder_start_token_id"]


def build(name: str, seed: int = 0) -> transformers.PreTrainedModel:
    """The family's tiny model with every weight moved off its init (biases and position tables count)."""
    model_cls, config_cls, config = FAMILIES[name]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**config)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # fixed sinusoid tables stay what their family defines
                p.add_(0.2 * torch.randn_like(p))
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_(0, 0.5)
    return model


def save(model: transformers.PreTrainedModel, folder: Path, **kw) -> Path:
    model.save_pretrained(folder, **kw)
    return folder


def batch(name: str, seed: int = 0, b: int = 3, s: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, pad) of b sources of mixed lengths, each ending in EOS, right-padded; pad is True at padding."""
    pad_id, eos, _ = ids_of(name)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB - 1, (b, s), generator=g)
    ids[ids == pad_id] = 5
    lengths = torch.tensor([s, 3, s - 2][:b])
    pad = torch.arange(s)[None, :] >= lengths[:, None]
    ids[pad] = pad_id
    ids[torch.arange(b), lengths - 1] = eos
    return ids, pad


def targets(name: str, seed: int = 1, b: int = 3, t: int = 6) -> torch.Tensor:
    """Decoder inputs starting with the family's decoder start token."""
    pad_id, _, start = ids_of(name)
    g = torch.Generator().manual_seed(seed)
    tgt = torch.randint(3, VOCAB - 1, (b, t), generator=g)
    tgt[tgt == pad_id] = 5
    tgt[:, 0] = start
    return tgt
