"""Logits processors: small objects (prefix, scores) -> new scores, never editing their input.

Each follows the Hugging Face processor of the same name exactly (the tests
compare them on random logits), validates its arguments in `__init__`, and uses
-inf to remove a token. `prefix` is (N, T) ids including the decoder start token,
as HF's `input_ids` for encoder-decoder models.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from seqlab.config import ConfigError

NEG_INF = -math.inf


class LogitsProcessor:
    """Base class: subclasses implement `__call__(prefix, scores)`."""

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


class Ban(LogitsProcessor):
    """A processor that only removes tokens (sets their score to -inf), whatever the scores' values.

    Removing a token commutes with adding a constant to its row, so beam search can apply the bans
    that come last in the list in place, after adding the running scores (`ban_`), where HF applies
    them to a copy before: the same numbers, one pass over the vocabulary and one copy fewer per step.
    """

    def active(self, prefix: Tensor) -> bool:
        """Whether this step bans anything at all (else the scores pass through uncopied)."""
        return True

    def ban_(self, prefix: Tensor, scores: Tensor) -> None:
        """Set the banned tokens' scores to -inf, in place."""
        raise NotImplementedError

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        if not self.active(prefix):
            return scores
        out = scores.clone()
        self.ban_(prefix, out)
        return out


class SuppressTokens(Ban):
    """Never emit these ids (seqlab's rule: pad and the decoder start token; or a list such as HF's
    `suppress_tokens`)."""

    def __init__(self, ids: Sequence[int]) -> None:
        self.ids = sorted(set(ids))

    def ban_(self, prefix: Tensor, scores: Tensor) -> None:
        scores[:, self.ids] = NEG_INF


class BadWords(Ban):
    """Never complete one of these token sequences (HF NoBadWordsLogitsProcessor): a one-token sequence is
    banned at every step, a longer one's last token wherever the prefix ends with the rest. As in HF, a
    one-token sequence of EOS alone is dropped (it would make every hypothesis endless)."""

    def __init__(self, sequences: Sequence[Sequence[int]], eos_id: int) -> None:
        _check(bool(sequences) and all(len(s) >= 1 and all(isinstance(i, int) and i >= 0 for i in s)
                                       for s in sequences),
               f"decoding.bad_words_ids={sequences!r} must be a non-empty list of non-empty lists of token ids")
        kept = [tuple(s) for s in sequences if list(s) != [eos_id]]
        self.always = sorted({s[0] for s in kept if len(s) == 1})
        self.longer = [s for s in kept if len(s) > 1]

    def ban_(self, prefix: Tensor, scores: Tensor) -> None:
        if self.always:
            scores[:, self.always] = NEG_INF
        for seq in self.longer:
            head = len(seq) - 1
            if prefix.shape[1] < head:
                continue
            hit = (prefix[:, prefix.shape[1] - head :] == prefix.new_tensor(seq[:-1])).all(dim=1)  # (N,)
            scores[hit, seq[-1]] = NEG_INF


class SequenceBias(LogitsProcessor):
    """Add a bias to the last token of each sequence wherever the prefix ends with the rest of it; a one-token
    sequence's bias applies at every step; biases of sequences that share a last token add up (HF
    SequenceBiasLogitsProcessor). `pairs`: ([ids], bias) each; a sequence given twice keeps its last bias, as
    HF's dict of sequences does."""

    def __init__(self, pairs: Sequence[tuple[Sequence[int], float]]) -> None:
        ok = bool(pairs) and all(len(p) == 2 and len(p[0]) >= 1 and all(isinstance(i, int) and i >= 0 for i in p[0])
                                 and isinstance(p[1], int | float) for p in pairs)
        _check(ok, f"decoding.sequence_bias={pairs!r} must be a non-empty list of [[token ids], bias] pairs")
        last = {tuple(seq): float(b) for seq, b in pairs}  # (ids) -> bias, the last one given
        self.single = [(seq[0], b) for seq, b in last.items() if len(seq) == 1]
        self.longer = [(seq, b) for seq, b in last.items() if len(seq) > 1]

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        bias = torch.zeros_like(scores)
        for token, b in self.single:
            bias[:, token] += b
        for seq, b in self.longer:
            head = len(seq) - 1
            if prefix.shape[1] < head:
                continue
            hit = (prefix[:, prefix.shape[1] - head :] == prefix.new_tensor(seq[:-1])).all(dim=1)  # (N,)
            bias[:, seq[-1]] += torch.where(hit, b, 0.0).to(bias.dtype)
        return scores + bias


