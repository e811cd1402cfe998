"""seqlab's searches on every imported family, with a generation_config.json like the family's own on the hub,
equal transformers' `generate` token for token: greedy and beam search, with num_beams, length_penalty,
no_repeat_ngram_size, min/max length, early stopping, forced BOS/EOS, bad_words_ids and the decoder start."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.decoding import generate  # noqa: E402
from seqlab.interop.generation import decoding_of  # noqa: E402
from seqlab.interop.hf import from_state  # noqa: E402
from seqlab.interop.hf_folder import read_json, read_weights  # noqa: E402
from tests.hf_families import batch, build, ids_of, save  # noqa: E402

# settings after the families' own generation_config.json (bart-large-cnn, mbart-large-50-many-to-many,
# pegasus-cnn_dailymail, m2m100_418M, t5-small's summarize task, opus-mt), at the tiny models' sizes
SETTINGS = {
    "bart": dict(num_beams=4, length_penalty=2.0, max_length=14, min_length=5, no_repeat_ngram_size=3,
                 early_stopping=True, forced_bos_token_id=0, forced_eos_token_id=2),
    "mbart": dict(num_beams=3, max_length=12, forced_bos_token_id=55, forced_eos_token_id=2, early_stopping=True),
    "pegasus": dict(num_beams=4, length_penalty=0.8, max_length=16, min_length=3,
                    sequence_bias=[[[7], 3.0], [[8, 9], -2.0]]),
    "m2m_100": dict(num_beams=3, max_length=12, forced_bos_token_id=57, early_stopping="never",
                    length_penalty=1.2),
    "t5_v1.0": dict(num_beams=4, max_length=12, no_repeat_ngram_size=2, early_stopping=False,
                    bad_words_ids=[[7], [8, 9]]),
    "t5_v1.1": dict(num_beams=2, max_new_tokens=9, min_new_tokens=2, suppress_tokens=[4, 5]),
    "marian": dict(num_beams=4, max_length=16, bad_words_ids=[[59]], renormalize_logits=True),
}


def hf_and_ours(name, tmp_path, settings):
    """The family's folder with these settings in its generation_config.json (over what save_pretrained
    writes from the model's config), loaded by transformers and by seqlab."""
    folder = save(build(name), tmp_path / name)
    written = read_json(folder / "generation_config.json")
    (folder / "generation_config.json").write_text(json.dumps({**written, **settings}))
    hf = type(build(name)).from_pretrained(folder).eval()
    ours = from_state(read_json(folder / "config.json"), read_weights(folder), str(folder))
    return hf, ours, decoding_of(read_json(folder / "generation_config.json"))


def tokens(row: torch.Tensor, pad: int, eos: int) -> list[int]:
    out = []
    for t in row.tolist():
        out.append(t)
        if t == eos:
            break
    while out and out[-1] == pad:
        out.pop()
    return out


@pytest.mark.parametrize("name", SETTINGS)
@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_generate_equals_transformers(name, method, tmp_path):
    settings = dict(SETTINGS[name])
    if method == "greedy":
        settings.update(num_beams=1, early_stopping=False)
    hf, ours, decoding = hf_and_ours(name, tmp_path, settings)
    assert decoding.method == method
    pad, eos, _ = ids_of(name)
    ids, mask = batch(name, seed=2, b=3, s=7)
    with torch.no_grad():
        expected = hf.generate(input_ids=ids, attention_mask=(~mask).long())  # the folder's own defaults
    got = generate(ours, ids, mask, decoding)
    for b in range(ids.shape[0]):
        assert tokens(got.sequences[b, 0], pad, eos) == tokens(expected[b, 1:], pad, eos), (name, method, b)
        alone = generate(ours, ids[b : b + 1, : int((~mask[b]).sum())], mask[b : b + 1, : int((~mask[b]).sum())],
                         decoding)
        assert tokens(alone.sequences[0, 0], pad, eos) == tokens(got.sequences[b, 0], pad, eos)


def test_generation_config_keys_map_as_transformers_reads_them(tmp_path):
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "generation_config.json").write_text(json.dumps({"decoder_start_token_id": 2, "num_beams": 4,
                                                               "forced_bos_token_id": 0, "bad_words_ids": [[1]],
                                                               "suppress_tokens": [5], "renormalize_logits": True}))
    cfg = decoding_of(read_json(folder / "generation_config.json"))
    assert (cfg.max_length, cfg.forced_bos_token_id, cfg.bad_words_ids, cfg.suppress_tokens) == (20, 0, [[1]], [5])
    assert cfg.renormalize_logits and not cfg.suppress_special
    assert decoding_of({"max_length": 30}).max_length == 29
