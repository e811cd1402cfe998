"""Which examples an evaluation decodes, and what identifies them: the checkpoint's own corpus split,
another corpus's, or plain-text files, each optionally with extra references.

A test set other than the checkpoint's own split has a key (`TestSet.key`: files by their contents), so
each gets its own result folder and none overwrites another.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from seqlab.config import ConfigError
from seqlab.data import CorpusConfig, Example, examples_from_text_files, load_split
from seqlab.digest import file_digest


@dataclass(frozen=True)
class TestSet:
    split: str  # test | validation
    limit: int | None = None  # the first N examples
    source: str | None = None  # a plain-text source file, one segment per line ...
    references: tuple[str, ...] = ()  # ... and its reference files (several: several references)
    corpus: CorpusConfig | None = None  # another corpus than the checkpoint's own
    extra_references: tuple[str, ...] = ()  # fields of the corpus read as further references

    def __post_init__(self) -> None:
        if self.source is not None and not self.references:
            raise ConfigError("source=FILE needs references=[REF.txt, ...] (one or more reference files)")

    def key(self) -> dict[str, Any] | None:
        """What identifies the test set when it is not the checkpoint's own split (None: it is)."""
        if self.source is not None:
            missing = [p for p in (self.source, *self.references) if not Path(p).is_file()]
            if missing:
                raise ConfigError(f"test set file(s) not found: {missing}")
            return {"source": [self.source, file_digest(self.source)],
                    "references": [[r, file_digest(r)] for r in self.references]}
        if self.corpus is not None:
            return {"corpus": self.corpus.fingerprint(), "split": self.split,
                    "extra_references": list(self.extra_references)}
        if self.extra_references:
            return {"split": self.split, "extra_references": list(self.extra_references)}
        return None

    def examples(self, own_corpus: CorpusConfig | None) -> list[Example]:
        """The examples to decode: the files, or the corpus split (the checkpoint's own corpus when no other;
        None: it has none)."""
        if self.source is not None:
            examples = examples_from_text_files(self.source, list(self.references))
        else:
            corpus = self.corpus or own_corpus
            if corpus is None:
                raise ConfigError("this checkpoint has no training corpus (an imported model): give a test set, "
                                  "corpus=NAME or source=FILE references=[REF, ...]")
            examples = load_split(replace(corpus, extra_reference_fields=self.extra_references), self.split)
        return examples[: self.limit or None]
