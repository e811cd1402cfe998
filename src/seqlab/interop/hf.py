"""Hugging Face models <-> Model: the encoder-decoder families (interop.families) and the causal LMs
(interop.causal_families, interop.gemma_families), one catalog (interop.catalog).

`from_state` builds the seqlab model of any family the catalog knows from a config.json and a state dict,
fusing q/k/v (a causal LM's model continues its prompt: model.start=prompt); `from_hf` does it from a loaded
transformers model; `to_hf` is the inverse, the model's family as transformers computes it
(interop.hf_export).
`transformers` is imported only here, and only when called.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from seqlab.interop.catalog import FAMILIES, family_of, model_config
from seqlab.interop.families import Family, InteropError, bare, seqlab_state, stored_name, untie_where_saved
from seqlab.model import Model, ModelConfig, build_model

__all__ = ["InteropError", "from_hf", "from_state", "to_hf"]


def from_state(config: dict[str, Any], state: dict[str, Tensor], where: str = "the model") -> Model:
    """The seqlab model (eval mode; an encoder-decoder or a causal LM, as the family is) computing what a Hugging
    Face model of this config.json and state dict computes."""
    family = family_of(config, where)
    cfg = untie_where_saved(model_config(config, where), state, family)
    if cfg.layout.one_sequence:
        check_all_used(cfg, family, state, where)
    model = build_model(cfg)
    ours = seqlab_state(cfg, family, state, where)
    if cfg.positions == "sinusoidal":
        check_sinusoids(model, state, where)
    check_shapes(model, ours, family.name, where)
    missing, unexpected = model.load_state_dict(ours, strict=False)
    tied = {"tgt_embed.tokens.weight", "output.weight"}
    if unexpected or set(missing) - tied:
        raise InteropError(f"{where}: weights did not map: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval()


# tensors a causal LM's folder may hold that are not weights: rotary tables, GPT-2's causal-mask buffers, a head
# saved beside the table it is tied to
NOT_WEIGHTS = (".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias", "lm_head.weight")


def check_all_used(cfg: ModelConfig, family: Family, state: dict[str, Tensor], where: str) -> None:
    """Every weight of the folder is one the config reads (a config of fewer layers than its weights, or
    tensors of another model, would otherwise be dropped without a word); refused naming them."""
    used = {bare(p) for _, parts in family.weights(cfg) for part in parts for p in part.split("|")}
    unused = sorted(k for k in state if k not in used and not k.endswith(NOT_WEIGHTS))
    if unused:
        raise InteropError(f"{where}: {len(unused)} weights are not read by the model config.json describes "
                           f"({', '.join(unused[:4])}{', ...' if len(unused) > 4 else ''}); the config and weights "
                           "belong to different models (num_hidden_layers?)")


def check_shapes(model: Model, ours: dict[str, Tensor], family: str, where: str) -> None:
    """Every weight the shape config.json says it has (else the folder mixes a config and weights of two
    models), named by the family's own parameter names."""
    names = {n: "+".join(stored_name(p) for p in parts) for n, parts in FAMILIES[family].weights(model.cfg)}
    expected = {k: v.shape for k, v in model.state_dict().items()}
    wrong = [f"{names.get(k, k)}: {tuple(v.shape)} where config.json gives {tuple(expected[k])}"
             for k, v in ours.items() if k in expected and v.shape != expected[k]]
    if wrong:
        raise InteropError(f"{where}: {len(wrong)} weights do not have the shapes config.json describes, "
                           f"e.g. {'; '.join(wrong[:3])}; the weights and config.json belong to different models")


def check_sinusoids(model: Model, state: dict[str, Tensor], where: str) -> None:
    """A saved sinusoid table (Marian and PEGASUS keep theirs in the weights) must be the one seqlab computes:
    seqlab keeps positions fixed and cannot load trained ones."""
    ours = model.src_embed.positions.table
    for side in ("encoder", "decoder"):
        table = state.get(f"model.{side}.embed_positions.weight")
        if table is not None and not (table.shape[0] <= ours.shape[0]
                                      and torch.allclose(table.float(), ours[: table.shape[0]], atol=1e-4)):
            raise InteropError(f"{where}: the {side}'s position table is not the sinusoid its family defines; "
                               "seqlab keeps positions fixed and cannot load trained ones")


def from_hf(hf_model: Any) -> Model:
    """A Seq2SeqTransformer that computes the same logits as a transformers encoder-decoder (eval mode)."""
    return from_state(hf_model.config.to_dict(), hf_model.state_dict(), type(hf_model).__name__)


def to_hf(model: Model, family: str | None = None) -> Any:
    """The transformers model that computes the same logits as `model`: its Hugging Face family's (the one
    `seqlab export` writes; `family` is tried first), refused by name where no family computes it."""
    from seqlab.interop.hf_export import hf_model

    return hf_model(model, family)