class ForcedFirstToken(LogitsProcessor):
    """The first generated token is `token_id`, scored 0 (HF ForcedBOSTokenLogitsProcessor): BART's `<s>`,
    mBART-50's and NLLB's target language code."""

    def __init__(self, token_id: int) -> None:
        _check(isinstance(token_id, int) and token_id >= 0,
               f"decoding.forced_bos_token_id={token_id!r} must be a token id (null = off)")
        self.token_id = token_id

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        if prefix.shape[1] != 1:
            return scores
        out = torch.full_like(scores, NEG_INF)
        out[:, self.token_id] = 0.0
        return out


class ForcedPrefix(Ban):
    """Each source's target prefix comes first, every forced token keeping its own score (fairseq's
    `--prefix-size`, whose scores and log-probs count the prefix; CTranslate2's `target_prefix`): at step t a row
    whose prefix is longer than t may only emit the prefix's t-th token. A search binds it to its rows'
    examples at every step (`for_examples`), as examples finish and leave the batch.

    tokens: (N, P) the prefixes, `pad_id` after each one; examples: (A,) the example (row of `tokens`) of each
    row or of each group of consecutive rows (a source's beams); None: row i is example i.
    """

    def __init__(self, tokens: Tensor, pad_id: int, examples: Tensor | None = None) -> None:
        self.tokens, self.pad_id, self.examples = tokens, pad_id, examples

    def for_examples(self, examples: Tensor) -> ForcedPrefix:
        return ForcedPrefix(self.tokens, self.pad_id, examples)

    def active(self, prefix: Tensor) -> bool:
        return prefix.shape[1] - 1 < self.tokens.shape[1]

    def ban_(self, prefix: Tensor, scores: Tensor) -> None:
        t = prefix.shape[1] - 1
        if t >= self.tokens.shape[1]:
            return
        column = self.tokens[:, t] if self.examples is None else self.tokens[self.examples, t]
        forced = column.repeat_interleave(scores.shape[0] // column.shape[0])  # (rows,)
        rows = (forced != self.pad_id).nonzero().squeeze(1)
        if rows.numel():
            kept = scores[rows, forced[rows]]  # a copy: advanced indexing
            scores[rows] = NEG_INF
            scores[rows, forced[rows]] = kept


def for_examples(processors: Sequence[LogitsProcessor], examples: Tensor) -> list[LogitsProcessor]:
    """The processors with each per-example one (one with `for_examples`: a forced prefix, a prompt's reader)
    bound to the examples of the rows a search decodes now."""
    return [p.for_examples(examples) if hasattr(p, "for_examples") else p for p in processors]


class LogitNormalization(LogitsProcessor):
    """Log-softmax of the processed scores (HF's `renormalize_logits=True`), so that beam scores stay
    log-probabilities after processors removed or moved mass."""

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        return scores.log_softmax(dim=-1)


class MinNewTokens(Ban):
    """Forbid EOS until `min_new` tokens have been generated (HF MinNewTokensLengthLogitsProcessor)."""

    def __init__(self, min_new: int, eos_id: int) -> None:
        _check(min_new >= 0, f"decoding.min_length={min_new} must be >= 0")
        self.min_new, self.eos_id = min_new, eos_id

    def active(self, prefix: Tensor) -> bool:
        return prefix.shape[1] - 1 < self.min_new

    def ban_(self, prefix: Tensor, scores: Tensor) -> None:
        if self.active(prefix):
            scores[:, self.eos_id] = NEG_INF


class RepetitionPenalty(LogitsProcessor):
    """CTRL (Keskar et al. 2019) as in HF: a seen token's score s becomes s/p if s > 0, else s*p."""

    def __init__(self, penalty: float) -> None:
        _check(penalty > 0, f"decoding.repetition_penalty={penalty} must be > 0 (1.0 = no penalty; try 1.2)")
        self.penalty = penalty

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        seen = scores.gather(1, prefix)
        seen = torch.where(seen < 0, seen * self.penalty, seen / self.penalty)
        return scores.scatter(1, prefix, seen)


class NoRepeatNGram(Ban):
    """Ban any token that would repeat an n-gram already in the prefix (HF/fairseq rule)."""

    def __init__(self, n: int) -> None:
        _check(isinstance(n, int) and n >= 1, f"decoding.no_repeat_ngram_size={n} must be a positive integer")
        self.n = n

    def active(self, prefix: Tensor) -> bool:
        return prefix.shape[1] + 1 >= self.n

    def ban_(self, prefix: Tensor, scores: Tensor) -> None:
        if not self.active(prefix):
            return
        n, length = self.n, prefix.shape[1]
        for i, tokens in enumerate(prefix.tolist()):
            context = tuple(tokens[length + 1 - n :]) if n > 1 else ()
            banned = [tokens[j + n - 1] for j in range(length - n + 1) if tuple(tokens[j : j + n - 1]) == context
                      and tokens[j + n - 1] >= 0]  # a negative id pads a prompt's context (decoding.prompts)
            if banned:
                scores[i, banned] = NEG_INF


class Temperature(LogitsProcessor):
    """scores / t."""

    def __init__(self, temperature: float) -> None:
        _check(temperature > 0, f"decoding.temperature={temperature} must be > 0; for the argmax use method=greedy")
        self.temperature = temperature

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        return scores / self.temperature


class TopK(LogitsProcessor):
    """Keep the k highest scores (and ties with the k-th)."""

    def __init__(self, k: int, min_keep: int = 1) -> None:
        _check(isinstance(k, int) and k >= 1, f"decoding.top_k={k} must be a positive integer (null = off)")
        self.k = max(k, min_keep)

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        k = min(self.k, scores.shape[-1])
        kth = torch.topk(scores, k)[0][..., -1, None]
        return scores.masked_fill(scores < kth, NEG_INF)


class TopP(LogitsProcessor):
    """Nucleus sampling (Holtzman et al. 2020): the smallest set with probability >= p."""

    def __init__(self, p: float, min_keep: int = 1) -> None:
        _check(0.0 < p <= 1.0, f"decoding.top_p={p} must be in (0, 1]; 0.9 or 0.95 are usual (null = off)")
        self.p, self.min_keep = p, min_keep

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - self.p)
        remove[..., -self.min_keep :] = False
        return scores.masked_fill(remove.scatter(1, order, remove), NEG_INF)


