"""Export refuses every model that differs from its family in a field the family fixes, naming the field, and
round-trips exactly where the family has the field: for each family, a model one field away from the family's
tiny model, field by field (the near-miss test)."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.interop.catalog import FAMILIES, model_config
from seqlab.interop.hf_export import NOT_COMPARED, hf_model, mismatches
from seqlab.model import ModelConfig, Seq2SeqTransformer
from tests import hf_families

pytest.importorskip("transformers")
# each field's candidate values, tried in turn: the first that differs from the family's and builds is used
ALTERNATIVES: dict[str, tuple] = {
    "src_vocab_size": (48,), "tgt_vocab_size": (60, 48), "d_model": (24,), "n_heads": (2,), "encoder_layers": (1,),
    "decoder_layers": (3,), "d_ff": (48,), "activation": ("gelu", "relu", "silu", "gelu_tanh"),
    "gated_ffn": (True, False), "norm": ("rmsnorm", "layernorm"), "bias": (False, True),
    "scale_attention": (False, True), "d_head": (8, None), "max_positions": (96,), "position_offset": (1, 3),
    "sinusoid_layout": ("fairseq", "marian"), "norm_position": ("pre", "post"),
    "positions": ("rope", "alibi", "learned", "sinusoidal", "t5", "none"), "rope_base": (500.0,), "rope_dim": (2,),
    "t5_buckets": (16,), "t5_max_distance": (40,), "tie_embeddings": ("none", "decoder", "inputs", "all"),
    "scale_embedding": (False, True), "layernorm_embedding": (True, False), "final_norm": (False, True),
    "output_bias": (True, False), "rescale_output": (True, False), "copy_attention": (True,),
    "layer_norm_eps": (1e-3,), "pad_id": (4,), "bos_id": (5,), "eos_id": (6,), "extra_eos_ids": ((7,),),
    "kv_heads": (2, 1), "sliding_window": (4,), "sliding_layers": ((0,),),
    "sandwich_norm": (True, False), "attention_scalar": (12.0,), "attn_softcap": (5.0,), "logit_softcap": (5.0,),
    "qk_norm": (True, False), "local_rope_base": (30.0,),
    "qkv_bias": (True, False), "architecture": ("decoder_only",), "start": ("prompt",),
}
# a field whose change alone breaks another the family ties to it: the refusal names that one
COUPLED = {("m2m_100", "pad_id"): "position_offset",  # fairseq's positions start at pad_id + 1
           ("marian", "tie_embeddings"): "tgt_vocab_size"}  # Marian unshares embeddings with its vocabularies
TINY = {"marian": "marian", "bart": "bart", "mbart": "mbart", "pegasus": "pegasus", "m2m_100": "m2m_100",
        "t5": "t5_v1.0", "t5 v1.1": "t5_v1.1"}


def family_config(tiny: str) -> ModelConfig:
    _, config_cls, values = hf_families.FAMILIES[tiny]
    return model_config(config_cls(**values).to_dict())


def near_miss(base: ModelConfig, field: str) -> ModelConfig | None:
    for value in ALTERNATIVES[field]:
        if value == getattr(base, field):
            continue
        try:
            return replace(base, **{field: value})
        except ConfigError:
            continue
    return None


def test_every_field_has_alternatives():
    assert set(ALTERNATIVES) | set(NOT_COMPARED) == {f.name for f in fields(ModelConfig)}


def exact(cfg: ModelConfig, family: str) -> float:
    """The largest logit difference between seqlab's model and the transformers model its export loads as."""
    torch.manual_seed(0)
    model = Seq2SeqTransformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    hf = hf_model(model, family)
    src = torch.randint(7, cfg.src_vocab_size, (2, 5))
    tgt = torch.cat([torch.full((2, 1), cfg.bos_id), torch.randint(7, cfg.target_vocab_size, (2, 4))], dim=1)
    pad = torch.zeros_like(src, dtype=torch.bool)
    with torch.no_grad():
        ours = model(src, pad, tgt)
        theirs = hf(input_ids=src, attention_mask=(~pad).long(), decoder_input_ids=tgt).logits
    return (ours.float() - theirs.float()).abs().max().item()


@pytest.mark.parametrize("field", sorted(ALTERNATIVES))
@pytest.mark.parametrize("name", sorted(TINY))
def test_a_model_one_field_off_its_family_is_refused_or_exact(name, field):
    base = family_config(TINY[name])
    family = name.split()[0]
    assert mismatches(base, FAMILIES[family]) == [], "the family's own model exports to it"
    cfg = near_miss(base, field)
    if cfg is None:
        pytest.skip(f"no other valid {field} beside {name}'s")
    problems = mismatches(cfg, FAMILIES[family])
    if problems:
        named = COUPLED.get((family, field), field)
        assert any(p.startswith(f"model.{named}=") for p in problems), problems
        return
    assert exact(cfg, family) < 1e-4, f"{name} with model.{field}={getattr(cfg, field)!r} exports inexactly"


@pytest.mark.parametrize(("tiny", "change", "named"), [
    ("t5_v1.0", {"layernorm_embedding": True}, "layernorm_embedding"),  # the norm would be dropped
    ("t5_v1.0", {"output_bias": True}, "output_bias"),  # the bias would be dropped
    ("t5_v1.1", {"activation": "gelu"}, "activation"),  # gated-gelu is HF's tanh GELU
    ("pegasus", {"layernorm_embedding": True}, "layernorm_embedding"),  # unexpected keys, a warning in HF
    ("bart", {"layer_norm_eps": 1e-3}, "layer_norm_eps"),  # BART's config has no epsilon
    ("bart", {"tie_embeddings": "none", "tgt_vocab_size": None}, "tie_embeddings"),
])
def test_variants_no_family_has_are_refused_on_export(tmp_path, tiny, change, named):
    from seqlab.interop.families import InteropError
    from seqlab.interop.hf_export import write_family

    cfg = replace(family_config(tiny), **change)
    with pytest.raises(InteropError, match=f"model.{named}="):
        write_family(Seq2SeqTransformer(cfg), tmp_path / "out", tiny.split("_v")[0])
    assert not (tmp_path / "out").exists()
