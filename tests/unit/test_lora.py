"""Low-rank adapters (train.lora) through peft: only the adapters train, and the merged model a checkpoint is
read back as (model.adapters) computes what the adapted one does."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig, generate
from seqlab.model import ModelConfig, build_model
from seqlab.model.adapters import has_adapters, merge_adapters
from seqlab.train.config import LoraConfig, TrainConfig

pytest.importorskip("peft")
from seqlab.train.lora import add_adapters, base_names, target_modules  # noqa: E402

SHAPES = {"encoder_decoder": dict(encoder_layers=1, decoder_layers=2),
          "decoder_only": dict(architecture="decoder_only", encoder_layers=0, decoder_layers=2, positions="rope",
                               gated_ffn=True, activation="silu", norm="rmsnorm")}


def model(shape: str):
    torch.manual_seed(0)
    return build_model(ModelConfig(src_vocab_size=50, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_positions=64,
                                   **SHAPES[shape]))


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("targets", ["attention", "ffn", "all"])
def test_only_the_adapters_train_and_the_merged_model_decodes_as_the_adapted_one(shape, targets):
    adapted = model(shape)
    plain_state = {k: v.clone() for k, v in adapted.state_dict().items()}
    trainable, total = add_adapters(adapted, LoraConfig(r=4, alpha=8.0, targets=targets))
    assert trainable == sum(p.numel() for n, p in adapted.named_parameters() if ".lora_" in n) and trainable < total
    assert all(p.requires_grad == (".lora_" in n) for n, p in adapted.named_parameters())
    names = target_modules(build_model(adapted.cfg), targets)
    assert names and all(n.rsplit(".", 1)[-1] in ("fc1", "fc2") for n in names) == (targets == "ffn")
    missing, unexpected = adapted.load_state_dict(base_names(adapted, plain_state), strict=False)
    assert not unexpected and all(".lora_" in k for k in missing)  # the frozen weights are the model's own
    with torch.no_grad():  # B starts at zero (the adapted model is the plain one): give it something to add
        for n, p in adapted.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    adapted.eval()
    state = adapted.state_dict()
    assert has_adapters(state)
    merged = build_model(adapted.cfg).eval()
    merged.load_state_dict(merge_adapters(state, {"r": 4, "alpha": 8.0}))  # every plain name, nothing else
    src = torch.randint(4, 50, (3, 6))
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[0, 4:] = True
    tgt_in = torch.randint(4, 50, (3, 5))
    with torch.no_grad():
        assert (adapted(src, pad, tgt_in) - merged(src, pad, tgt_in)).abs().max() < 1e-4
        assert (adapted(src, pad, tgt_in) - build_model(adapted.cfg).eval()(src, pad, tgt_in)).abs().max() > 1e-2
    for cfg in (DecodingConfig(max_length=8), DecodingConfig(method="beam", num_beams=3, max_length=8)):
        a, b = generate(adapted, src, pad, cfg), generate(merged, src, pad, cfg)
        assert torch.equal(a.sequences, b.sequences)


def test_lora_values_and_combinations_are_refused_by_name(monkeypatch):
    for values, message in ((dict(r=-1), "train.lora.r=-1"), (dict(alpha=0), "train.lora.alpha=0"),
                            (dict(dropout=1.0), "train.lora.dropout=1.0"), (dict(targets="qkv"), "train.lora.targets")):
        with pytest.raises(ConfigError, match=message):
            LoraConfig(**values)
    with pytest.raises(ConfigError, match="unknown key.*train.lora.rank"):
        TrainConfig(lora={"rank": 8})
    with pytest.raises(ConfigError, match="train.bf16_weights=True"):
        TrainConfig(lora={"r": 8}, bf16_weights=True)
    assert not TrainConfig().lora.enabled
