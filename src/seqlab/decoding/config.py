"""DecodingConfig: one typed, validated description of a decoding method."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import Any, Literal, get_args

from seqlab.config import ConfigError, check_choice
from seqlab.constants import DEFAULT_IDS, ForceEOS
from seqlab.decoding.constraints import ConstraintOrder
from seqlab.decoding.coverage import CoverageRule
from seqlab.decoding.mbr import MBRConfig
from seqlab.decoding.methods import method_of
from seqlab.decoding.options import (
    HF_SEED,
    MAPPED,
    NAME,
    NO_SEED,
    RENORMALIZED,
    SPECULATIVE,
    Refused,
    ct2_bad_words,
    ct2_ban,
    ct2_length_penalty,
    ct2_no_repeat,
    ct2_stop,
    hf_force_eos,
    hf_per_source_limit,
    labelled,
    method_rule,
    option,
    sampling_only,
)
from seqlab.decoding.processors import (
    EpsilonCutoff,
    EtaCutoff,
    ForcedFirstToken,
    MinNewTokens,
    MinP,
    NoRepeatNGram,
    RepetitionPenalty,
    SequenceBias,
    TopK,
    TopNSigma,
    TopP,
    Typical,
)
from seqlab.decoding.registry import (
    Builds,
    bad_words,
    build_processors,
    each,
    penalties,
    renormalized,
    suppression,
    temperature_rule,
    warper,
    with_eos,
)
from seqlab.decoding.search import LengthRule

EarlyStopping = Literal[True, False, "never"]
DraftSchedule = Literal["fixed", "adaptive"]
DraftPositions = Literal["paying", "all"]
DRAFT_CHECKPOINT = "ckpt:"  # decoding.draft=ckpt:PATH: a draft model


@dataclass(frozen=True)
class DecodingConfig:
    """How to turn a model's next-token distribution into sequences.

    Lengths count generated tokens (EOS included, BOS not). The maximum is
    `max_length` if set, else fairseq's `floor(max_len_a * src_len + max_len_b)`
    with each example's own source length (so one example's limit never depends
    on its neighbours), and always at most `max_positions - 1`.

    Beam search follows Hugging Face `generate` exactly: each step keeps the top
    2 * num_beams continuations; a continuation ending in EOS among the top
    num_beams becomes a finished hypothesis scored `sum log p / len ** length_penalty`
    (len counts generated tokens including EOS, as in fairseq); the other best
    num_beams continue. `early_stopping=True` stops an example once num_beams
    hypotheses are finished (= fairseq's stop rule); `False` stops when the best
    running beam, scored at its current length, cannot beat the worst finished
    one; `"never"` scores it at the maximum length when length_penalty > 0.

    `force_eos`: at a hypothesis's last allowed step only EOS may be chosen. Two rules:
    `hf` (or `true`) scores the forced EOS 0, as Hugging Face's ForcedEOSTokenLogitsProcessor
    (which Marian and BART configs switch on through `forced_eos_token_id`); `fairseq` masks the
    other tokens and keeps EOS's own log-prob, as fairseq's SequenceGenerator does at max_len, so
    a hypothesis whose EOS is impossible there cannot end (beam search drops it). `false`: off.

    Token constraints as Hugging Face names them: `bad_words_ids` (sequences never completed),
    `sequence_bias` (a bias on completing a sequence),
    `suppress_tokens` (ids never emitted), `forced_bos_token_id` (the first generated token, scored 0:
    BART's `<s>`, a target language code), `renormalize_logits` (log-softmax after the processors).
    `suppress_special` is seqlab's own rule for its models: pad and the decoder start token are never
    emitted; Hugging Face bans nothing unless its config says so, and an imported model's generation
    defaults turn the rule off.

    GNMT's scoring, as OpenNMT-py names it (`-length_penalty wu -alpha A -coverage_penalty wu -beta B`):
    `length_rule=wu` divides a finished hypothesis's score by ((5 + |Y|) / 6) ** length_penalty instead of
    |Y| ** length_penalty, and `coverage_penalty` (wu | summary) subtracts coverage_beta times a penalty on
    the summed cross-attention (decoding.coverage) from it; both change only finished scores.

    `method=contrastive`: Hugging Face's contrastive search (decoding.contrastive) over the `top_k` most
    probable tokens with `penalty_alpha`.

    `constraints` (ordered | unordered): lexically constrained beam search, fairseq's `--constraints`
    (decoding.constrained): every hypothesis contains its source's constraint token sequences, given per source
    (translate's columns after the source; in an evaluation, `constraint_words` words of each reference, as
    Post & Vilar 2018 do). It follows fairseq's SequenceGenerator throughout: EOS at the limit keeps its score,
    an example stops at num_beams finished hypotheses (early_stopping=true).

    `None` turns a processor off. Sampling draws from the processed
    distribution with randomness keyed on (seed, source tokens, sample index,
    step), so a source's samples do not depend on the batch around it.
    """

    # Each field with its declaration (decoding.options.Option): what CTranslate2 (ct2) and Hugging Face's
    # generation_config.json (hf) do with it, its label, whether archived digests carry it at its default,
    # and the logits processor it builds at its place in Hugging Face's order (decoding.registry).
    # a declared search method (decoding.methods: greedy, beam, sample, contrastive)
    method: str = option("greedy", ctranslate2=method_rule("ctranslate2"), hf=method_rule("hf"))
    num_beams: int = option(1, ctranslate2=MAPPED, hf=MAPPED)
    n_best: int = option(1, ctranslate2=MAPPED, hf=MAPPED)  # beam: hypotheses returned; sample: samples per source
    length_penalty: float = option(1.0, ctranslate2=ct2_length_penalty, hf=MAPPED)
    # diverse beam search (HF's num_beam_groups): K beams in this many groups
    num_beam_groups: int = option(1, hf=MAPPED)
    diversity_penalty: float = option(0.0, hf=MAPPED)  # subtracted per earlier-group beam that chose the token
    early_stopping: EarlyStopping = option(True, ctranslate2=ct2_stop, hf=MAPPED)
    # labels name the penalties and constraints in field order
    min_length: int = option(0, ctranslate2=ct2_ban("min_length"), hf=MAPPED, label="min",
                             processor=with_eos(MinNewTokens, 80))
    max_length: int | None = option(None, ctranslate2=MAPPED, hf=MAPPED)
    max_len_a: float = option(1.2, ctranslate2=MAPPED, hf=hf_per_source_limit("max_len_a"))
    max_len_b: int = option(10, ctranslate2=MAPPED, hf=hf_per_source_limit("max_len_b"))
    no_repeat_ngram_size: int | None = option(None, ctranslate2=ct2_no_repeat, hf=MAPPED, label="norepeat",
                                              processor=each(NoRepeatNGram, 40))
    repetition_penalty: float | None = option(None, hf=MAPPED, label="rep", processor=each(RepetitionPenalty, 20))
    # OpenAI/llama.cpp: - frequency * count of the token so far; - presence * [token generated before]
    frequency_penalty: float | None = option(None, label="freq", processor=Builds(30, penalties))
    presence_penalty: float | None = option(None, label="pres")  # built with frequency_penalty
    temperature: float | None = option(None, hf=MAPPED, sampling_only=True, processor=Builds(100, temperature_rule))
    top_k: int | None = option(None, hf=MAPPED, sampling_only=True, processor=warper(TopK, 110))
    top_p: float | None = option(None, hf=MAPPED, sampling_only=True, processor=warper(TopP, 120))
    min_p: float | None = option(None, hf=MAPPED, sampling_only=True, processor=warper(MinP, 130))
    typical_p: float | None = option(None, hf=MAPPED, sampling_only=True, processor=warper(Typical, 140))
    epsilon: float | None = option(None, hf=MAPPED, sampling_only=True, processor=warper(EpsilonCutoff, 150))
    eta: float | None = option(None, hf=MAPPED, sampling_only=True, processor=warper(EtaCutoff, 160))
    top_n_sigma: float | None = option(None, sampling_only=True, processor=warper(TopNSigma, 170))
    # llama.cpp dynatemp: temperature in [t - range, t + range] by entropy (built by temperature's rule)
    dynatemp_range: float | None = option(None, sampling_only=True)
    dynatemp_exponent: float = option(1.0)
    # EDT (Zhang et al. 2024): T = t * edt_base ** (edt_theta / entropy) (built by temperature's rule)
    edt_theta: float | None = option(None, sampling_only=True)
    edt_base: float = option(0.8)
    # contrastive: weight of the degeneration penalty, in [0, 1] (HF's name)
    penalty_alpha: float | None = option(None, hf=MAPPED, in_digest=False)
    # last allowed step: EOS only; hf (= true) | fairseq rule | false (off)
    force_eos: bool | ForceEOS = option(False, hf=hf_force_eos)
    bad_words_ids: list[list[int]] | None = option(None, ctranslate2=ct2_bad_words, hf=MAPPED, in_digest=False,
                                                   label="ban", processor=Builds(50, bad_words))
    sequence_bias: list[list] | None = option(None, hf=MAPPED, in_digest=False, label="bias",  # [[ids], bias] pairs
                                              processor=each(SequenceBias, 10))
    suppress_tokens: list[int] | None = option(None, ctranslate2=ct2_ban("suppress_tokens"), hf=MAPPED,
                                               in_digest=False, label="supp")  # built with suppress_special
    forced_bos_token_id: int | None = option(None, hf=MAPPED, in_digest=False,
                                             processor=each(ForcedFirstToken, 60))
    suppress_special: bool = option(True, ctranslate2=ct2_ban("suppress_special"), hf=MAPPED, in_digest=False,
                                    processor=Builds(70, suppression))
    renormalize_logits: bool = option(False, ctranslate2=RENORMALIZED, hf=MAPPED, in_digest=False,
                                      processor=Builds(200, renormalized))
    # evaluation: force the first N tokens of each reference (fairseq's --prefix-size)
    prefix_size: int = option(0, in_digest=False, ctranslate2=Refused(
        "CTranslate2 scores a forced target prefix its own way (outside its length normalization)"), hf=Refused(
        "decoding.prefix_size forces each reference's first tokens in an evaluation; a generation config has no "
        "references"))
    # beam: power (len ** length_penalty; HF, fairseq) | wu (GNMT, OpenNMT-py)
    length_rule: LengthRule = option("power", in_digest=False, hf=Refused("generate has no GNMT length penalty"))
    # beam: wu | summary (OpenNMT-py), times coverage_beta
    coverage_penalty: CoverageRule | None = option(None, in_digest=False,
                                                   hf=Refused("generate has no GNMT coverage penalty"))
    coverage_beta: float = option(0.0, in_digest=False)
    # beam: lexical constraints, fairseq's --constraints ordered|unordered
    constraints: ConstraintOrder | None = option(None, in_digest=False, hf=Refused(
        "seqlab's constraints are fairseq's per-source lexical constraints, which a generation config cannot hold"))
    constraint_words: int = option(0, in_digest=False)  # evaluation: constrain each output to N words of its reference
    seed: int = option(0, ctranslate2=NO_SEED, hf=HF_SEED)
    name: str | None = option(None, ctranslate2=NAME, hf=NAME)  # a label for reports, e.g. "beam5_lp0.6"
    # minimum Bayes risk over this setting's candidates (decoding/mbr.py)
    mbr: MBRConfig | None = option(None, hf=Refused("generate has no minimum Bayes risk"))
    # speculative decoding (decoding/speculative.py): the same tokens as without it, in fewer decoder calls
    draft: str | None = option(None, ctranslate2=SPECULATIVE, hf=SPECULATIVE, in_digest=False)  # lookup | ckpt:PATH
    draft_tokens: int = option(5, ctranslate2=SPECULATIVE, hf=SPECULATIVE, in_digest=False)  # proposals a call (k)
    # fixed | adaptive (per row: +2 after all kept, else -1)
    draft_schedule: DraftSchedule = option("fixed", ctranslate2=SPECULATIVE, hf=SPECULATIVE, in_digest=False)
    # prompt lookup: the longest n-gram matched (Hugging Face's max_matching_ngram_size)
    lookup_ngram: int = option(2, ctranslate2=SPECULATIVE, hf=SPECULATIVE, in_digest=False)
    # paying: a call verifies the proposals whose chance of being kept outweighs a position's cost, both measured
    # as the batch decodes (decoding.speculative.Pacing); all: every proposal
    draft_positions: DraftPositions = option("paying", ctranslate2=SPECULATIVE, hf=SPECULATIVE, in_digest=False)

    def __post_init__(self) -> None:
        own = "decoding"
        if self.force_eos is True:  # the rule `true` always meant: Hugging Face's
            object.__setattr__(self, "force_eos", "hf")
        if self.force_eos not in (False, *get_args(ForceEOS)):
            raise ConfigError(f"{own}.force_eos={self.force_eos!r} is not valid; use false, hf (Hugging Face: "
                              "forced EOS scored 0; true means hf) or fairseq (EOS keeps its log-prob)")
        for key in ("bad_words_ids", "suppress_tokens", "sequence_bias"):  # from YAML or JSON: plain lists
            value = getattr(self, key)
            if value is not None and not isinstance(value, list):
                object.__setattr__(self, key, [list(v) if not isinstance(v, int) else v for v in value])
        if isinstance(self.mbr, Mapping):  # from YAML, the command line or a checkpoint's dict
            object.__setattr__(self, "mbr", MBRConfig.from_dict(dict(self.mbr)))
        if self.mbr is not None and not isinstance(self.mbr, MBRConfig):
            raise ConfigError(f"{own}.mbr={self.mbr!r} must be a mapping such as {{utility: chrf, candidates: 32}} "
                              "or null")
        method = method_of(self)
        if self.early_stopping not in (True, False, "never"):
            raise ConfigError(f"{own}.early_stopping={self.early_stopping!r}; use true, false or never")
        if self.num_beams < 1:
            raise ConfigError(f"{own}.num_beams={self.num_beams} must be >= 1; use 1 for greedy, 4-5 for beam search")
        if self.n_best < 1:
            raise ConfigError(f"{own}.n_best={self.n_best} must be >= 1")
        if self.num_beam_groups != 1 or self.diversity_penalty:
            self._check_groups()
        if self.penalty_alpha is not None and method.name != "contrastive":
            raise ConfigError(f"{own}.penalty_alpha={self.penalty_alpha} is contrastive search's; use "
                              f"method=contrastive (got method={self.method}) or penalty_alpha=null")
        method.check(self)
        if self.max_length is not None and self.max_length < max(1, self.min_length):
            raise ConfigError(f"{own}.max_length={self.max_length} must be >= max(1, min_length={self.min_length})")
        if self.max_length is None and (self.max_len_a < 0 or self.max_len_b < 1):
            raise ConfigError(f"{own}.max_len_a={self.max_len_a}, max_len_b={self.max_len_b}: need a >= 0, b >= 1")
        if self.dynatemp_range is not None and self.edt_theta is not None:
            raise ConfigError(f"{own}.dynatemp_range and {own}.edt_theta are two temperature rules; set one")
        if not method.samples:
            sampling = [k for k in self.sampling_options if getattr(self, k) is not None and k not in method.reads]
            if sampling:
                raise ConfigError(f"{own}.{sampling[0]} only applies to method=sample (got method={self.method}); "
                                  f"use method=sample or set {sampling[0]}=null")
        if self.mbr is not None:
            self._check_mbr(self.mbr)
        self._check_gnmt()
        if self.constraints is not None or self.constraint_words:
            self._check_constraints()
        if self.draft is not None or self.draft_schedule != "fixed" or self.draft_positions != "paying":
            self._check_draft()
        if self.prefix_size < 0:
            raise ConfigError(f"{own}.prefix_size={self.prefix_size} must be >= 0 (0: no forced prefix)")
        build_processors(self, DEFAULT_IDS)  # each processor checks its own value

    def _check_mbr(self, mbr: MBRConfig) -> None:
        own, method = "decoding", method_of(self)
        if not method.candidates:
            raise ConfigError(f"{own}.mbr needs candidates to choose from, not method={self.method}: use method=sample "
                              f"({own}.mbr.candidates samples) or method=beam (num_beams >= {own}.mbr.candidates)")
        if method.beams and self.num_beams < mbr.candidates:
            raise ConfigError(f"{own}.mbr.candidates={mbr.candidates} > num_beams={self.num_beams}: the candidates "
                              f"are the beam's n-best list; raise num_beams or lower {own}.mbr.candidates")
        if not method.samples and mbr.references is not None:
            raise ConfigError(f"{own}.mbr.references={mbr.references} draws a separate sample, which needs "
                              f"method=sample; with {self.method} candidates use {own}.mbr.references=null")
        if self.n_best > mbr.candidates:
            raise ConfigError(f"{own}.n_best={self.n_best} > {own}.mbr.candidates={mbr.candidates}: MBR returns "
                              "the best of its candidates")

    def _check_draft(self) -> None:
        own = "decoding"
        check_choice(own, "draft_schedule", self.draft_schedule, DraftSchedule)
        check_choice(own, "draft_positions", self.draft_positions, DraftPositions)
        for key, default in (("draft_schedule", "fixed"), ("draft_positions", "paying")):
            if self.draft is None and getattr(self, key) != default:
                raise ConfigError(f"{own}.{key}={getattr(self, key)} without {own}.draft: set {own}.draft=lookup "
                                  f"or ckpt:PATH, or {key}={default}")
        if self.draft != "lookup" and self.draft_checkpoint is None:
            raise ConfigError(f"{own}.draft={self.draft!r} is not a draft: use lookup (prompt lookup), ckpt:PATH "
                              "(a seqlab checkpoint with the model's vocabulary) or null")
        if not method_of(self).speculates:
            raise ConfigError(f"{own}.draft speculates for greedy search and sampling, not method={self.method}: "
                              f"use method=greedy or sample, or {own}.draft=null")
        if self.draft_tokens < 1:
            raise ConfigError(f"{own}.draft_tokens={self.draft_tokens} must be >= 1 (proposals per call)")
        if self.lookup_ngram < 1:
            raise ConfigError(f"{own}.lookup_ngram={self.lookup_ngram} must be >= 1 (the longest n-gram matched)")

    # What the config derives (cached_property): computed once, on first use, since the config is frozen; the
    # searches, engines and evaluation ask each many times.
    @cached_property
    def draft_checkpoint(self) -> str | None:
        """The path of `draft=ckpt:PATH`; None for prompt lookup or no draft."""
        if self.draft is None or not self.draft.startswith(DRAFT_CHECKPOINT):
            return None
        return self.draft[len(DRAFT_CHECKPOINT):] or None

    def _check_gnmt(self) -> None:
        own = "decoding"
        check_choice(own, "length_rule", self.length_rule, LengthRule)
        if self.length_rule != "power" and not method_of(self).beams:
            raise ConfigError(f"{own}.length_rule={self.length_rule} scores finished beams; it needs method=beam "
                              f"(got method={self.method})")
        if self.coverage_penalty is None:
            if self.coverage_beta:
                raise ConfigError(f"{own}.coverage_beta={self.coverage_beta} without {own}.coverage_penalty: set "
                                  f"{own}.coverage_penalty=wu or summary, or coverage_beta=0")
            return
        check_choice(own, "coverage_penalty", self.coverage_penalty, CoverageRule)
        if not method_of(self).beams or self.num_beam_groups > 1:
            raise ConfigError(f"{own}.coverage_penalty={self.coverage_penalty} rescores finished beams of plain "
                              f"beam search; use method=beam with num_beam_groups=1 (got method={self.method}, "
                              f"num_beam_groups={self.num_beam_groups})")
        if not self.coverage_beta > 0:
            raise ConfigError(f"{own}.coverage_beta={self.coverage_beta} must be > 0 with {own}.coverage_penalty="
                              f"{self.coverage_penalty} (OpenNMT-py's -beta; 0.2-0.4 in Wu et al. 2016)")

    def _check_constraints(self) -> None:
        own = "decoding"
        if self.constraints is None:
            raise ConfigError(f"{own}.constraint_words={self.constraint_words} needs {own}.constraints=ordered or "
                              "unordered (how the words must appear)")
        check_choice(own, "constraints", self.constraints, ConstraintOrder)
        if not method_of(self).beams or self.num_beam_groups > 1 or self.coverage_penalty is not None:
            raise ConfigError(f"{own}.constraints={self.constraints} is fairseq's constrained beam search: use "
                              f"method=beam without num_beam_groups or coverage_penalty (got method={self.method}, "
                              f"num_beam_groups={self.num_beam_groups}, coverage_penalty={self.coverage_penalty})")
        if self.early_stopping is not True or self.force_eos == "hf":
            raise ConfigError(f"{own}.constraints follows fairseq's generator, which stops at num_beams finished "
                              "hypotheses and keeps EOS's own score at the length limit: use early_stopping=true and "
                              f"force_eos=false or fairseq (got early_stopping={self.early_stopping}, "
                              f"force_eos={self.force_eos})")
        if self.prefix_size:
            raise ConfigError(f"{own}.constraints and {own}.prefix_size={self.prefix_size} do not combine: a forced "
                              "prefix would fill the beam with impossible constraint candidates; set one")
        if self.constraint_words < 0:
            raise ConfigError(f"{own}.constraint_words={self.constraint_words} must be >= 0")

    def _check_groups(self) -> None:
        own = "decoding"
        if not method_of(self).beams or self.num_beam_groups < 2:
            raise ConfigError(f"{own}.num_beam_groups={self.num_beam_groups} with diversity_penalty="
                              f"{self.diversity_penalty} and method={self.method}: diverse beam search needs "
                              f"method=beam, num_beam_groups >= 2 and diversity_penalty > 0")
        if self.num_beams % self.num_beam_groups:
            raise ConfigError(f"{own}.num_beams={self.num_beams} is not a multiple of num_beam_groups="
                              f"{self.num_beam_groups}; each group holds num_beams / num_beam_groups beams")
        if not self.diversity_penalty > 0:
            raise ConfigError(f"{own}.diversity_penalty={self.diversity_penalty} must be > 0 with num_beam_groups="
                              f"{self.num_beam_groups} (0 would be {self.num_beam_groups} identical beam searches)")

    @cached_property
    def sampling_options(self) -> tuple[str, ...]:
        """The options that only sampling reads (decoding.options: `sampling_only=True`), in field order."""
        return sampling_only(self)

    @cached_property
    def rows_per_source(self) -> int:
        """Decoder rows per source: beams for beam search, samples (or 1) otherwise."""
        return self.num_beams if method_of(self).beams else self.hypotheses_per_source

    @cached_property
    def hypotheses_per_source(self) -> int:
        """Hypotheses generate() returns per source: n_best, or MBR's candidates (then its pseudo-references)."""
        if self.mbr is None:
            return self.n_best
        extra = (self.mbr.references or 0) if method_of(self).samples else 0
        return self.mbr.candidates + extra

    @cached_property
    def label(self) -> str:
        """A short readable name of the setting, for tables and plots: the method and its own settings, then
        the penalties and constraints that change the output (two settings that differ only in no-repeat
        blocking must not share a name, or a comparison could not tell them apart)."""
        if self.name:
            return self.name
        if self.mbr is not None:
            return f"{self.mbr.label}_{replace(self, mbr=None, n_best=1).label}"
        # the penalties and constraints set (their declarations' labels): a value by its value, a token list by its
        # length, so that two settings that ban or bias different numbers of sequences get different names
        constraints = "".join(f"_{short}{len(value) if isinstance(value, list) else format(value, 'g')}"
                              for key, short in labelled(self).items() if (value := getattr(self, key)))
        if self.forced_bos_token_id is not None:
            constraints += f"_first{self.forced_bos_token_id}"
        if self.prefix_size:
            constraints += f"_prefix{self.prefix_size}"
        if self.constraints:
            constraints += f"_{self.constraints}{self.constraint_words or ''}"
        if self.draft is not None:  # the same outputs, another speed: its own row in a bench or a sweep
            schedule = "a" if self.draft_schedule == "adaptive" else ""
            constraints += f"_{'lookup' if self.draft == 'lookup' else 'draft'}{self.draft_tokens}{schedule}"
            constraints += "_all" if self.draft_positions == "all" else ""  # every proposal verified
        return method_of(self).label(self) + constraints

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
