"""A Seq2SeqTransformer in a family's shape as that family's transformers model: the inverse of
interop.hf.from_state, through the same declarations (interop.families: each family's config mapping both
ways and its weight table). An imported model goes back to its own family; a model trained from scratch with
a family's choices (BART's post-LN with an embedding LayerNorm and learned positions offset by 2, T5's
RMSNorm without biases, ...) exports to that family. Export is checked against import: the config.json and
weight names a family would write are read back by the importer's own code, and a model exports only if
that gives its own ModelConfig back, so a field no family expresses is refused by name, never dropped.
`transformers` is imported only when called.
"""

from __future__ import annotations

import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from seqlab.interop.catalog import FAMILIES, model_config
from seqlab.interop.families import Family, InteropError, stored_name, to_family, untie_where_saved
from seqlab.io import atomic_write
from seqlab.model import Model, ModelConfig

# Marian last among the encoder-decoders: seqlab's own models; then the decoder-only families
EXPORT_ORDER = ("bart", "mbart", "pegasus", "m2m_100", "t5", "marian", "gpt2", "qwen2", "llama", "phi3", "gemma2",
                "gemma3_text")
# How a model trains or which kernels compute it, not what it computes: not part of the comparison.
NOT_COMPARED = ("dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop",
                "position_init", "attention_kernel", "dropout_kernel")
# Fields whose None means a value the variant implies: compared as that value.
RESOLVED = {"final_norm": "use_final_norm", "d_head": "head_dim", "rope_base": "rotary_base",
            "rope_dim": "rotary_dim", "t5_buckets": "relative_buckets", "t5_max_distance": "relative_max_distance"}
# Fields that mean something only under some variants (else left out of the comparison).
ONLY_WITH = {"sinusoid_layout": lambda c: c.positions == "sinusoidal",
             "max_positions": lambda c: c.absolute_positions,  # else a length limit, not a table
             "position_offset": lambda c: c.absolute_positions,
             "rope_base": lambda c: c.positions == "rope", "rope_dim": lambda c: c.positions == "rope",
             "t5_buckets": lambda c: c.positions == "t5", "t5_max_distance": lambda c: c.positions == "t5"}


def computed(cfg: ModelConfig) -> dict[str, Any]:
    """What `cfg` computes, field by field (the comparison's terms)."""
    return {f.name: getattr(cfg, RESOLVED.get(f.name, f.name)) for f in fields(cfg)
            if f.name not in NOT_COMPARED and ONLY_WITH.get(f.name, lambda c: True)(cfg)}


def imported_back(cfg: ModelConfig, family: Family) -> ModelConfig:
    """The ModelConfig that importing `cfg`'s export to `family` gives: config.json through the importer's
    mapping, tying through the weights it would find (one marker tensor per seqlab parameter, so a head saved
    apart from its table reads as untied, as transformers reads it)."""
    state = {stored_name(part): torch.tensor([float(i)]) for i, (_, parts) in enumerate(family.weights(cfg))
             for part in parts}
    back = model_config({"model_type": family.name, **family.export(cfg)}, f"the {family.name} export")
    return untie_where_saved(back, state, family)


def mismatches(cfg: ModelConfig, family: Family) -> list[str]:
    """What in `cfg` the family cannot express, each named by its key (`model.X=ours (the family has Y)`);
    empty: the family computes exactly what `cfg` computes."""
    try:
        back = imported_back(cfg, family)
    except InteropError as err:
        return [str(err)]
    ours, theirs = computed(cfg), computed(back)
    if not ours["output_bias"] and family.choices.get("output_bias"):  # the family's bias, written as zeros
        theirs["output_bias"] = False
    return [f"model.{key}={ours[key]!r} ({family.name} has {theirs.get(key)!r})" for key in ours
            if ours[key] != theirs.get(key)]


def matches(cfg: ModelConfig, family: Family) -> bool:
    """Whether `cfg` is a variant the family's config can express."""
    return not mismatches(cfg, family)


