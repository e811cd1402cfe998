"""The decoder-only Hugging Face families, exact: tiny random GPT-2, Llama (grouped-query, heads of their own
size), Mistral and Qwen2 (q/k/v biases; tied and untied heads) built from each family's config class. seqlab's
per-token log-probs equal transformers' within 1e-4, left-padded and alone; greedy and beam search equal
`generate` token for token; the export goes back to the family with the same logits."""

from __future__ import annotations

import pytest
import torch

from seqlab.data.sequences import pad_right
from seqlab.decoding import DecodingConfig, generate, score
from seqlab.interop.hf import from_hf, to_hf

transformers = pytest.importorskip("transformers")
VOCAB = 64
LLAMA = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0, rope_theta=500.0)
FAMILIES = {
    "gpt2": (transformers.GPT2LMHeadModel, transformers.GPT2Config,
             dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig,
              dict(LLAMA, num_key_value_heads=2, head_dim=12)),
    "llama_mha_tied": (transformers.LlamaForCausalLM, transformers.LlamaConfig, dict(LLAMA, tie_word_embeddings=True)),
    "mistral": (transformers.MistralForCausalLM, transformers.MistralConfig,
                dict(LLAMA, num_key_value_heads=1, sliding_window=None)),
    "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config,
              dict(LLAMA, num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen2_untied": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config,
                     dict(LLAMA, num_key_value_heads=2, tie_word_embeddings=False)),
    # Phi-3's fused projections; Phi-4-mini's partial RoPE and a sliding window
    "phi3": (transformers.Phi3ForCausalLM, transformers.Phi3Config, dict(LLAMA, num_key_value_heads=2, pad_token_id=0)),
    "phi3_partial_window": (transformers.Phi3ForCausalLM, transformers.Phi3Config,
                            dict(LLAMA, num_key_value_heads=4, partial_rotary_factor=0.5, sliding_window=3,
                                 pad_token_id=0)),
    # Gemma 2: sandwich norms, 1 + w gains, soft caps, local/global layers; Gemma 3: q/k norms, two RoPE bases
    "gemma2": (transformers.Gemma2ForCausalLM, transformers.Gemma2Config,
               dict(LLAMA, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=12, sliding_window=3,
                    attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    "gemma3": (transformers.Gemma3ForCausalLM, transformers.Gemma3TextConfig,
               dict(LLAMA, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8, sliding_window=3,
                    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 30.0}},
                    layer_types=["sliding_attention", "full_attention"])),
    # sliding windows shorter than the prompts and continuations: every layer (Mistral), the second only (Qwen2)
    "mistral_window": (transformers.MistralForCausalLM, transformers.MistralConfig,
                       dict(LLAMA, num_key_value_heads=1, sliding_window=3)),
    "qwen2_window": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config,
                     dict(LLAMA, num_key_value_heads=2, use_sliding_window=True, sliding_window=3,
                          max_window_layers=1)),
}


def build(name: str):
    model_cls, config_cls, config = FAMILIES[name]
    torch.manual_seed(0)
    model = model_cls(config_cls(**config)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # biases and norms off their init
    return model


def prompts(seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (6, 2, 4)]


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's batch: left padding, its attention mask."""
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def hf_logprobs(hf, rows: list[list[int]], cont: list[list[int]], pad: int) -> list[torch.Tensor]:
    """Per row, transformers' log-probs of `cont` after the prompt, in one left-padded batch."""
    ids, mask = left_padded([p + c for p, c in zip(rows, cont, strict=True)], pad)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # what generate passes under left padding
    with torch.no_grad():
        logits = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
    lps = torch.log_softmax(logits, dim=-1)
    out = []
    for i, c in enumerate(cont):
        n = len(c)
        out.append(lps[i, -n - 1 : -1].gather(1, torch.tensor(c)[:, None]).squeeze(1))
    return out


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_token_logprobs_equal_transformers_left_padded_and_alone(name):
    hf = build(name)
    ours = from_hf(hf)
    assert ours.cfg.architecture == "decoder_only" and ours.cfg.start == "prompt"
    rows, pad = prompts(), ours.cfg.pad_id
    cont = [torch.randint(3, VOCAB, (5,), generator=torch.Generator().manual_seed(i)).tolist() for i in range(3)]
    src, src_pad = pad_right(rows, pad)
    tgt, _ = pad_right(cont, pad)
    got = score(ours, src, src_pad, tgt)
    batched = hf_logprobs(hf, rows, cont, pad)
    for i in range(3):
        alone = hf_logprobs(hf, rows[i : i + 1], cont[i : i + 1], pad)[0]
        assert torch.allclose(got[i], batched[i], atol=1e-4), (i, (got[i] - batched[i]).abs().max())
        assert torch.allclose(got[i], alone, atol=1e-4), i


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("beams", [1, 3])
def test_greedy_and_beam_equal_generate(name, beams):
    hf = build(name)
    ours = from_hf(hf)
    pad, eos = ours.cfg.pad_id, ours.cfg.eos_id
    for i, row in enumerate(prompts(1)):  # one prompt at a time: transformers' own batch pads its processors
        ids = torch.tensor([row])
        with torch.no_grad():
            theirs = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                                 do_sample=False, num_beams=beams, early_stopping=True, length_penalty=1.0,
                                 pad_token_id=pad, eos_token_id=eos)[0, len(row):].tolist()
        theirs = theirs[: theirs.index(eos) + 1] if eos in theirs else theirs
        cfg = DecodingConfig(method="beam" if beams > 1 else "greedy", num_beams=beams, max_length=8,
                             suppress_special=False)
        out = generate(ours, torch.tensor([row]), torch.zeros(1, len(row), dtype=torch.bool), cfg)
        assert out.sequences[0, 0, : out.lengths[0, 0]].tolist() == theirs, i
    src, src_pad = pad_right(prompts(1), pad)  # seqlab's batch: each prompt's own outputs
    batch = generate(ours, src, src_pad, cfg)
    for i, row in enumerate(prompts(1)):
        alone = generate(ours, torch.tensor([row]), torch.zeros(1, len(row), dtype=torch.bool), cfg)
        assert batch.sequences[i, 0, : batch.lengths[i, 0]].tolist() == \
            alone.sequences[0, 0, : alone.lengths[0, 0]].tolist()


