"""Import of a Marian (OPUS-MT-shaped) folder: Marian's tokenizer ids and HF generate's outputs, in seqlab."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.app.import_hf import main  # noqa: E402
from seqlab.app.translate import run_translate  # noqa: E402
from seqlab.checkpoint import load_for_inference  # noqa: E402
from seqlab.data.tokenizer import Tokenizer, TokenizerConfig  # noqa: E402
from seqlab.decoding import DecodingConfig, generate  # noqa: E402
from tests.helpers import assert_first_hypotheses_equal  # noqa: E402

SOURCES = ["the cat sat on the red mat", "a dog ran", "the big blue house"]


def marian_folder(root: Path) -> Path:
    """A random Marian model in OPUS-MT's layout: eos 0, unk 1, pad last; ids from vocab.json, not SentencePiece."""
    words = ["the", "a", "cat", "dog", "sat", "ran", "on", "red", "blue", "big", "mat", "house", "in"]
    lines = [" ".join(words[(i * k) % len(words)] for k in range(1, 7)) for i in range(200)]
    spm_model = Tokenizer.train(lines, lines, TokenizerConfig(vocab_size=300)).src_model
    pieces = [Tokenizer(spm_model).src.id_to_piece(i) for i in range(Tokenizer(spm_model).src_vocab_size)]
    normal = [p for p in pieces if p not in ("<pad>", "<unk>", "<s>", "</s>")][::-1]  # another order than spm's
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(normal)}}
    vocab["<pad>"] = len(vocab)
    torch.manual_seed(0)
    cfg = transformers.MarianConfig(vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2,
                                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                    decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=vocab["<pad>"],
                                    decoder_start_token_id=vocab["<pad>"], eos_token_id=0,
                                    forced_eos_token_id=0, dropout=0.0)
    model = transformers.MarianMTModel(cfg).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 1.0)
    model.generation_config = transformers.GenerationConfig(
        num_beams=3, max_length=8, forced_eos_token_id=0, bad_words_ids=[[vocab["<pad>"]]],
        decoder_start_token_id=vocab["<pad>"], pad_token_id=vocab["<pad>"], eos_token_id=0)
    model.save_pretrained(root)
    (root / "source.spm").write_bytes(spm_model)
    (root / "target.spm").write_bytes(spm_model)
    (root / "vocab.json").write_text(json.dumps(vocab))
    return root


def test_imported_marian_model_equals_hf_generate_with_its_generation_config(tmp_path, make_cfg):
    folder = marian_folder(tmp_path / "opus-mt-xx-yy")
    ckpt = tmp_path / "imported.ckpt"
    assert main(["--hf", str(folder), "--out", str(ckpt)]) == 0
    model, tokenizer, info = load_for_inference(ckpt)
    hf_tok = transformers.MarianTokenizer.from_pretrained(folder)
    assert tokenizer.encode_source(SOURCES) == [hf_tok(s)["input_ids"] for s in SOURCES]
    ids = tokenizer.encode_target(["the red cat"])[0]
    with_unk = [ids[0], tokenizer.unk_id, *ids[1:]]  # a generated <unk> is dropped, as batch_decode drops it
    assert tokenizer.decode_target(with_unk) == hf_tok.decode(with_unk, skip_special_tokens=True) == "the red cat"

    decoding = DecodingConfig(**info.decoding)
    assert (decoding.method, decoding.num_beams, decoding.max_length, decoding.force_eos) == ("beam", 3, 7, "hf")
    hf = transformers.MarianMTModel.from_pretrained(folder).eval()
    batch = hf_tok(SOURCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        ref = hf.generate(**batch)  # the folder's generation_config: beam 3, max_length 8, forced EOS
    ours = generate(model, batch["input_ids"], batch["attention_mask"] == 0, decoding)
    for i, n in enumerate(assert_first_hypotheses_equal(ours, ref, model.cfg.pad_id)):
        assert ours.sequences[i, 0, n - 1] == 0  # forced EOS at the limit, or an earlier EOS

    out = io.StringIO()
    cfg = make_cfg("translate", [f"ckpt={ckpt}", "decoding_from_checkpoint=true"])
    run_translate(cfg, stdin=io.StringIO("".join(s + "\n" for s in SOURCES)), stdout=out)
    assert out.getvalue().split("\n")[:-1] == [hf_tok.decode(r, skip_special_tokens=True) for r in ref]


def test_import_refuses_a_folder_that_is_not_a_model(tmp_path, capsys):
    assert main(["--hf", str(tmp_path), "--out", str(tmp_path / "x.ckpt")]) == 2
    assert "config.json: missing" in capsys.readouterr().err
    assert not (tmp_path / "x.ckpt").exists()


def test_import_refuses_a_config_that_does_not_describe_its_weights(tmp_path, capsys):
    """config.json saying d_model 64 over 32-wide weights: refused naming config.json and the family's names."""
    folder = marian_folder(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "d_model": 64}))
    assert main(["--hf", str(folder), "--out", str(tmp_path / "x.ckpt")]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "do not" in err and "belong to different models" in err
    assert "Traceback" not in err and "size mismatch" not in err
    assert not (tmp_path / "x.ckpt").exists()


def test_import_refuses_a_folder_without_tokenizer_files_naming_what_is_missing(tmp_path, capsys):
    folder = marian_folder(tmp_path / "m")
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
        (folder / name).unlink(missing_ok=True)
    assert main(["--hf", str(folder), "--out", str(tmp_path / "x.ckpt")]) == 2
    err = capsys.readouterr().err
    assert "no tokenizer files (none of tokenizer.json, tokenizer_config.json" in err
    assert not (tmp_path / "x.ckpt").exists()
