"""`seqlab import` of every family's folder, tokenizer in its own file layout: the checkpoint alone gives
transformers' ids for a text and, decoding with the folder's generation defaults, transformers' text
(`batch_decode(skip_special_tokens=True)` of `generate`); language codes by Hugging Face's names."""

from __future__ import annotations

import io
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.app.import_hf import main  # noqa: E402
from seqlab.app.translate import run_translate  # noqa: E402
from seqlab.checkpoint import load_for_inference  # noqa: E402
from tests.hf_tokenizer_folders import SOURCES, folder  # noqa: E402

FAMILIES = ["t5_v1.0", "t5_v1.1", "pegasus", "mbart", "mbart50", "nllb", "m2m_100", "bart"]
LANGS = {"mbart50": ("en_XX", "ro_RO"), "nllb": ("eng_Latn", "spa_Latn"), "m2m_100": ("en", "de")}


@pytest.mark.parametrize("family", FAMILIES)
def test_imported_family_gives_transformers_text(family, tmp_path, make_cfg):
    path, hf_tok, _ = folder(family, tmp_path)
    settings = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps({**settings, "max_length": 13}))
    hf = type(_).from_pretrained(path).eval()  # with the folder's generation defaults
    ckpt = tmp_path / "imported.ckpt"
    src, tgt = LANGS.get(family, (None, None))
    args = ["--src-lang", src, "--tgt-lang", tgt] if src else []
    assert main(["--hf", str(path), "--out", str(ckpt), *args]) == 0
    _, tokenizer, _ = load_for_inference(ckpt)
    if src:
        hf_tok.src_lang, hf_tok.tgt_lang = src, tgt
    assert tokenizer.encode_source(SOURCES) == [hf_tok(s)["input_ids"] for s in SOURCES]
    assert tokenizer.encode_target(SOURCES) == [hf_tok(text_target=s)["input_ids"] for s in SOURCES]

    batch = hf_tok(SOURCES, return_tensors="pt", padding=True)
    forced = {"forced_bos_token_id": hf_tok.convert_tokens_to_ids(_code(family, tgt))} if src else {}
    with torch.no_grad():  # the model card's call: the target code forced first where the family has one
        ref = hf.generate(**batch, **forced)
    out = io.StringIO()
    cfg = make_cfg("translate", [f"ckpt={ckpt}", "decoding_from_checkpoint=true"])
    run_translate(cfg, stdin=io.StringIO("".join(s + "\n" for s in SOURCES)), stdout=out)
    assert out.getvalue().split("\n")[:-1] == hf_tok.batch_decode(ref, skip_special_tokens=True)


def _code(family: str, lang: str) -> str:
    return f"__{lang}__" if family == "m2m_100" else lang


def test_a_language_the_tokenizer_lacks_is_refused(tmp_path, capsys):
    path, _, _ = folder("nllb", tmp_path)
    assert main(["--hf", str(path), "--out", str(tmp_path / "x.ckpt"), "--tgt-lang", "xyz_Latn"]) == 2
    err = capsys.readouterr().err
    assert "tgt_lang='xyz_Latn' is not a language of this tokenizer" in err
    assert not (tmp_path / "x.ckpt").exists()


def test_a_missing_tokenizer_is_refused_naming_the_folder(tmp_path, capsys):
    path, _, _ = folder("pegasus", tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "spiece.model", "special_tokens_map.json"):
        (path / name).unlink(missing_ok=True)
    assert main(["--hf", str(path), "--out", str(tmp_path / "x.ckpt")]) == 2
    assert str(path) in capsys.readouterr().err
    assert not (tmp_path / "x.ckpt").exists()
