"""Export to a Hugging Face folder: MarianTokenizer and MarianMTModel.generate reproduce seqlab."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.checkpoint import load_for_inference  # noqa: E402
from seqlab.decoding import DecodingConfig, generate  # noqa: E402
from seqlab.interop.export import export  # noqa: E402
from tests.helpers import assert_first_hypotheses_equal  # noqa: E402

SOURCES = ["En el principio creó Dios los cielos y la tierra.", "Y dijo Dios: Sea la luz.", "Dios"]


@pytest.mark.parametrize("num_beams", [1, 3])
def test_exported_folder_reproduces_seqlab(smoke_checkpoint, tmp_path, num_beams):
    out = export(smoke_checkpoint, tmp_path / "hf", DecodingConfig(method="beam" if num_beams > 1 else "greedy",
                                                                   num_beams=num_beams, max_length=10))
    assert {"config.json", "model.safetensors", "generation_config.json", "source.spm", "target.spm",
            "vocab.json"} <= {p.name for p in out.iterdir()}
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    hf_tok = transformers.MarianTokenizer.from_pretrained(out)
    ours_ids = tokenizer.encode_source(SOURCES)
    assert [hf_tok(s)["input_ids"] for s in SOURCES] == ours_ids

    hf = transformers.MarianMTModel.from_pretrained(out).eval()
    assert hf.generation_config.num_beams == num_beams and hf.generation_config.max_new_tokens == 10
    batch = hf_tok(SOURCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        ref = hf.generate(**batch)  # the exported generation_config alone
    cfg = DecodingConfig(method="beam" if num_beams > 1 else "greedy", num_beams=num_beams, max_length=10)
    ours = generate(model, batch["input_ids"], batch["attention_mask"] == 0, cfg)
    for i, n in enumerate(assert_first_hypotheses_equal(ours, ref, model.cfg.pad_id)):
        # the same text (MarianTokenizer's decode also strips spaces that pieces of bare "▁" leave)
        hf_text = hf_tok.decode(ref[i], skip_special_tokens=True)
        assert hf_text.split() == tokenizer.decode_target(ours.sequences[i, 0, :n]).split()


def test_ctranslate2_export_from_the_command_line(smoke_checkpoint, tmp_path):
    """`make export FORMAT=ctranslate2`: the smoke model, its real SentencePiece vocabulary, greedy as seqlab."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from seqlab.app.export import main

    out = tmp_path / "ct2"
    assert main(["--ckpt", str(smoke_checkpoint), "--out", str(out), "--format", "ctranslate2"]) == 0
    model, tokenizer, _ = load_for_inference(smoke_checkpoint)
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    src_ids = tokenizer.encode_source(SOURCES)
    pieces = [[tokenizer.id_to_piece(i, "src") if i > 3 else ["<pad>", "<unk>", "<s>", "</s>"][i] for i in s]
              for s in src_ids]
    results = translator.translate_batch(pieces, beam_size=1, max_decoding_length=10,
                                         suppress_sequences=[["<pad>"], ["<s>"]])
    for ids, result in zip(src_ids, results, strict=True):
        ours = generate(model, torch.tensor([ids]), torch.zeros(1, len(ids), dtype=torch.bool),
                        DecodingConfig(max_length=10))
        seq = ours.sequences[0, 0, : ours.lengths[0, 0]].tolist()
        theirs = [tokenizer.tgt.piece_to_id(p) if p != "</s>" else 3 for p in result.hypotheses[0]]
        assert (seq[:-1] if seq[-1] == 3 else seq) == theirs
