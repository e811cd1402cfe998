"""DecodingConfig: one typed, validated description of a decoding method."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, get_args

from seqlab.config import ConfigError, check_choice
from seqlab.constants import DEFAULT_IDS, ForceEOS
from seqlab.decoding.constraints import ConstraintOrder
from seqlab.decoding.coverage import CoverageRule
from seqlab.decoding.mbr import MBRConfig
from seqlab.decoding.options import labelled
from seqlab.decoding.registry import SAMPLING_ONLY, build_processors
from seqlab.decoding.search import LengthRule

Method = Literal["greedy", "beam", "sample", "contrastive"]
# What Hugging Face `generate` uses for a GenerationConfig value left unset (transformers 5 leaves them None).
HF_GENERATION_DEFAULTS: dict[str, Any] = {
    "max_length": 20, "min_length": 0, "do_sample": False, "early_stopping": False, "num_beams": 1,
    "temperature": 1.0, "top_k": 50, "top_p": 1.0, "typical_p": 1.0, "repetition_penalty": 1.0,
    "length_penalty": 1.0, "no_repeat_ngram_size": 0, "num_return_sequences": 1, "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}
NEW_TOKENS_BY_DEFAULT = 20  # transformers 5, for a config with neither max_length nor max_new_tokens
EarlyStopping = Literal[True, False, "never"]
DraftSchedule = Literal["fixed", "adaptive"]
DRAFT_CHECKPOINT = "ckpt:"  # decoding.draft=ckpt:PATH: a draft model


def sequence_bias_pairs(value: Any) -> list[list] | None:
    """Hugging Face's `sequence_bias` ({(ids...): bias} or [[ids, bias], ...]) as seqlab's [[ids], bias] pairs."""
    if not value:
        return None
    items = value.items() if isinstance(value, dict) else value
    return [[list(ids), float(bias)] for ids, bias in items]


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

    method: Method = "greedy"
    num_beams: int = 1
    n_best: int = 1  # beam: hypotheses returned; sample: samples per source
    length_penalty: float = 1.0
    num_beam_groups: int = 1  # diverse beam search (HF's num_beam_groups): K beams in this many groups
    diversity_penalty: float = 0.0  # subtracted per earlier-group beam that chose the token at this step
    early_stopping: EarlyStopping = True
    min_length: int = 0
    max_length: int | None = None
    max_len_a: float = 1.2
    max_len_b: int = 10
    no_repeat_ngram_size: int | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None  # OpenAI/llama.cpp: - frequency * count of the token so far
    presence_penalty: float | None = None  # OpenAI/llama.cpp: - presence * [token generated before]
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    typical_p: float | None = None
    epsilon: float | None = None
    eta: float | None = None
    top_n_sigma: float | None = None
    dynatemp_range: float | None = None  # llama.cpp dynatemp: temperature in [t - range, t + range] by entropy
    dynatemp_exponent: float = 1.0
    edt_theta: float | None = None  # EDT (Zhang et al. 2024): T = t * edt_base ** (edt_theta / entropy)
    edt_base: float = 0.8
    penalty_alpha: float | None = None  # contrastive: weight of the degeneration penalty, in [0, 1] (HF's name)
    force_eos: bool | ForceEOS = False  # last allowed step: EOS only; hf (= true) | fairseq rule | false (off)
    bad_words_ids: list[list[int]] | None = None
    sequence_bias: list[list] | None = None  # [[token ids], bias] pairs
    suppress_tokens: list[int] | None = None
    forced_bos_token_id: int | None = None
    suppress_special: bool = True
    renormalize_logits: bool = False
    prefix_size: int = 0  # evaluation: force the first N tokens of each reference (fairseq's --prefix-size)
    length_rule: LengthRule = "power"  # beam: power (len ** length_penalty; HF, fairseq) | wu (GNMT, OpenNMT-py)
    coverage_penalty: CoverageRule | None = None  # beam: wu | summary (OpenNMT-py), times coverage_beta
    coverage_beta: float = 0.0
    constraints: ConstraintOrder | None = None  # beam: lexical constraints, fairseq's --constraints ordered|unordered
    constraint_words: int = 0  # evaluation: constrain each output to N words of its reference (with `constraints`)
    seed: int = 0
    name: str | None = None  # a label for reports, e.g. "beam5_lp0.6"
    mbr: MBRConfig | None = None  # minimum Bayes risk over this setting's candidates (decoding/mbr.py)
    # speculative decoding (decoding/speculative.py): the same tokens as without it, in fewer decoder calls
    draft: str | None = None  # lookup (prompt lookup) | ckpt:PATH (a draft model) | null (off)
    draft_tokens: int = 5  # proposals per row and call (k)
    draft_schedule: DraftSchedule = "fixed"  # fixed | adaptive (per row: +2 after all kept, else -1)
    lookup_ngram: int = 2  # prompt lookup: the longest n-gram matched (Hugging Face's max_matching_ngram_size)

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
        check_choice(own, "method", self.method, Method)
        if self.early_stopping not in (True, False, "never"):
            raise ConfigError(f"{own}.early_stopping={self.early_stopping!r}; use true, false or never")
        if self.num_beams < 1:
            raise ConfigError(f"{own}.num_beams={self.num_beams} must be >= 1; use 1 for greedy, 4-5 for beam search")
        if self.n_best < 1:
            raise ConfigError(f"{own}.n_best={self.n_best} must be >= 1")
        if self.method == "beam" and self.n_best > self.num_beams:
            raise ConfigError(f"{own}.n_best={self.n_best} > num_beams={self.num_beams}: beam search keeps only "
                              f"num_beams hypotheses; use n_best <= {self.num_beams} or raise num_beams")
        if self.num_beam_groups != 1 or self.diversity_penalty:
            self._check_groups()
        if self.method == "greedy" and (self.num_beams != 1 or self.n_best != 1):
            raise ConfigError(f"{own}.method=greedy returns one hypothesis; use method=beam for num_beams/n_best > 1")
        if self.method == "sample" and self.num_beams != 1:
            raise ConfigError(f"{own}.method=sample does not use beams; set num_beams=1 (n_best = samples per source)")
        if self.max_length is not None and self.max_length < max(1, self.min_length):
            raise ConfigError(f"{own}.max_length={self.max_length} must be >= max(1, min_length={self.min_length})")
        if self.max_length is None and (self.max_len_a < 0 or self.max_len_b < 1):
            raise ConfigError(f"{own}.max_len_a={self.max_len_a}, max_len_b={self.max_len_b}: need a >= 0, b >= 1")
        if self.dynatemp_range is not None and self.edt_theta is not None:
            raise ConfigError(f"{own}.dynatemp_range and {own}.edt_theta are two temperature rules; set one")
        if self.method == "contrastive" or self.penalty_alpha is not None:
            self._check_contrastive()
        if self.method != "sample":
            sampling = [k for k in SAMPLING_ONLY if getattr(self, k) is not None
                        and not (k == "top_k" and self.method == "contrastive")]
            if sampling:
                raise ConfigError(f"{own}.{sampling[0]} only applies to method=sample (got method={self.method}); "
                                  f"use method=sample or set {sampling[0]}=null")
        if self.mbr is not None:
            self._check_mbr(self.mbr)
        self._check_gnmt()
        if self.constraints is not None or self.constraint_words:
            self._check_constraints()
        if self.draft is not None or self.draft_schedule != "fixed":
            self._check_draft()
        if self.prefix_size < 0:
            raise ConfigError(f"{own}.prefix_size={self.prefix_size} must be >= 0 (0: no forced prefix)")
        build_processors(self, DEFAULT_IDS)  # each processor checks its own value

    def _check_mbr(self, mbr: MBRConfig) -> None:
        own = "decoding"
        if self.method in ("greedy", "contrastive"):
            raise ConfigError(f"{own}.mbr needs candidates to choose from, not method={self.method}: use method=sample "
                              f"({own}.mbr.candidates samples) or method=beam (num_beams >= {own}.mbr.candidates)")
        if self.method == "beam" and self.num_beams < mbr.candidates:
            raise ConfigError(f"{own}.mbr.candidates={mbr.candidates} > num_beams={self.num_beams}: the candidates "
                              f"are the beam's n-best list; raise num_beams or lower {own}.mbr.candidates")
        if self.method == "beam" and mbr.references is not None:
            raise ConfigError(f"{own}.mbr.references={mbr.references} draws a separate sample, which needs "
                              f"method=sample; with beam candidates use {own}.mbr.references=null")
        if self.n_best > mbr.candidates:
            raise ConfigError(f"{own}.n_best={self.n_best} > {own}.mbr.candidates={mbr.candidates}: MBR returns "
                              "the best of its candidates")

    def _check_draft(self) -> None:
        own = "decoding"
        check_choice(own, "draft_schedule", self.draft_schedule, DraftSchedule)
        if self.draft is None:
            raise ConfigError(f"{own}.draft_schedule={self.draft_schedule} without {own}.draft: set {own}.draft="
                              "lookup or ckpt:PATH, or draft_schedule=fixed")
        if self.draft != "lookup" and self.draft_checkpoint is None:
            raise ConfigError(f"{own}.draft={self.draft!r} is not a draft: use lookup (prompt lookup), ckpt:PATH "
                              "(a seqlab checkpoint with the model's vocabulary) or null")
        if self.method not in ("greedy", "sample"):
            raise ConfigError(f"{own}.draft speculates for greedy search and sampling, not method={self.method}: "
                              f"use method=greedy or sample, or {own}.draft=null")
        if self.draft_tokens < 1:
            raise ConfigError(f"{own}.draft_tokens={self.draft_tokens} must be >= 1 (proposals per call)")
        if self.lookup_ngram < 1:
            raise ConfigError(f"{own}.lookup_ngram={self.lookup_ngram} must be >= 1 (the longest n-gram matched)")

    @property
    def draft_checkpoint(self) -> str | None:
        """The path of `draft=ckpt:PATH`; None for prompt lookup or no draft."""
        if self.draft is None or not self.draft.startswith(DRAFT_CHECKPOINT):
            return None
        return self.draft[len(DRAFT_CHECKPOINT):] or None

    def _check_contrastive(self) -> None:
        own = "decoding"
        if self.method != "contrastive":
            raise ConfigError(f"{own}.penalty_alpha={self.penalty_alpha} is contrastive search's; use "
                              f"method=contrastive (got method={self.method}) or penalty_alpha=null")
        if self.penalty_alpha is None or not 0.0 <= self.penalty_alpha <= 1.0:
            raise ConfigError(f"{own}.penalty_alpha={self.penalty_alpha} must be in [0, 1] with method=contrastive "
                              "(0.6 in Su et al. 2022; 0 is greedy search)")
        if self.top_k is None or self.top_k < 1:
            raise ConfigError(f"{own}.top_k={self.top_k}: contrastive search ranks the top_k most probable tokens; "
                              "set top_k >= 1 (4-10 in Su et al. 2022)")
        if self.num_beams != 1 or self.n_best != 1:
            raise ConfigError(f"{own}.method=contrastive returns one hypothesis; use num_beams=1 and n_best=1")

    def _check_gnmt(self) -> None:
        own = "decoding"
        check_choice(own, "length_rule", self.length_rule, LengthRule)
        if self.length_rule != "power" and self.method != "beam":
            raise ConfigError(f"{own}.length_rule={self.length_rule} scores finished beams; it needs method=beam "
                              f"(got method={self.method})")
        if self.coverage_penalty is None:
            if self.coverage_beta:
                raise ConfigError(f"{own}.coverage_beta={self.coverage_beta} without {own}.coverage_penalty: set "
                                  f"{own}.coverage_penalty=wu or summary, or coverage_beta=0")
            return
        check_choice(own, "coverage_penalty", self.coverage_penalty, CoverageRule)
        if self.method != "beam" or self.num_beam_groups > 1:
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
        if self.method != "beam" or self.num_beam_groups > 1 or self.coverage_penalty is not None:
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
        if self.method != "beam" or self.num_beam_groups < 2:
            raise ConfigError(f"{own}.num_beam_groups={self.num_beam_groups} with diversity_penalty="
                              f"{self.diversity_penalty} and method={self.method}: diverse beam search needs "
                              f"method=beam, num_beam_groups >= 2 and diversity_penalty > 0")
        if self.num_beams % self.num_beam_groups:
            raise ConfigError(f"{own}.num_beams={self.num_beams} is not a multiple of num_beam_groups="
                              f"{self.num_beam_groups}; each group holds num_beams / num_beam_groups beams")
        if not self.diversity_penalty > 0:
            raise ConfigError(f"{own}.diversity_penalty={self.diversity_penalty} must be > 0 with num_beam_groups="
                              f"{self.num_beam_groups} (0 would be {self.num_beam_groups} identical beam searches)")

    @classmethod
    def from_generation_config(cls, gc: Any) -> DecodingConfig:
        """The DecodingConfig equal to a Hugging Face `GenerationConfig` (or its dict) for an encoder-decoder.

        HF's `max_length`/`min_length` count the decoder start token, seqlab's lengths do not;
        HF applies `top_k=50` by default when sampling, so the mapping keeps it.
        """
        given = dict(gc) if isinstance(gc, dict) else gc.to_dict()
        g = {**HF_GENERATION_DEFAULTS, **{k: v for k, v in given.items() if v is not None}}  # None = HF's default
        sample = bool(g.get("do_sample"))
        beams = int(g.get("num_beams") or 1)
        # HF's rule: contrastive search when penalty_alpha > 0 and top_k > 1, without sampling or beams
        contrastive = not sample and beams == 1 and (g.get("penalty_alpha") or 0) > 0 and int(g["top_k"] or 0) > 1
        method = "sample" if sample else ("beam" if beams > 1 else ("contrastive" if contrastive else "greedy"))
        # transformers 5 generates max_length - 1 new tokens (max_length counts the decoder start), and 20 new
        # tokens when neither max_length nor max_new_tokens is given
        if g.get("max_new_tokens"):
            max_length = int(g["max_new_tokens"])
        elif given.get("max_length"):
            max_length = int(given["max_length"]) - 1
        else:
            max_length = NEW_TOKENS_BY_DEFAULT
        min_length = g.get("min_new_tokens") or max(0, int(g.get("min_length") or 0) - 1)
        bad = g.get("bad_words_ids")

        def warper(key: str, off: float | None) -> Any:
            value = g.get(key)
            return None if not sample or value is None or value == off else value

        return cls(
            method=method, num_beams=beams if method == "beam" else 1,
            n_best=int(g.get("num_return_sequences") or 1),
            num_beam_groups=int(g.get("num_beam_groups") or 1) if method == "beam" else 1,
            diversity_penalty=float(g.get("diversity_penalty") or 0.0) if method == "beam" else 0.0,
            length_penalty=float(g.get("length_penalty", 1.0)),
            early_stopping=g.get("early_stopping", False) if g.get("early_stopping") != "never" else "never",
            min_length=min_length, max_length=max_length,
            no_repeat_ngram_size=g.get("no_repeat_ngram_size") or None,
            repetition_penalty=None if g.get("repetition_penalty", 1.0) == 1.0 else g["repetition_penalty"],
            temperature=warper("temperature", 1.0), top_k=int(g["top_k"]) if contrastive else warper("top_k", 0),
            top_p=warper("top_p", 1.0),
            min_p=warper("min_p", None), typical_p=warper("typical_p", 1.0), epsilon=warper("epsilon_cutoff", 0.0),
            penalty_alpha=float(g["penalty_alpha"]) if contrastive else None,
            eta=warper("eta_cutoff", 0.0), force_eos=g.get("forced_eos_token_id") is not None,
            bad_words_ids=[list(b) for b in bad] if bad else None,
            sequence_bias=sequence_bias_pairs(g.get("sequence_bias")),
            suppress_tokens=list(g["suppress_tokens"]) if g.get("suppress_tokens") else None,
            forced_bos_token_id=g.get("forced_bos_token_id"), suppress_special=False,
            renormalize_logits=bool(g.get("renormalize_logits", False)),
        )

    @property
    def rows_per_source(self) -> int:
        """Decoder rows per source: beams for beam search, samples (or 1) otherwise."""
        if self.method == "beam":
            return self.num_beams
        return self.hypotheses_per_source

    @property
    def hypotheses_per_source(self) -> int:
        """Hypotheses generate() returns per source: n_best, or MBR's candidates (then its pseudo-references)."""
        if self.mbr is None:
            return self.n_best
        extra = (self.mbr.references or 0) if self.method == "sample" else 0
        return self.mbr.candidates + extra

    @property
    def label(self) -> str:
        """A short readable name of the setting, for tables and plots: the method and its own settings, then
        the penalties and constraints that change the output (two settings that differ only in no-repeat
        blocking must not share a name, or a comparison could not tell them apart)."""
        if self.name:
            return self.name
        if self.mbr is not None:
            return f"{self.mbr.label}_{replace(self, mbr=None, n_best=1).label}"
        # the penalties and constraints set (options.OPTIONS' labels): a value by its value, a token list by its
        # length, so that two settings that ban or bias different numbers of sequences get different names
        constraints = "".join(f"_{short}{len(value) if isinstance(value, list) else format(value, 'g')}"
                              for key, short in labelled().items() if (value := getattr(self, key)))
        if self.forced_bos_token_id is not None:
            constraints += f"_first{self.forced_bos_token_id}"
        if self.prefix_size:
            constraints += f"_prefix{self.prefix_size}"
        if self.constraints:
            constraints += f"_{self.constraints}{self.constraint_words or ''}"
        if self.draft is not None:  # the same outputs, another speed: its own row in a bench or a sweep
            schedule = "a" if self.draft_schedule == "adaptive" else ""
            constraints += f"_{'lookup' if self.draft == 'lookup' else 'draft'}{self.draft_tokens}{schedule}"
        if self.method == "greedy":
            return "greedy" + constraints
        if self.method == "beam":
            groups = f"_g{self.num_beam_groups}_div{self.diversity_penalty:g}" if self.num_beam_groups > 1 else ""
            nbest = f"_n{self.n_best}" if self.n_best > 1 else ""  # an n-best list: its own row in tables
            rule = "wu" if self.length_rule == "wu" else ""
            coverage = (f"_cov{self.coverage_penalty}{self.coverage_beta:g}" if self.coverage_penalty else "")
            return f"beam{self.num_beams}_lp{rule}{self.length_penalty:g}{coverage}{groups}{nbest}{constraints}"
        if self.method == "contrastive":
            return f"contrastive_a{self.penalty_alpha:g}_k{self.top_k}" + constraints
        parts = [f"{k}{getattr(self, k):g}" for k in SAMPLING_ONLY if getattr(self, k) is not None]
        return "sample" + ("_" + "_".join(parts) if parts else "") + constraints

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
