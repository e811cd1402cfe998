"""Log-probability summaries of hypotheses and references."""

from __future__ import annotations

import math
from collections.abc import Sequence

from seqlab.metrics import keys as K


def logprob_summary(token_logprobs: Sequence[Sequence[float]], prefix: str) -> dict[str, float]:
    """Mean per-token and mean per-sequence log-prob (natural log); `prefix` is 'hyp' or 'ref'."""
    total = sum(sum(seq) for seq in token_logprobs)
    tokens = sum(len(seq) for seq in token_logprobs)
    per_token = total / max(tokens, 1)
    per_seq = total / max(len(token_logprobs), 1)
    if prefix == "hyp":
        mean_tokens = tokens / max(len(token_logprobs), 1)
        return {K.HYP_TOKEN_LOGPROB: per_token, K.HYP_SEQ_LOGPROB: per_seq, K.HYP_TOKENS: mean_tokens}
    return {K.REF_TOKEN_LOGPROB: per_token, K.REF_SEQ_LOGPROB: per_seq, K.REF_PPL: math.exp(-per_token)}
