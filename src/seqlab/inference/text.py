"""Translate or summarize text with a checkpoint: one output line per input line, in input order.

`seqlab translate` (seqlab.app.translate) is the command (`make translate CKPT=...`); these functions are
what it and the tests call. Empty (or blank) input lines give empty output lines without
being decoded, so the output never shifts against the input. `fairseq` format prints, per
input line i, fairseq-generate's lines: `S-i` (source), then per hypothesis `H-i<TAB>score<TAB>text`
and `P-i<TAB>per-token log-probs`, scores and log-probs in base 2 as fairseq prints them
(beam: the length-normalized score; otherwise, MBR included, the sequence log-prob).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

from seqlab.config import ConfigError
from seqlab.data.tokenizer import Tokenizer
from seqlab.decoding import DecodingConfig
from seqlab.decoding.engine import DecodingEngine
from seqlab.inference.evaluation import constraint_ids, decode_texts, prefix_ids
from seqlab.model import Model

Format = Literal["plain", "fairseq"]
LN2 = math.log(2)


@dataclass(frozen=True)
class Hypothesis:
    text: str
    score: float  # natural log
    token_logprobs: list[float]


@dataclass(frozen=True)
class TargetPrefix:
    """Where each output's forced beginning comes from: the text after a line's first TAB (`column`), or one
    text for every line; generated first and scored like the rest (decoding.generate's target_prefix)."""

    column: bool = False
    text: str | None = None

    def split(self, tokenizer: Tokenizer, lines: Sequence[str], first_line: int = 1
              ) -> tuple[list[str], list[list[int]] | None]:
        """(the sources, their prefixes' target token ids without EOS, or None); a line without its TAB fails,
        naming its number (counted from `first_line`)."""
        if not self.column and self.text is None:
            return list(lines), None
        if self.column:
            missing = next((n for n, line in enumerate(lines, first_line) if "\t" not in line), None)
            if missing is not None:
                raise ValueError(f"input line {missing} has no TAB: with prefix_column=true each line is "
                                 "SOURCE<TAB>PREFIX (an empty PREFIX forces nothing)")
            pairs = [line.split("\t", 1) for line in lines]
            sources, texts = [p[0] for p in pairs], [p[1] for p in pairs]
        else:
            sources, texts = list(lines), [self.text or ""] * len(lines)
        return sources, [ids if text.strip() else [] for ids, text in zip(prefix_ids(tokenizer, texts), texts,
                                                                            strict=True)]


NO_PREFIX = TargetPrefix()


def split_constraints(tokenizer: Tokenizer, lines: Sequence[str], numbers: Sequence[int]
                      ) -> tuple[list[str], list[list[list[int]]]]:
    """fairseq-interactive's input with `--constraints`: SOURCE<TAB>CONSTRAINT<TAB>CONSTRAINT..., each constraint
    a word or phrase (a line without a TAB has none). Returns the sources and their constraints' token ids; a
    blank constraint fails, naming its line (`numbers`: each line's number in the input)."""
    fields = [line.split("\t") for line in lines]
    for number, f in zip(numbers, fields, strict=True):
        blank = next((k for k, c in enumerate(f[1:], 1) if not c.strip()), None)
        if blank is not None:
            raise ConfigError(f"input line {number}: constraint {blank} is blank (a TAB with no word after it); "
                              "give a word or drop the TAB")
    return [f[0] for f in fields], constraint_ids(tokenizer, [f[1:] for f in fields])


def translate(model: Model, tokenizer: Tokenizer, lines: Sequence[str], cfg: DecodingConfig,
              max_tokens: int = 8000, on_batch: Callable[[int], None] | None = None,
              engine: DecodingEngine | None = None, prefix: TargetPrefix = NO_PREFIX, first_line: int = 1
              ) -> list[list[Hypothesis]]:
    """The n-best hypotheses of every line (none for a blank line), in input order (engine: decoding.engine,
    None: seqlab's search in fp32)."""
    keep = [i for i, line in enumerate(lines) if line.strip()]
    numbers = [first_line + i for i in keep]  # each kept line's number in the input, for errors
    constraints = None
    if cfg.constraints is not None:
        if prefix != NO_PREFIX:
            raise ConfigError("decoding.constraints reads each line's constraints after its TABs; a target prefix "
                              "does not combine with it: set one")
        sources, constraints = split_constraints(tokenizer, [lines[i] for i in keep], numbers)
        prefixes = None
    else:
        sources, prefixes = prefix.split(tokenizer, [lines[i] for i in keep], first_line)
    decoded = decode_texts(model, tokenizer, sources, cfg, max_tokens, on_batch, engine=engine, prefixes=prefixes,
                           constraints=constraints, names=[f"input line {n}" for n in numbers])
    out: list[list[Hypothesis]] = [[] for _ in lines]
    for i, hyps in zip(keep, decoded.hypotheses, strict=True):
        # MBR ranks by expected utility; the printed score stays the model's log-prob (fairseq's H- lines)
        out[i] = [Hypothesis(tokenizer.decode_target(ids), score if cfg.mbr is None else sum(lps), lps)
                  for ids, score, lps in hyps]
    return out


def format_output(index: int, source: str, hyps: list[Hypothesis], fmt: Format) -> str:
    """The text written for one input line (with its trailing newline)."""
    if fmt == "plain":
        return (hyps[0].text if hyps else "") + "\n"
    lines = [f"S-{index}\t{source}"]
    for h in hyps:
        lines.append(f"H-{index}\t{h.score / LN2:.4f}\t{h.text}")
        lines.append(f"P-{index}\t" + " ".join(f"{lp / LN2:.4f}" for lp in h.token_logprobs))
    return "\n".join(lines) + "\n"


def chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    """Lines (newline stripped) in chunks of at most `size`: memory stays bounded on large files."""
    chunk: list[str] = []
    for line in lines:
        chunk.append(line.rstrip("\n").rstrip("\r"))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def translate_stream(model: Model, tokenizer: Tokenizer, lines: Iterable[str], out: TextIO,
                     cfg: DecodingConfig, fmt: Format = "plain", max_tokens: int = 8000, chunk_size: int = 2000,
                     on_batch: Callable[[int], None] | None = None, engine: DecodingEngine | None = None,
                     prefix: TargetPrefix = NO_PREFIX) -> int:
    """Translate every line of `lines` to `out`, chunk by chunk; returns the number of lines."""
    done = 0
    for chunk in chunks(lines, chunk_size):
        hyps_of = translate(model, tokenizer, chunk, cfg, max_tokens, on_batch, engine, prefix, done + 1)
        for i, (source, hyps) in enumerate(zip(chunk, hyps_of, strict=True)):
            out.write(format_output(done + i, source, hyps, fmt))
        out.flush()
        done += len(chunk)
    return done
