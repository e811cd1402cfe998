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


DEFAULT_IDS: Final = SpecialIds()


class HasSpecialIds(Protocol):
    """Anything that carries the three ids decoding needs: SpecialIds, or a ModelConfig."""

    @property
    def pad_id(self) -> int: ...

    @property
    def bos_id(self) -> int: ...

    @property
    def eos_id(self) -> int: ...

# Split names, as Hugging Face `datasets` spells them.
TRAIN: Final = "train"
VALIDATION: Final = "validation"
TEST: Final = "test"
SPLITS: Final = (TRAIN, VALIDATION, TEST)
