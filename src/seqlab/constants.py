"""Names and ids defined once for the whole package."""

from typing import Final, Literal, NamedTuple, Protocol

# Special token ids: the tokenizer is trained to use exactly these.
PAD_ID: Final = 0
UNK_ID: Final = 1
BOS_ID: Final = 2
EOS_ID: Final = 3


# The rule for a hypothesis's last allowed step (DecodingConfig.force_eos): Hugging Face's scores the forced
# EOS 0, fairseq's keeps its log-prob (decoding.search.force_eos_).
ForceEOS = Literal["hf", "fairseq"]


class SpecialIds(NamedTuple):
    """The ids decoding needs; a model's own (ModelConfig) may differ, e.g. for an imported model."""

    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    extra_eos_ids: tuple[int, ...] = ()  # further ids that end a row (ModelConfig.extra_eos_ids)
    # what `decoding.suppress_special` bans (ModelConfig.unemitted); None: pad and bos, neither an end token
    banned_special: tuple[int, ...] | None = None

    @property
    def end_ids(self) -> tuple[int, ...]:
        return (self.eos_id, *self.extra_eos_ids)

    @property
    def unemitted(self) -> tuple[int, ...]:
        return never_emitted(self) if self.banned_special is None else self.banned_special


DEFAULT_IDS: Final = SpecialIds()


class HasSpecialIds(Protocol):
    """Anything that carries the three ids decoding needs: SpecialIds, or a ModelConfig."""

    @property
    def pad_id(self) -> int: ...

    @property
    def bos_id(self) -> int: ...

    @property
    def eos_id(self) -> int: ...

    @property
    def end_ids(self) -> tuple[int, ...]: ...

    @property
    def unemitted(self) -> tuple[int, ...]: ...


def never_emitted(ids: HasSpecialIds) -> tuple[int, ...]:
    """seqlab's rule for the models it trains (`decoding.suppress_special`): the pad and decoder start tokens
    are never emitted, unless one is an end token (a causal LM without a pad token pads with its EOS)."""
    return tuple(dict.fromkeys(i for i in (ids.pad_id, ids.bos_id) if i not in ids.end_ids))


# Split names, as Hugging Face `datasets` spells them.
TRAIN: Final = "train"
VALIDATION: Final = "validation"
TEST: Final = "test"
SPLITS: Final = (TRAIN, VALIDATION, TEST)
