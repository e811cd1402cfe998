"""The text-generation chapter's views on a causal LM (a tiny random GPT-2 imported exactly): the step table is
greedy search's own steps, each sequence log-prob is the model's score of that output, the figures are
written."""

from __future__ import annotations

import pytest
import torch

from seqlab.decoding import DecodingConfig, generate, score
from seqlab.inference.chapter import best, next_token_logits, step_table, write_figures
from seqlab.inference.inspection import trace
from seqlab.interop.hf import from_hf

transformers = pytest.importorskip("transformers")


class Pieces:
    """A tokenizer stand-in over ids: text is the ids, pieces are `t<id>`."""

    eos_id = 2

    def encode_source(self, texts, threads=1):
        return [[int(w) for w in t.split()] for t in texts]

    def id_to_piece(self, i, side="tgt"):
        return f"t{int(i)}"

    def decode_target(self, ids):
        ids = list(ids)
        return " ".join(str(i) for i in (ids[: ids.index(2)] if 2 in ids else ids))


def gpt2():
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=4,
                                                              n_positions=64, bos_token_id=1, eos_token_id=2)).eval()
    return from_hf(hf)


def test_the_chapters_table_log_probs_and_figures(tmp_path):
    model, tok, prompt = gpt2(), Pieces(), "5 9 11 7"
    cfg = DecodingConfig(max_length=6, suppress_special=False)
    steps = trace(model, tok, prompt, cfg, k=5)
    src = torch.tensor([[5, 9, 11, 7]])
    pad = torch.zeros_like(src, dtype=torch.bool)
    out = generate(model, src, pad, cfg)
    assert [s.chosen_id for s in steps] == out.sequences[0, 0, : out.lengths[0, 0]].tolist()
    table = step_table(steps)
    assert table.count("\n") == len(steps) and "top-5" in table
    for decoding in (cfg, DecodingConfig(method="beam", num_beams=3, max_length=6, suppress_special=False)):
        hyp = best(model, tok, prompt, decoding)
        chosen = generate(model, src, pad, decoding)
        n = int(chosen.lengths[0, 0])
        ids = chosen.sequences[0, 0, :n][None]
        assert hyp.logprob == pytest.approx(float(score(model, src, pad, ids).sum()), abs=1e-4)
    logits = next_token_logits(model, tok, prompt)
    assert torch.allclose(torch.softmax(logits, -1)[steps[0].chosen_id], torch.tensor(steps[0].probability))
    paths = write_figures(model, tok, prompt, tmp_path)
    assert [p.name for p in paths] == ["temperature.png", "truncation.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