PROMPT_READERS = [dict(repetition_penalty=1.3), dict(repetition_penalty=0.7), dict(no_repeat_ngram_size=2),
                  dict(no_repeat_ngram_size=1), dict(bad_words_ids=[[7], [9, 11]]),
                  dict(sequence_bias=[[[7], 2.0], [[9, 11], -3.0]]), dict(min_new_tokens=4)]


@pytest.mark.parametrize("setting", PROMPT_READERS, ids=[repr(s) for s in PROMPT_READERS])
@pytest.mark.parametrize("beams", [1, 3])
def test_processors_read_the_prompt_as_hugging_faces_do(setting, beams):
    """HF's decoder-only processors see the prompt in input_ids; seqlab's see it too, each prompt's own tokens
    (so a batch equals each prompt alone, as `generate` on one prompt)."""
    hf = build("gpt2")
    ours = from_hf(hf)
    eos = ours.cfg.eos_id
    hf_setting = dict(setting)
    if "sequence_bias" in hf_setting:
        hf_setting["sequence_bias"] = [[list(ids), b] for ids, b in hf_setting["sequence_bias"]]
    mine = {("min_length" if k == "min_new_tokens" else k): v for k, v in setting.items()}
    cfg = DecodingConfig(method="beam" if beams > 1 else "greedy", num_beams=beams, max_length=10,
                         suppress_special=False, **mine)
    rows = [[7, 9, 11, 7, 9], [11, 9], [9, 11, 9, 11, 7, 7, 9]]  # prompts that repeat what the settings read
    for row in rows:
        ids = torch.tensor([row])
        with torch.no_grad():
            theirs = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=10,
                                 do_sample=False, num_beams=beams, early_stopping=True, length_penalty=1.0,
                                 pad_token_id=eos, eos_token_id=eos, **hf_setting)[0, len(row):].tolist()
        theirs = theirs[: theirs.index(eos) + 1] if eos in theirs else theirs
        out = generate(ours, ids, torch.zeros_like(ids, dtype=torch.bool), cfg)
        assert out.sequences[0, 0, : out.lengths[0, 0]].tolist() == theirs, row
    src, pad = pad_right(rows, eos)
    batch = generate(ours, src, pad, cfg)
    for i, row in enumerate(rows):
        alone = generate(ours, torch.tensor([row]), torch.zeros(1, len(row), dtype=torch.bool), cfg)
        assert batch.sequences[i, 0, : batch.lengths[i, 0]].tolist() == \
            alone.sequences[0, 0, : alone.lengths[0, 0]].tolist()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_export_goes_back_to_the_family(name):
    hf = build(name)
    back = to_hf(from_hf(hf), hf.config.model_type)  # the family it came from (Mistral computes as Llama)
    assert type(back).__name__ == type(hf).__name__
    ids = torch.tensor([prompts(2)[0]])
    with torch.no_grad():
        assert torch.allclose(back(input_ids=ids).logits, hf(input_ids=ids).logits, atol=1e-4)


