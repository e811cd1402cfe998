"""Token-id sequences: the one truncation rule and the one right-padding, shared by training,
evaluation and the benchmark."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from seqlab.constants import EOS_ID


def truncate(ids: list[int], max_len: int, eos_id: int = EOS_ID) -> list[int]:
    """At most `max_len` ids: the first max_len - 1 and the final EOS."""
    return ids if len(ids) <= max_len else ids[: max_len - 1] + [eos_id]


def pad_right(seqs: Sequence[Sequence[int] | np.ndarray], pad_id: int, width: int | None = None
              ) -> tuple[Tensor, Tensor]:
    """(B, T) long ids padded on the right with `pad_id`, and the (B, T) bool mask, True at padding."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    width = int(lengths.max()) if width is None else width
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, : len(s)] = torch.as_tensor(np.asarray(s, dtype=np.int64))
    return ids, torch.arange(width)[None, :] >= lengths[:, None]
