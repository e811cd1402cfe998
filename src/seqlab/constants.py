"""Names and ids defined once for the whole package."""

from typing import Final

# Special token ids: the tokenizer is trained to use exactly these.
PAD_ID: Final = 0
UNK_ID: Final = 1
BOS_ID: Final = 2
EOS_ID: Final = 3

# Split names, as Hugging Face `datasets` spells them.
TRAIN: Final = "train"
VALIDATION: Final = "validation"
TEST: Final = "test"
SPLITS: Final = (TRAIN, VALIDATION, TEST)