class MinP(LogitsProcessor):
    """Min-p (Nguyen et al. 2024): drop tokens with p < min_p * max p."""

    def __init__(self, min_p: float, min_keep: int = 1) -> None:
        _check(0.0 <= min_p <= 1.0, f"decoding.min_p={min_p} must be in [0, 1]; 0.05-0.1 are usual (null = off)")
        self.min_p, self.min_keep = min_p, min_keep

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        probs = scores.softmax(dim=-1)
        remove = probs < self.min_p * probs.amax(dim=-1, keepdim=True)
        keep = torch.topk(probs, min(self.min_keep, probs.shape[-1]), dim=-1).indices
        remove = remove.scatter(-1, keep, False)
        return scores.masked_fill(remove, NEG_INF)


class Typical(LogitsProcessor):
    """Locally typical sampling (Meister et al. 2023): tokens closest to the entropy, up to mass p."""

    def __init__(self, mass: float, min_keep: int = 1) -> None:
        _check(0.0 < mass < 1.0, f"decoding.typical_p={mass} must be in (0, 1); 0.2-0.95 are usual (null = off)")
        self.mass, self.min_keep = mass, min_keep

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        logp = scores.log_softmax(dim=-1)
        entropy = -(logp * logp.exp()).nansum(-1, keepdim=True)
        shifted = (-logp - entropy).abs()
        sorted_shifted, order = torch.sort(shifted, descending=False)
        cumulative = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
        last = (cumulative < self.mass).sum(dim=1).clamp(max=scores.shape[-1] - 1)
        remove = sorted_shifted > sorted_shifted.gather(1, last.view(-1, 1))
        remove[..., : self.min_keep] = False
        return scores.masked_fill(remove.scatter(1, order, remove), NEG_INF)