def family_for(cfg: ModelConfig, hint: str | None = None) -> Family:
    """The family to export to: the one the model was imported from (`hint`) if it still fits, else the first
    that computes it; refuses, naming what the nearest family lacks."""
    if cfg.layout.hf_class is None:
        raise InteropError(f"no Hugging Face family computes it: {cfg.layout.unexportable}; keep it in seqlab")
    names = ([hint] if hint in FAMILIES else []) + list(EXPORT_ORDER)
    alike = [n for n in dict.fromkeys(names)
             if FAMILIES[n].choices.get("architecture", "encoder_decoder") == cfg.architecture]
    if not alike:
        raise InteropError(f"no Hugging Face family is a model.architecture={cfg.architecture}; export it with "
                           "--format ctranslate2 or keep it in seqlab")
    found = {name: mismatches(cfg, FAMILIES[name]) for name in alike}
    for name, problems in found.items():
        if not problems:
            return FAMILIES[name]
    nearest = min(found, key=lambda n: len(found[n]))
    raise InteropError(f"no Hugging Face family computes this variant; the nearest, {nearest}, differs in "
                       f"{'; '.join(found[nearest])}. Export it with --format ctranslate2 or keep it in seqlab")


def hf_config(cfg: ModelConfig, family: Family) -> dict[str, Any]:
    """config.json's values for `cfg` in `family`, refused by name where the family cannot express it."""
    problems = mismatches(cfg, family)
    if problems:
        raise InteropError(f"{family.name} cannot express this variant: " + "; ".join(problems))
    return family.export(cfg)


def hf_state(model: Model, family: Family) -> dict[str, torch.Tensor]:
    """The family's state dict: every fused seqlab tensor split back into the family's parameters."""
    ours, state = model.state_dict(), {}
    for name, parts in family.weights(model.cfg):
        names = [p.split("|")[0] for p in parts]  # a tied table under its first (shared) name
        sizes = part_sizes(model.cfg, name, ours[name].shape[0], len(names))
        for part, chunk in zip(names, ours[name].split(sizes, dim=0), strict=True):
            state[stored_name(part)] = to_family(part, chunk).clone()
    if "final_logits_bias" in state:
        state["final_logits_bias"] = state["final_logits_bias"].reshape(1, -1)
    elif family.choices.get("output_bias"):  # a family with an output bias, a model without one: zeros
        state["final_logits_bias"] = torch.zeros(1, model.cfg.target_vocab_size)
    return state


def part_sizes(cfg: ModelConfig, name: str, rows: int, parts: int) -> list[int]:
    """How a fused seqlab tensor of `rows` rows splits into the family's parts: q, k, v of their own widths
    (grouped-query attention), else equal parts."""
    if parts == 3 and name.endswith(("qkv_proj.weight", "qkv_proj.bias")):
        return [cfg.attention_dim, cfg.kv_dim, cfg.kv_dim]
    return [rows // parts] * parts


def hf_model(model: Model, family: str | None = None) -> Any:
    """The transformers model (eval mode) of `model` in its family (`family`: the one to try first), loaded by
    `from_pretrained` from the folder `seqlab export` writes, so that it ties and unties as an export does."""
    import transformers

    with tempfile.TemporaryDirectory(prefix="seqlab-hf-") as tmp:
        write_family(model, Path(tmp), family)  # refuses a layout no family computes (hf_class None)
        return getattr(transformers, model.cfg.layout.hf_class).from_pretrained(tmp).eval()


def write_family(model: Model, out: Path, hint: str | None = None) -> Family:
    """config.json and model.safetensors of `model` as its family saves them (tied tables under their shared
    name, an untied head as lm_head), so that `from_pretrained` ties and unties exactly as for the family's own
    checkpoints. Returns the family."""
    from transformers import AutoConfig

    family = family_for(model.cfg, hint)
    config = AutoConfig.for_model(family.name, **hf_config(model.cfg, family))
    config.architectures = [family.architecture]
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    state = {k: v.contiguous() for k, v in hf_state(model, family).items()}
    atomic_write(out / "model.safetensors", lambda f: f.write(save(state)))
    return family


def save(state: dict[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save(state, metadata={"format": "pt"})
