"""Every Hugging Face family seqlab imports computes what transformers computes: teacher-forced log-probs
within 1e-4 in fp32 on a padded batch, from the folder save_pretrained writes (whole, sharded or pickled)."""

from __future__ import annotations

import datetime

import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors.torch import load_file, save_file  # noqa: E402

from seqlab.interop.catalog import model_config  # noqa: E402
from seqlab.interop.families import InteropError  # noqa: E402
from seqlab.interop.hf import from_state  # noqa: E402
from seqlab.interop.hf_folder import read_json, read_weights, resolve_folder  # noqa: E402
from tests.hf_families import FAMILIES, batch, build, save, targets  # noqa: E402


def imported(folder):
    return from_state(read_json(folder / "config.json"), read_weights(folder), str(folder))


def hf_logprobs(hf, ids, pad, tgt):
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=(~pad).long(), decoder_input_ids=tgt)
    return torch.log_softmax(out.logits, -1)


@pytest.mark.parametrize("name", FAMILIES)
def test_teacher_forced_logprobs_equal_transformers(name, tmp_path):
    hf = build(name)
    ours = imported(save(hf, tmp_path / name))
    ids, pad = batch(name)
    tgt = targets(name)
    expected = hf_logprobs(hf, ids, pad, tgt)
    with torch.no_grad():
        got = torch.log_softmax(ours(ids, pad, tgt), -1)
    assert (got - expected).abs().max() < 1e-4
    with torch.no_grad():  # a padded row equals the source alone
        alone = torch.log_softmax(ours(ids[1:2, :3], pad[1:2, :3], tgt[1:2]), -1)
    assert (alone - got[1:2]).abs().max() < 1e-4


def test_the_variants_each_family_is(tmp_path):
    cfgs = {name: model_config(build(name).config.to_dict()) for name in FAMILIES}
    assert (cfgs["bart"].norm_position, cfgs["bart"].positions, cfgs["bart"].position_offset) == ("post", "learned", 2)
    assert cfgs["bart"].layernorm_embedding and cfgs["bart"].output_bias and cfgs["bart"].activation == "gelu"
    assert cfgs["mbart"].use_final_norm and cfgs["mbart"].layernorm_embedding and cfgs["mbart"].scale_embedding
    assert (cfgs["pegasus"].sinusoid_layout, cfgs["pegasus"].position_offset) == ("marian", 0)
    assert (cfgs["m2m_100"].sinusoid_layout, cfgs["m2m_100"].position_offset) == ("fairseq", 2)
    assert not cfgs["m2m_100"].output_bias
    t5 = cfgs["t5_v1.0"]
    assert (t5.norm, t5.bias, t5.scale_attention, t5.d_head, t5.rescale_output) == ("rmsnorm", False, False, 6, True)
    v11 = cfgs["t5_v1.1"]
    assert (v11.activation, v11.gated_ffn, v11.rescale_output) == ("gelu_tanh", True, False)
    assert (cfgs["t5_deep_decoder"].encoder_layers, cfgs["t5_deep_decoder"].decoder_layers) == (2, 3)
    assert v11.bos_id == v11.pad_id == 0


def test_a_saved_head_unlike_the_embeddings_stays_untied(tmp_path):
    """Flan-T5 ships an lm_head of its own; transformers then keeps it untied, and so does seqlab."""
    hf = build("t5_v1.1")
    folder = save(hf, tmp_path / "flan")
    state = load_file(folder / "model.safetensors")
    state["lm_head.weight"] = torch.randn_like(state["shared.weight"])
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    hf = transformers.T5ForConditionalGeneration.from_pretrained(folder).eval()
    assert not torch.equal(hf.lm_head.weight, hf.shared.weight)
    ours = imported(folder)
    assert ours.cfg.tie_embeddings == "inputs"
    ids, pad = batch("t5_v1.1")
    tgt = targets("t5_v1.1")
    with torch.no_grad():
        assert (torch.log_softmax(ours(ids, pad, tgt), -1) - hf_logprobs(hf, ids, pad, tgt)).abs().max() < 1e-4


def test_sharded_and_pickled_weights_load_the_same(tmp_path):
    hf = build("bart")
    whole = read_weights(save(hf, tmp_path / "whole"))
    sharded_folder = save(hf, tmp_path / "sharded", max_shard_size="20KB")
    assert (sharded_folder / "model.safetensors.index.json").is_file()
    sharded = read_weights(sharded_folder)
    pickled_folder = tmp_path / "pickled"
    pickled_folder.mkdir()
    torch.save(dict(whole), pickled_folder / "pytorch_model.bin")
    pickled = read_weights(pickled_folder)
    assert set(whole) == set(sharded) == set(pickled)
    assert all(torch.equal(whole[k], sharded[k]) and torch.equal(whole[k], pickled[k]) for k in whole)


def test_a_pickle_with_code_is_refused(tmp_path):
    folder = tmp_path / "evil"
    folder.mkdir()
    torch.save({"w": torch.zeros(1), "f": datetime.date(2020, 1, 1)}, folder / "pytorch_model.bin")
    with pytest.raises(InteropError, match="weights_only=True"):
        read_weights(folder)


@pytest.mark.parametrize(("config", "says"), [
    ({"model_type": "mixtral"}, "mixture-of-experts"),
    ({"model_type": "gpt2"}, "no 'n_embd', which a gpt2 config.json has"),
    ({"model_type": "bloom"}, "not a family seqlab imports"),
    ({"model_type": "led", "is_encoder_decoder": True}, "Longformer"),
    ({"model_type": "prophetnet", "is_encoder_decoder": True}, "n-stream"),
    ({**build("bart").config.to_dict(), "activation_function": "quick_gelu"}, "activation_function"),
    ({**build("bart").config.to_dict(), "decoder_ffn_dim": 64}, "decoder_ffn_dim"),
])
def test_unsupported_models_are_refused_naming_the_key(config, says):
    with pytest.raises(InteropError, match=says):
        model_config(config)


def test_weights_that_do_not_match_the_config_are_refused(tmp_path):
    folder = save(build("mbart"), tmp_path / "m")
    state = read_weights(folder)
    del state["model.decoder.layers.1.fc2.weight"]
    with pytest.raises(InteropError, match=r"model\.decoder\.layers\.1\.fc2\.weight"):
        from_state(read_json(folder / "config.json"), state, str(folder))


def test_hub_names_resolve_in_the_local_cache_only(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot = tmp_path / "models--org--tiny" / "snapshots" / "abc123"
    save(build("pegasus"), snapshot)
    (tmp_path / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "models--org--tiny" / "refs" / "main").write_text("abc123")
    assert resolve_folder("org/tiny") == snapshot
    with pytest.raises(InteropError, match="not in the local Hugging Face cache"):
        resolve_folder("org/absent")
