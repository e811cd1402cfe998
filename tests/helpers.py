"""Test helpers: a model briefly trained on a toy task, so decoding has real uncertainty."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from seqlab.constants import BOS_ID, EOS_ID, PAD_ID
from seqlab.model import ModelConfig, Seq2SeqTransformer
from seqlab.model.onednn import onednn_available
from seqlab.train.levers import step_loss
from seqlab.train.losses import label_smoothed_nll

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN linear")


def toy_batch(g: torch.Generator, n: int, vocab: int, max_len: int = 9) -> tuple[torch.Tensor, ...]:
    """Sources of random tokens + EOS, right-padded; targets are the reversed sources."""
    lengths = torch.randint(1, max_len, (n,), generator=g)
    ids = torch.randint(4, vocab, (n, max_len + 1), generator=g)
    pos = torch.arange(max_len + 1)[None, :]
    pad = pos > lengths[:, None]
    ids = ids.masked_fill(pad, PAD_ID)
    ids[torch.arange(n), lengths] = EOS_ID
    tgt = torch.stack([torch.cat([r[:k].flip(0), r[k:]]) for r, k in zip(ids, lengths.tolist(), strict=True)])
    return ids, pad, tgt


def trained_toy_model(steps: int = 60, vocab: int = 40, seed: int = 0) -> Seq2SeqTransformer:
    """A tiny model trained for a few steps to reverse its input: varied lengths, uncertain choices."""
    torch.manual_seed(seed)
    cfg = ModelConfig(src_vocab_size=vocab, d_model=32, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=64,
                      tie_embeddings="decoder",
                      dropout=0.0, max_positions=64)
    model = Seq2SeqTransformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        src, pad, tgt = toy_batch(g, 32, vocab)
        tgt_in = torch.cat([torch.full_like(tgt[:, :1], BOS_ID), tgt[:, :-1]], 1)
        loss, _, n = label_smoothed_nll(model(src, pad, tgt_in), tgt, 0.0)
        opt.zero_grad()
        (loss / n).backward()
        opt.step()
    return model.eval()


def assert_first_hypotheses_equal(ours, hf_sequences: torch.Tensor, pad_id: int) -> list[int]:
    """Each source's best seqlab hypothesis equals HF generate's row (after its start token, then only
    padding); returns the hypotheses' lengths."""
    lengths = []
    for i in range(hf_sequences.shape[0]):
        n = int(ours.lengths[i, 0])
        expected = hf_sequences[i, 1:].tolist()
        assert ours.sequences[i, 0, :n].tolist() == expected[:n]
        assert all(t == pad_id for t in expected[n:])
        lengths.append(n)
    return lengths


WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "house", "red", "blue", "green", "tree", "ran", "fast", "slow"]


def corpus(n: int = 120, keep: float = 0.6, seed: int = 0,
           refs: list[str] | None = None) -> tuple[list[str], list[str]]:
    """References (random words, or the given ones) and a hypothesis keeping each word with probability `keep`."""
    rng = random.Random(seed)
    refs = refs or [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(n)]
    hyps = [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split()) for r in refs]
    return refs, hyps


def text_systems(tmp_path: Path) -> dict[str, Path]:
    """Reference files (two) and two systems' hypotheses, the second better, as plain-text files."""
    refs, base = corpus(keep=0.6, seed=1)
    _, better = corpus(keep=0.75, seed=2, refs=refs)
    _, ref2 = corpus(keep=0.8, seed=3, refs=refs)
    out = {}
    for name, lines in {"ref": refs, "ref2": ref2, "base": base, "better": better}.items():
        out[name] = tmp_path / f"{name}.txt"
        out[name].write_text("\n".join(lines) + "\n")
    return out


def tiny_model() -> Seq2SeqTransformer:
    """An untrained 2+2-layer model without dropout (training steps compared update for update)."""
    torch.manual_seed(0)
    return Seq2SeqTransformer(ModelConfig(src_vocab_size=30, d_model=16, n_heads=2, encoder_layers=2,
                                          decoder_layers=2, d_ff=32, dropout=0.0, max_positions=64))


def mixed_batch(rows: int, src_len: int, tgt_len: int, seed: int) -> dict[str, torch.Tensor]:
    """Sources and targets of mixed lengths up to the given ones, right-padded, ending in EOS."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((rows, src_len), PAD_ID)
    tgt = torch.full((rows, tgt_len), PAD_ID)
    for i in range(rows):
        s = int(torch.randint(2, src_len + 1, (1,), generator=g))
        t = int(torch.randint(2, tgt_len + 1, (1,), generator=g))
        src[i, :s] = torch.randint(4, 30, (s,), generator=g)
        src[i, s - 1] = EOS_ID
        tgt[i, :t] = torch.randint(4, 30, (t,), generator=g)
        tgt[i, t - 1] = EOS_ID
    tgt_in = torch.cat([torch.full((rows, 1), BOS_ID), tgt[:, :-1]], 1)
    tgt_in[tgt_in == EOS_ID] = PAD_ID  # the EOS is the last target; what follows it is padding
    return {"src": src, "pad": src == PAD_ID, "tgt_in": tgt_in, "tgt": tgt}


def summed_loss(model, b):
    """The label-smoothed (0.1) loss summed over a batch's target tokens, and their count."""
    loss, _, n = step_loss(model, b["src"], b["pad"], b["tgt_in"], b["tgt"], 0.1)
    return loss, n


def mean_loss(model):
    """(batch) -> the loss per target token: a training step's arithmetic."""
    def mean(b):
        total, n = summed_loss(model, b)
        return total / n
    return mean