def test_what_seqlab_does_not_compute_is_refused():
    from seqlab.config import ConfigError
    from seqlab.interop.catalog import model_config
    from seqlab.interop.families import InteropError

    llama = transformers.LlamaConfig(**LLAMA).to_dict()
    with pytest.raises(InteropError, match="rope_scaling type 'linear'"):
        model_config({**llama, "rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    with pytest.raises(InteropError, match="mixture-of-experts"):
        model_config({**llama, "model_type": "mixtral"})
    mistral = transformers.MistralConfig(**dict(LLAMA, num_key_value_heads=4, sliding_window=16)).to_dict()
    from seqlab.interop.hf import from_state

    hf = build("llama")
    fewer = {**hf.config.to_dict(), "num_hidden_layers": 1}  # the folder's weights have two layers
    with pytest.raises(InteropError, match=r"weights are not read by the model config.json describes \(model.layers.1"):
        from_state(fewer, hf.state_dict())
    with pytest.raises(InteropError, match="extra.tensor"):
        from_state(hf.config.to_dict(), {**hf.state_dict(), "extra.tensor": torch.zeros(1)})
    windowed = model_config(mistral)  # the window is attended through, the positions stay the model's
    assert (windowed.sliding_window, windowed.sliding_layers, windowed.max_positions) == (16, None, 64)
    ours = from_hf(build("gpt2"))
    with pytest.raises(ConfigError, match="set decoding.max_length"):
        generate(ours, torch.tensor([[5, 6]]), torch.zeros(1, 2, dtype=torch.bool), DecodingConfig())
    full = generate(ours, torch.full((1, 64), 5), torch.zeros(1, 64, dtype=torch.bool), DecodingConfig(max_length=4))
    assert full.lengths.tolist() == [[1]]  # 64 positions: the last prompt token's, then one new token
    with pytest.raises(ConfigError, match="prompt 0 of the batch leaves no room for a new token"):
        generate(ours, torch.full((1, 65), 5), torch.zeros(1, 65, dtype=torch.bool), DecodingConfig(max_length=4))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_continuations_end_token_is_scored_when_the_model_pads_with_it(name):
    """A family without a pad token pads with its EOS: the EOS that ends a continuation still counts (each row
    cut by its length, not by the padding's id), in a batch of ragged continuations and alone."""
    hf = build(name)
    ours = from_hf(hf)
    rows, pad, eos = prompts(), ours.cfg.pad_id, ours.cfg.eos_id
    cont = [torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(n)).tolist() + [eos]
            for n in (4, 1, 2)]
    src, src_pad = pad_right(rows, pad)
    tgt, _ = pad_right(cont, pad)
    got = score(ours, src, src_pad, tgt)
    for i, c in enumerate(cont):
        theirs = hf_logprobs(hf, rows[i : i + 1], [c], pad)[0]
        assert torch.allclose(got[i, : len(c)], theirs, atol=1e-4), (i, got[i], theirs)
        assert float(got[i, len(c) - 1]) < 0.0  # the end token's own term
        assert not got[i, len(c):].any()  # past the row: nothing
    lengths = torch.tensor([len(c) - 1 for c in cont])  # explicit lengths win: the same rows without their EOS
    cut = score(ours, src, src_pad, tgt, lengths)
    for i, c in enumerate(cont):
        assert torch.equal(cut[i, : len(c) - 1], got[i, : len(c) - 1]) and float(cut[i, len(c) - 1]) == 0.0


@pytest.mark.parametrize("beams", [1, 3])
def test_the_special_token_ban_never_bans_an_imported_models_end_token(beams):
    """suppress_special (on by default) is seqlab's rule for its own models; an imported causal LM bans nothing,
    as `generate`, so its EOS (here also its padding) can end a row: the default decoding equals `generate`."""
    hf = build("gpt2")  # no pad token: pad = EOS
    eos = hf.config.eos_token_id
    with torch.no_grad():  # the tied head's EOS row longer, so that some rows end within the limit
        hf.transformer.wte.weight[eos] *= 3.0
    ours = from_hf(hf)
    assert ours.cfg.pad_id == eos and ours.cfg.unemitted == ()
    ended = 0
    for i, row in enumerate(prompts(3) + prompts(4)):
        ids = torch.tensor([row])
        with torch.no_grad():
            theirs = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                                 do_sample=False, num_beams=beams, early_stopping=True, pad_token_id=eos,
                                 eos_token_id=eos)[0, len(row):].tolist()
        theirs = theirs[: theirs.index(eos) + 1] if eos in theirs else theirs
        ended += eos in theirs
        cfg = DecodingConfig(method="beam" if beams > 1 else "greedy", num_beams=beams, max_length=12)
        out = generate(ours, ids, torch.zeros(1, len(row), dtype=torch.bool), cfg)
        assert out.sequences[0, 0, : out.lengths[0, 0]].tolist() == theirs, i
    assert ended, "no prompt ended in EOS: the test would not see the ban"
