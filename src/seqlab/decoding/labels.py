"""A run's one label: the decoding setting's own (`DecodingConfig.label`), then the target language asked for,
the precision when not fp32, the engine when not seqlab's and the ensemble's size and rule, in that order (e.g.
`beam5_lp1_ro_RO_int8_ct2`, `greedy_ens3_meanlp`). Every label a result folder, record, table or W&B run
carries is made here."""

from __future__ import annotations

ENGINE_SUFFIX = {"seqlab": "", "seqlab_onednn": "_onednn", "seqlab_graphs": "_graphs",
                 "seqlab_compiled": "_compiled", "ctranslate2": "_ct2"}


def run_label(decoding: str, precision: str = "fp32", engine: str = "seqlab", extra_members: int = 0,
              rule: str = "mean_prob", target: str | None = None) -> str:
    """The label of `decoding` (a setting's label) run this way. An unknown engine gets a label too: it fails
    later, by name, once its result folder exists to record the failure."""
    label = decoding + (f"_{target}" if target else "") + ("" if precision == "fp32" else f"_{precision}")
    label += ENGINE_SUFFIX.get(engine, f"_{engine}")
    if extra_members:  # an ensemble of 1 + extra_members models; OpenNMT-py's rule named
        label += f"_ens{extra_members + 1}" + ("_meanlp" if rule == "mean_logprob" else "")
    return label