class EpsilonCutoff(LogitsProcessor):
    """Epsilon sampling (Hewitt et al. 2022): drop tokens with p < epsilon."""

    def __init__(self, epsilon: float, min_keep: int = 1) -> None:
        _check(0.0 < epsilon < 1.0, f"decoding.epsilon={epsilon} must be in (0, 1); 3e-4 is usual (null = off)")
        self.epsilon, self.min_keep = epsilon, min_keep

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        remove = scores.softmax(dim=-1) < self.epsilon
        kth = torch.topk(scores, min(self.min_keep, scores.shape[-1]))[0][..., -1, None]
        return scores.masked_fill(remove & (scores < kth), NEG_INF)


class EtaCutoff(LogitsProcessor):
    """Eta sampling (Hewitt et al. 2022): drop p < min(eta, sqrt(eta) * exp(-entropy))."""

    def __init__(self, eta: float, min_keep: int = 1) -> None:
        _check(0.0 < eta < 1.0, f"decoding.eta={eta} must be in (0, 1); 2e-3 is usual (null = off)")
        self.eta, self.min_keep = eta, min_keep

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        probs = scores.softmax(dim=-1)
        entropy = torch.distributions.Categorical(logits=scores).entropy()
        eta = torch.tensor(self.eta, device=scores.device)
        cutoff = torch.min(eta, eta.sqrt() * torch.exp(-entropy))[..., None]
        kth = torch.topk(scores, min(self.min_keep, scores.shape[-1]))[0][..., -1, None]
        return scores.masked_fill((probs < cutoff) & (scores < kth), NEG_INF)


class TopNSigma(LogitsProcessor):
    """Top-n-sigma (Tang et al. 2024): keep logits >= max - n * std, std over the finite logits."""

    def __init__(self, n: float) -> None:
        _check(n > 0, f"decoding.top_n_sigma={n} must be > 0; 1.0 is usual (null = off)")
        self.n = n

    def __call__(self, prefix: Tensor, scores: Tensor) -> Tensor:
        finite = torch.isfinite(scores)
        count = finite.sum(-1, keepdim=True).clamp(min=1)
        values = scores.masked_fill(~finite, 0.0)
        mean = values.sum(-1, keepdim=True) / count
        std = (((values - mean) ** 2).masked_fill(~finite, 0.0).sum(-1, keepdim=True) / count).sqrt()
        top = scores.amax(dim=-1, keepdim=True)
        return scores.masked_fill(scores < top - self.n * std, NEG_INF)


def apply(processors: Sequence[LogitsProcessor], prefix: Tensor, scores: Tensor) -> Tensor:
    for processor in processors:
        scores = processor(prefix, scores)
    return scores


def split_bans(processors: Sequence[LogitsProcessor]) -> tuple[list[LogitsProcessor], list[Ban]]:
    """(the processors before the trailing bans, the trailing bans), e.g. [penalties], [no-repeat, suppress]."""
    cut = len(processors)
    while cut and isinstance(processors[cut - 1], Ban):
        cut -= 1
    return list(processors[:cut]), [p for p in processors[cut:] if isinstance(p, Ban)]
