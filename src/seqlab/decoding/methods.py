"""Search methods, each one declaration: what `decoding.method=NAME` means to everything that reads it.

A method declares how its rows relate to a source (a source's beams, or rows of their own), whether it draws,
whether it has candidates for MBR, whether drafts can stand in for its steps, whether an ensemble or a step
trace can follow it, its checks, its part of a setting's label, the search it runs, and what Hugging Face's
`generation_config.json` and CTranslate2 make of it: a mapping, or a refusal that says why. The config, the
searches, the exports and the engines ask the declaration; none of them compares the method's name. A value
no declaration has is refused by DecodingConfig, and a declaration without a mapping is refused by the
export or engine that lacks one (`tests/unit/test_methods.py` declares a fixture method to show it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seqlab.config import ConfigError

# A DecodingConfig, and generate's Search (decoding.generate): this module is imported by both, so neither is
# imported here.
Settings = Any
SearchRun = Callable[[Any, Any, Any], Any]  # (the batch's Search, sample keys, step hook) -> GenerateOutput
Mapping = Callable[[Settings], dict[str, Any]]


@dataclass(frozen=True)
class SearchMethod:
    """One `decoding.method` value and everything seqlab does with it."""

    name: str
    label: Callable[[Settings], str]  # the method's own part of a setting's label (DecodingConfig.label)
    run: SearchRun  # the search over one batch
    beams: bool = False  # its rows are a source's num_beams beams, bound to it (n_best <= num_beams)
    samples: bool = False  # it draws: the sampling warpers apply, each row keyed by its source
    candidates: bool = True  # it can give MBR several hypotheses to choose among
    speculates: bool = False  # a draft's proposals can stand in for its steps, the outputs unchanged
    traced: bool = False  # a step hook (inference.inspection's traces) can follow it
    one_model: bool = False  # it reads one model's hidden states: no ensemble
    reads: tuple[str, ...] = ()  # sampling options it reads as its own (contrastive search's top_k)
    check: Callable[[Settings], None] = lambda cfg: None  # its own settings' checks (ConfigError)
    hf: Mapping | str = "Hugging Face's generate has no such method"  # GenerationConfig fields, or why not
    ctranslate2: Mapping | str = "CTranslate2 has no such method"  # translate_batch options, or why not


METHODS: dict[str, SearchMethod] = {}


def declare(method: SearchMethod) -> SearchMethod:
    """Add `method` to the declarations (a plugin's or a test's method the same way as seqlab's own)."""
    METHODS[method.name] = method
    return method


def method_of(cfg: Settings) -> SearchMethod:
    """The declaration of `cfg.method`; an undeclared value is refused with the declared ones."""
    found = METHODS.get(cfg.method)
    if found is None:
        raise ConfigError(f"decoding.method={cfg.method!r} is not valid (no search method of that name); use one of "
                          f"{', '.join(METHODS)}")
    return found


def mapping(cfg: Settings, consumer: str) -> dict[str, Any]:
    """The method's own fields for `consumer` (hf or ctranslate2); a method without one is refused by name."""
    rule = getattr(method_of(cfg), consumer)
    if isinstance(rule, str):
        raise ConfigError(f"decoding.method={cfg.method}: {rule}")
    return rule(cfg)


def refusal(cfg: Settings, consumer: str) -> str | None:
    """Why `consumer` (hf or ctranslate2) cannot take `cfg`'s method, or None (decoding.options' rule for
    `method`)."""
    rule = getattr(method_of(cfg), consumer)
    return f"decoding.method={cfg.method}: {rule}" if isinstance(rule, str) else None


def greedy_check(cfg: Settings) -> None:
    if cfg.num_beams != 1 or cfg.n_best != 1:
        raise ConfigError("decoding.method=greedy returns one hypothesis; use method=beam for num_beams/n_best > 1")


def beam_check(cfg: Settings) -> None:
    if cfg.n_best > cfg.num_beams:
        raise ConfigError(f"decoding.n_best={cfg.n_best} > num_beams={cfg.num_beams}: beam search keeps only "
                          f"num_beams hypotheses; use n_best <= {cfg.num_beams} or raise num_beams")


def sample_check(cfg: Settings) -> None:
    if cfg.num_beams != 1:
        raise ConfigError("decoding.method=sample does not use beams; set num_beams=1 (n_best = samples per source)")


def contrastive_check(cfg: Settings) -> None:
    own = "decoding"
    if cfg.penalty_alpha is None or not 0.0 <= cfg.penalty_alpha <= 1.0:
        raise ConfigError(f"{own}.penalty_alpha={cfg.penalty_alpha} must be in [0, 1] with method=contrastive "
                          "(0.6 in Su et al. 2022; 0 is greedy search)")
    if cfg.top_k is None or cfg.top_k < 1:
        raise ConfigError(f"{own}.top_k={cfg.top_k}: contrastive search ranks the top_k most probable tokens; "
                          "set top_k >= 1 (4-10 in Su et al. 2022)")
    if cfg.num_beams != 1 or cfg.n_best != 1:
        raise ConfigError(f"{own}.method=contrastive returns one hypothesis; use num_beams=1 and n_best=1")


def beam_label(cfg: Settings) -> str:
    groups = f"_g{cfg.num_beam_groups}_div{cfg.diversity_penalty:g}" if cfg.num_beam_groups > 1 else ""
    nbest = f"_n{cfg.n_best}" if cfg.n_best > 1 else ""  # an n-best list: its own row in tables
    rule = "wu" if cfg.length_rule == "wu" else ""
    coverage = f"_cov{cfg.coverage_penalty}{cfg.coverage_beta:g}" if cfg.coverage_penalty else ""
    return f"beam{cfg.num_beams}_lp{rule}{cfg.length_penalty:g}{coverage}{groups}{nbest}"


def beam_hf(cfg: Settings) -> dict[str, Any]:
    out: dict[str, Any] = dict(length_penalty=cfg.length_penalty, early_stopping=cfg.early_stopping)
    if cfg.num_beam_groups > 1:  # transformers >= 4.56 runs it from its hub repository group-beam-search
        out.update(num_beam_groups=cfg.num_beam_groups, diversity_penalty=cfg.diversity_penalty)
    return out


def sample_label(cfg: Settings) -> str:
    """sample, then each sampling-only option set (DecodingConfig.sampling_options) by its value."""
    parts = [f"{k}{getattr(cfg, k):g}" for k in cfg.sampling_options if getattr(cfg, k) is not None]
    return "sample" + ("_" + "_".join(parts) if parts else "")


def sample_hf(cfg: Settings) -> dict[str, Any]:
    return dict(temperature=cfg.temperature or 1.0, top_k=cfg.top_k or 0, top_p=cfg.top_p or 1.0, min_p=cfg.min_p,
                typical_p=cfg.typical_p or 1.0, epsilon_cutoff=cfg.epsilon or 0.0, eta_cutoff=cfg.eta or 0.0)


GREEDY = declare(SearchMethod(
    "greedy", label=lambda cfg: "greedy", run=lambda search, keys, hook: search.rows(keys, hook),
    candidates=False, speculates=True, traced=True, check=greedy_check, hf=lambda cfg: {},
    ctranslate2=lambda cfg: dict(beam_size=1)))
BEAM = declare(SearchMethod(
    "beam", label=beam_label, run=lambda search, keys, hook: search.beams(hook), beams=True, traced=True,
    check=beam_check, hf=beam_hf, ctranslate2=lambda cfg: dict(beam_size=cfg.num_beams)))
SAMPLE = declare(SearchMethod(
    "sample", label=sample_label, run=lambda search, keys, hook: search.rows(keys, hook), samples=True,
    speculates=True, traced=True, check=sample_check, hf=sample_hf,
    ctranslate2="CTranslate2's sampling is not seeded per source (so not batch-invariant); use "
                "decoding.method=greedy or beam"))
CONTRASTIVE = declare(SearchMethod(
    "contrastive", label=lambda cfg: f"contrastive_a{cfg.penalty_alpha:g}_k{cfg.top_k}",
    run=lambda search, keys, hook: search.contrastive(), candidates=False, one_model=True, reads=("top_k",),
    check=contrastive_check,
    # transformers >= 4.56 runs it from its hub repository contrastive-search
    hf=lambda cfg: dict(penalty_alpha=cfg.penalty_alpha, top_k=cfg.top_k),
    ctranslate2="CTranslate2 has no contrastive search; use decoding.method=greedy or beam"))
