"""A decoder-only model seqlab trains goes out as a Hugging Face Llama folder and comes back through `seqlab
import` exactly: transformers' tokenizer encodes as seqlab's SentencePiece model, the folder's chat template lays
out the ids the model was trained on (source, EOS, BOS), `generate` continues them as seqlab's own search decodes
the trained checkpoint, and the imported checkpoint asked through its chat template prints the same text."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

transformers = pytest.importorskip("transformers")

from seqlab.checkpoint import load_for_inference  # noqa: E402
from seqlab.constants import BOS_ID, EOS_ID  # noqa: E402
from seqlab.data.chat import ChatTemplate, ChatTemplateError  # noqa: E402
from seqlab.interop.causal_export import LAYOUT_TEMPLATE, tokenizer_files  # noqa: E402
from seqlab.interop.export import export  # noqa: E402
from seqlab.interop.families import InteropError  # noqa: E402
from tests.integration.conftest import CONF, smoke_training  # noqa: E402

SOURCES = ["En el principio creó Dios los cielos y la tierra.", "Y dijo Dios: Sea la luz; y fue la luz.",
           "¿Dónde está Abel tu hermano?", "Jesús lloró.", "  dos  espacios\tun tabulador  ",
           "ünïcödé — “comillas” 12:3"]
LLAMA = ["model.norm=rmsnorm", "model.positions=rope", "model.gated_ffn=true", "model.activation=silu",
         "model.bias=false", "model.scale_embedding=false", "model.norm_position=pre", "model.tie_embeddings=all",
         "model.layer_norm_eps=1e-6"]  # conf/experiment/lm_workflow.yaml's: the `llama` family's choices
SMALL = ["model=llama_small", *LLAMA, "model.d_model=32", "model.n_heads=2", "model.decoder_layers=2",
         "model.d_ff=64"]


def trained(tmp_path_factory, shared_cache, overrides: list[str]) -> Path:
    """last.ckpt of a 3-update smoke training of a Llama-shaped decoder-only model."""
    return smoke_training(tmp_path_factory.mktemp("lm"), shared_cache,
                          ["trainer.max_steps=3", "optim.lr=5e-3", *overrides])


@pytest.fixture(scope="module")
def lm(tmp_path_factory, shared_cache) -> Path:
    return trained(tmp_path_factory, shared_cache, SMALL)


def test_the_folder_is_a_llama_whose_tokenizer_and_template_give_the_trained_layout(lm, tmp_path):
    folder = export(lm, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= {p.name for p in folder.iterdir()}
    _, tokenizer, _ = load_for_inference(lm)
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    ours = tokenizer.encode_source(SOURCES)  # each source's pieces, then its end token
    assert [hf_tok(s, add_special_tokens=False)["input_ids"] for s in SOURCES] == [ids[:-1] for ids in ours]
    for source, ids in zip(SOURCES, ours, strict=True):
        asked = hf_tok.apply_chat_template([{"role": "user", "content": source}], add_generation_prompt=True,
                                           tokenize=True, return_dict=True)["input_ids"]
        assert asked == [*ids, BOS_ID]  # source, EOS, then the start token the target continues from
    # a shot: the pair as the model read it in training (source EOS BOS target EOS), then the next source
    target = tokenizer.encode_target(["In the beginning God created the heavens and the earth."])[0]
    shot = hf_tok.apply_chat_template([{"role": "user", "content": SOURCES[0]},
                                       {"role": "assistant", "content": "In the beginning God created the heavens "
                                                                        "and the earth."},
                                       {"role": "user", "content": SOURCES[1]}], add_generation_prompt=True,
                                      tokenize=True, return_dict=True)["input_ids"]
    assert shot == [*ours[0], BOS_ID, *target, *ours[1], BOS_ID]
    assert target[-1] == EOS_ID
    assert hf_tok.decode(target, skip_special_tokens=True) == "In the beginning God created the heavens and the earth."


def test_generate_on_the_folder_and_the_imported_checkpoint_decode_as_the_trained_model(lm, tmp_path):
    from seqlab.app.translate import run_translate
    from seqlab.interop.importer import import_hf
    from tests.integration.conftest import ROOT

    folder = export(lm, tmp_path / "hf")
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    expected = []
    for source in SOURCES:
        ids = hf_tok.apply_chat_template([{"role": "user", "content": source}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)
        with torch.no_grad():
            new = hf.generate(**ids, max_new_tokens=8, do_sample=False)[0, ids["input_ids"].shape[1]:]
        expected.append(hf_tok.decode(new, skip_special_tokens=True))
    imported = tmp_path / "imported.ckpt"
    torch.save(import_hf(folder), imported)

    def translated(ckpt: Path, *overrides: str) -> list[str]:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="translate", overrides=[f"ckpt={ckpt}", "decoding=greedy",
                                                              "decoding.max_length=8", "engine=seqlab", *overrides],
                          return_hydra_config=True)
        with open_dict(cfg):
            cfg.paths.root_dir = str(ROOT)
        HydraConfig.instance().set_config(cfg)
        out = io.StringIO()
        run_translate(cfg, stdin=io.StringIO("".join(s + "\n" for s in SOURCES)), stdout=out)
        GlobalHydra.instance().clear()
        return out.getvalue().split("\n")[:-1]

    native = translated(lm)
    assert translated(imported, "prompt.chat=true") == native
    assert [t.strip() for t in expected] == [t.strip() for t in native]
    model, _, _ = load_for_inference(imported)
    assert model.cfg.start == "prompt" and model.cfg.eos_id == EOS_ID


def test_what_a_causal_lm_cannot_be_is_refused_by_name(tmp_path_factory, shared_cache, tmp_path):
    template = ChatTemplate(LAYOUT_TEMPLATE, {"bos_token": "<s>", "eos_token": "</s>"}, "the folder")
    with pytest.raises(ChatTemplateError, match="user and assistant messages only, no system message"):
        template.render([{"role": "system", "content": "Translate."}, {"role": "user", "content": "hola"}])
    prefix = trained(tmp_path_factory, shared_cache, [*SMALL, "model.architecture=prefix_lm"])
    with pytest.raises(InteropError, match="no Hugging Face family computes it: model.architecture=prefix_lm: "
                                           "its source part attends to all of itself"):
        export(prefix, tmp_path / "prefix")
    assert not (tmp_path / "prefix").exists()  # refused before anything is written

    class TwoVocabularies:
        joint = False

    with pytest.raises(InteropError, match="data.tokenizer.joint=false"):
        tokenizer_files(TwoVocabularies(), 512)
