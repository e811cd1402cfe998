"""Where an evaluation's lexical constraints come from, and how many a decoding met.

As in Post & Vilar (2018) and Hu et al. (2019), the constraints of a test sentence are words of its
reference: `constraint_words` of them per sentence, drawn at random with a seed of their own (the decoding's
seed and the example's id, so a sentence's words do not depend on the test set around it), kept in the
reference's order, punctuation stripped from their edges. Each word is tokenized alone, as fairseq tokenizes
its constraints: with the word-initial piece it has after a space.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence


def words_of(text: str) -> list[str]:
    """The text's words as constraints are drawn from it: split at spaces, punctuation stripped from the edges."""
    return [w.strip(string.punctuation) for w in text.split()]


def reference_words(reference: str, n: int, seed: int, key: str) -> list[str]:
    """Up to n words of `reference` (those with a letter or digit), drawn by (seed, key), in their order."""
    words = words_of(reference)
    usable = [i for i, w in enumerate(words) if any(ch.isalnum() for ch in w)]
    chosen = sorted(random.Random(f"{seed}:{key}").sample(usable, min(n, len(usable))))
    return [words[i] for i in chosen]


def met(hypothesis: Sequence[int], constraints: Sequence[Sequence[int]]) -> int:
    """How many of `constraints` the hypothesis's token ids contain, each occurrence used once (a phrase
    given twice must appear twice), in any order."""
    tokens, count = list(hypothesis), 0
    for c in constraints:
        n = len(c)
        at = next((i for i in range(len(tokens) - n + 1) if tokens[i : i + n] == list(c)), None)
        if at is not None:
            count += 1
            tokens[at : at + n] = [-1]  # used: no later constraint can match across it
    return count
