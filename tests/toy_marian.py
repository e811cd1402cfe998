"""A small Marian model, briefly trained, and a batch of mixed-length sources (torch + transformers only).

Shared by the interop tests and by tests/fixtures/diverse_beam/make_fixture.py, which runs it under an
older transformers to record that version's outputs.
"""

from __future__ import annotations

import torch
import transformers

PAD, EOS, VOCAB = 59, 0, 60


def marian(seed: int, train_steps: int = 0, **overrides) -> transformers.MarianMTModel:
    """A small random Marian; with train_steps, briefly trained to reverse its input.

    A partly trained model gives varied lengths and real uncertainty (beam search
    then differs from greedy), which random weights do not.
    """
    torch.manual_seed(seed)
    cfg = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
               pad_token_id=PAD, decoder_start_token_id=PAD, eos_token_id=EOS, forced_eos_token_id=None,
               scale_embedding=True, activation_function="swish", dropout=0.0)
    cfg.update(overrides)
    model = transformers.MarianMTModel(transformers.MarianConfig(**cfg))
    with torch.no_grad():  # random init leaves the output bias at zero; make it count
        model.final_logits_bias.normal_(0, 0.5)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(train_steps):
        ids, pad = batch(g=g, b=32)
        rev = torch.stack([torch.cat([r[~p][:-1].flip(0), r[~p][-1:], r[p]]) for r, p in zip(ids, pad, strict=True)])
        labels = rev.masked_fill(pad, -100)
        loss = model(input_ids=ids, attention_mask=(~pad).long(), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def batch(seed: int = 0, b: int = 4, s: int = 9, g: torch.Generator | None = None):
    """(ids, pad) of b sources of at most s tokens, each ending in EOS; pad is True at padding."""
    g = g or torch.Generator().manual_seed(seed)
    ids = torch.randint(1, PAD, (b, s), generator=g)
    lengths = torch.tensor([s, s - 3, 2, s - 1]) if b == 4 else torch.randint(2, s + 1, (b,), generator=g)
    pad = torch.arange(s)[None, :] >= lengths[:, None]  # mixed source lengths
    ids[pad] = PAD
    ids[torch.arange(b), lengths - 1] = EOS
    return ids, pad


def hf_generate(model, ids, pad, **kw):
    """transformers' generate as the interop tests call it: Marian's own ban of PAD, scores returned."""
    return model.generate(input_ids=ids, attention_mask=(~pad).long(), bad_words_ids=[[PAD]],
                          return_dict_in_generate=True, output_scores=True, do_sample=False, **kw)
