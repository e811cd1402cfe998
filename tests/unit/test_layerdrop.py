"""LayerDrop (model.encoder_layerdrop / decoder_layerdrop): a training forward skips the layers Hugging Face's
model skips under the same seed (M2M100's config sets 0.05), evaluation runs every layer, and what cannot be
honoured is refused by name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from seqlab.config import ConfigError
from seqlab.model import ModelConfig, build_model
from seqlab.model.dropout import dropped_layers

SMALL = dict(src_vocab_size=40, d_model=16, n_heads=2, encoder_layers=4, decoder_layers=4, d_ff=32, dropout=0.0,
             max_positions=32)


def test_the_draw_is_seeded_none_in_evaluation_and_about_p_in_training():
    assert dropped_layers(6, 0.5, training=False) == [False] * 6
    assert dropped_layers(6, 0.0, training=True) == [False] * 6
    torch.manual_seed(3)
    first = dropped_layers(6, 0.5, training=True)
    torch.manual_seed(3)
    assert dropped_layers(6, 0.5, training=True) == first
    torch.manual_seed(0)
    share = sum(sum(dropped_layers(10, 0.3, training=True)) for _ in range(2000)) / 20000
    assert abs(share - 0.3) < 0.01


def batch():
    g = torch.Generator().manual_seed(1)
    ids, tgt = torch.randint(4, 40, (3, 7), generator=g), torch.randint(4, 40, (3, 5), generator=g)
    return ids, torch.zeros_like(ids, dtype=torch.bool), tgt


def test_a_training_forward_is_the_model_without_the_drawn_layers():
    torch.manual_seed(0)
    model = build_model(ModelConfig(**SMALL, encoder_layerdrop=0.5, decoder_layerdrop=0.4)).train()
    ids, pad, tgt = batch()
    for seed in range(4):
        torch.manual_seed(seed)
        enc, dec = (torch.rand(4) < 0.5).tolist(), (torch.rand(4) < 0.4).tolist()  # the draws, in their order
        pruned = build_model(ModelConfig(**SMALL)).train()
        pruned.load_state_dict(model.state_dict())
        pruned.encoder_layers = nn.ModuleList(m for m, skip in zip(model.encoder_layers, enc, strict=True) if not skip)
        pruned.decoder_layers = nn.ModuleList(m for m, skip in zip(model.decoder_layers, dec, strict=True) if not skip)
        torch.manual_seed(seed)
        assert torch.equal(model(ids, pad, tgt), pruned(ids, pad, tgt)), seed
    model.eval()
    plain = build_model(ModelConfig(**SMALL)).eval()
    plain.load_state_dict(model.state_dict())
    assert torch.equal(model(ids, pad, tgt), plain(ids, pad, tgt))  # evaluation: every layer


def test_a_one_stack_model_drops_its_decoder_layers_and_has_no_encoder_to_drop():
    one = dict(SMALL, architecture="decoder_only", encoder_layers=0)
    torch.manual_seed(0)
    model = build_model(ModelConfig(**one, decoder_layerdrop=0.5)).train()
    plain = build_model(ModelConfig(**one)).train()
    plain.load_state_dict(model.state_dict())
    ids, pad, tgt = batch()
    torch.manual_seed(2)
    kept = [m for m, skip in zip(model.decoder_layers, (torch.rand(4) < 0.5).tolist(), strict=True) if not skip]
    assert 0 < len(kept) < 4  # the seed drops some, not all
    plain.decoder_layers = nn.ModuleList(kept)
    torch.manual_seed(2)
    assert torch.equal(model(ids, pad, tgt), plain(ids, pad, tgt))
    with pytest.raises(ConfigError, match="encoder_layerdrop=0.1 with model.architecture=decoder_only"):
        ModelConfig(**one, encoder_layerdrop=0.1)


@pytest.mark.parametrize("key", ["encoder_layerdrop", "decoder_layerdrop"])
def test_a_probability_outside_0_1_is_refused(key):
    for bad in (1.0, -0.1):
        with pytest.raises(ConfigError, match=f"model.{key}={bad} must be in"):
            ModelConfig(**SMALL, **{key: bad})


def test_training_on_several_processes_is_refused_before_a_step():
    from seqlab.train.config import OptimConfig
    from seqlab.train.module import Seq2SeqModule

    module = Seq2SeqModule(ModelConfig(**SMALL, encoder_layerdrop=0.05), OptimConfig())
    module._trainer = SimpleNamespace(world_size=2)
    with pytest.raises(ConfigError, match=r"model.encoder_layerdrop=0.05: each of the 2 processes"):
        module.on_fit_start()
    module._trainer = SimpleNamespace(world_size=1)
    module.on_fit_start()


def test_hugging_faces_model_skips_the_same_layers_under_the_same_seed(tmp_path):
    """M2M100 (LayerDrop 0.05 in its default config) at 0.5 here: the imported model's training forward equals
    transformers' under every seed tried, the config's keys read and written back."""
    transformers = pytest.importorskip("transformers")
    from seqlab.interop.hf import from_state
    from seqlab.interop.hf_export import write_family
    from seqlab.interop.hf_folder import read_json, read_weights
    from tests.hf_families import FAMILIES, build, save, targets
    from tests.hf_families import batch as family_batch

    assert transformers.M2M100Config().encoder_layerdrop == 0.05
    dropping = dict(FAMILIES["m2m_100"][2], encoder_layers=4, decoder_layers=4, encoder_layerdrop=0.5,
                              decoder_layerdrop=0.5)
    hf = transformers.M2M100ForConditionalGeneration(transformers.M2M100Config(**dropping))
    hf.load_state_dict(build("m2m_100").state_dict(), strict=False)
    folder = save(hf, tmp_path / "m2m")
    ours = from_state(read_json(folder / "config.json"), read_weights(folder), str(folder))
    assert (ours.cfg.encoder_layerdrop, ours.cfg.decoder_layerdrop) == (0.5, 0.5)
    ids, pad = family_batch("m2m_100")
    tgt = targets("m2m_100")
    hf.train()
    ours.train()
    differ = 0
    for seed in range(6):
        torch.manual_seed(seed)
        expected = hf(input_ids=ids, attention_mask=(~pad).long(), decoder_input_ids=tgt).logits
        torch.manual_seed(seed)
        got = ours(ids, pad, tgt)
        assert (got - expected).abs().max() < 1e-4, seed
        torch.manual_seed(seed)
        differ += not torch.allclose(got, ours.eval()(ids, pad, tgt), atol=1e-4)
        ours.train()
    assert differ >= 4  # the seeds did drop layers
    assert write_family(ours, tmp_path / "out", "m2m_100").name == "m2m_100"
    written = read_json(tmp_path / "out" / "config.json")
    assert (written["encoder_layerdrop"], written["decoder_layerdrop"]) == (0.5, 0.5)
