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
    if family == "mbart":  # cc25: the decoder starts from the target code (its model card passes it)
        forced = {"decoder_start_token_id": hf_tok.convert_tokens_to_ids(hf_tok.tgt_lang)}
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


@pytest.mark.parametrize("family", ["t5_v1.1", "pegasus", "mbart50", "nllb", "m2m_100", "bart"])
def test_an_imported_model_exports_to_its_family_and_back(family, tmp_path):
    from seqlab.interop.export import export

    path, hf_tok, _ = folder(family, tmp_path)
    ckpt = tmp_path / "imported.ckpt"
    src, tgt = LANGS.get(family, (None, None))
    assert main(["--hf", str(path), "--out", str(ckpt), *(["--src-lang", src, "--tgt-lang", tgt] if src else [])]) == 0
    out = export(ckpt, tmp_path / "exported")
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert type(hf).__name__ == type(_).__name__ and type(tok).__name__ == type(hf_tok).__name__
    if src:
        tok.src_lang, tok.tgt_lang = src, tgt
    model, tokenizer, _info = load_for_inference(ckpt)
    assert [tok(s)["input_ids"] for s in SOURCES] == tokenizer.encode_source(SOURCES)
    batch = tok(SOURCES, return_tensors="pt", padding=True)
    start = torch.full((3, 1), model.cfg.bos_id)
    with torch.no_grad():
        theirs = torch.log_softmax(hf(**batch, decoder_input_ids=start).logits, -1)
        ours = torch.log_softmax(model(batch["input_ids"], batch["attention_mask"] == 0, start), -1)
    assert (theirs - ours).abs().max() < 1e-4


@pytest.mark.parametrize(("choices", "family"), [
    (dict(norm_position="post", positions="learned", position_offset=2, layernorm_embedding=True,
          activation="gelu", output_bias=True, final_norm=False), "BartForConditionalGeneration"),
    (dict(norm="rmsnorm", norm_position="pre", positions="t5", bias=False, scale_attention=False,
          scale_embedding=False, activation="gelu_tanh", gated_ffn=True, d_head=4, tie_embeddings="inputs"),
     "T5ForConditionalGeneration"),
])
def test_a_model_trained_in_a_familys_shape_exports_to_that_family(choices, family, tmp_path):
    from seqlab.interop.hf_export import write_family
    from seqlab.model import ModelConfig, Seq2SeqTransformer

    torch.manual_seed(0)
    model = Seq2SeqTransformer(ModelConfig(src_vocab_size=40, d_model=16, n_heads=4, encoder_layers=2,
                                           decoder_layers=2, d_ff=24, dropout=0.0, max_positions=32, **choices)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    write_family(model, tmp_path / "out")
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert type(hf).__name__ == family
    ids = torch.randint(4, 40, (2, 7))
    pad = torch.zeros(2, 7, dtype=torch.bool)
    tgt = torch.randint(4, 40, (2, 5))
    tgt[:, 0] = model.cfg.bos_id
    with torch.no_grad():
        theirs = torch.log_softmax(hf(input_ids=ids, decoder_input_ids=tgt).logits, -1)
        ours = torch.log_softmax(model(ids, pad, tgt), -1)
    assert (theirs - ours).abs().max() < 1e-4


@pytest.mark.parametrize("family", ["t5_v1.0", "t5_v1.1", "pegasus", "mbart", "bart", "m2m_100"])
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_ctranslate2_decodes_an_imported_family_as_seqlab(family, method, tmp_path):
    pytest.importorskip("ctranslate2")
    from seqlab.decoding import DecodingConfig, generate
    from seqlab.engines.ct2 import CT2Engine
    from seqlab.interop.ct2 import export_ctranslate2

    path, hf_tok, _ = folder(family, tmp_path)
    ckpt = tmp_path / "imported.ckpt"
    src, tgt = LANGS.get(family, (None, None))
    assert main(["--hf", str(path), "--out", str(ckpt), *(["--src-lang", src, "--tgt-lang", tgt] if src else [])]) == 0
    model, tokenizer, _info = load_for_inference(ckpt)
    engine = CT2Engine(export_ctranslate2(model, tokenizer, tmp_path / "ct2"), model, tokenizer, threads=1)
    decoding = DecodingConfig(method=method, num_beams=3 if method == "beam" else 1, max_length=10,
                              suppress_special=False)
    ids, pad = (torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in tokenizer.encode_source(SOURCES)],
                                                batch_first=True, padding_value=model.cfg.pad_id), None)
    pad = ids == model.cfg.pad_id
    ours, theirs = generate(model, ids, pad, decoding), engine.generate(model, ids, pad, decoding)
    for b in range(len(SOURCES)):
        n, m = int(ours.lengths[b, 0]), int(theirs.lengths[b, 0])
        assert ours.sequences[b, 0, :n].tolist() == theirs.sequences[b, 0, :m].tolist(), (family, b)


@pytest.mark.parametrize("family", ["mbart", "mbart50", "bart"])
def test_fine_tuning_inputs_are_hugging_faces_shifted_labels(family, tmp_path):
    """What seqlab trains on equals what the family's own training does: the decoder input is transformers'
    shift of the labels (mBART-cc25: the target code moved to the front, the decoder start; mBART-50 and BART:
    the decoder start, then the labels), and the teacher-forced log-probs of the labels equal HF's forward
    with `labels`."""
    from seqlab.data.datamodule import Collate

    path, hf_tok, hf = folder(family, tmp_path)
    ckpt = tmp_path / "imported.ckpt"
    src, tgt = LANGS.get(family, (None, None))
    assert main(["--hf", str(path), "--out", str(ckpt), *(["--src-lang", src, "--tgt-lang", tgt] if src else [])]) == 0
    model, tokenizer, _ = load_for_inference(ckpt)
    if src:
        hf_tok.src_lang, hf_tok.tgt_lang = src, tgt
    items = [(i, s, t) for i, (s, t) in enumerate(zip(tokenizer.encode_source(SOURCES),
                                                      tokenizer.encode_target(SOURCES[::-1]), strict=True))]
    batch = Collate(tokenizer.pad_id, tokenizer.bos_id)(items)
    labels = hf_tok(text_target=SOURCES[::-1], return_tensors="pt", padding=True)["input_ids"]
    assert torch.equal(batch.tgt_out, labels)
    shift = transformers.models.mbart.modeling_mbart.shift_tokens_right if family == "mbart" else None
    expected = (shift(labels, hf.config.pad_token_id) if shift is not None else
                transformers.models.bart.modeling_bart.shift_tokens_right(labels, hf.config.pad_token_id,
                                                                          hf.config.decoder_start_token_id))
    keep = labels != hf.config.pad_token_id  # past a label's end the inputs differ and predict nothing
    assert torch.equal(batch.tgt_in[keep], expected[keep])
    hf = type(hf).from_pretrained(path).eval()
    with torch.no_grad():
        theirs = torch.log_softmax(hf(input_ids=batch.src_ids, attention_mask=~batch.src_pad_mask,
                                      labels=labels).logits, -1)
        ours = torch.log_softmax(model(batch.src_ids, batch.src_pad_mask, batch.tgt_in), -1)
    assert (theirs - ours)[keep].abs().max() < 1e-4
    if family == "mbart":  # another target language at decoding time: the decoder starts from its code
        from seqlab.checkpoint import start_from

        other = tokenizer.with_settings(tgt_lang="de_DE")
        assert start_from(model, other).cfg.bos_id == hf_tok.convert_tokens_to_ids("de_DE") == other.bos_id


@pytest.mark.parametrize("family", ["mbart", "mbart50", "nllb", "t5_v1.1", "bart"])
def test_constraints_are_the_texts_own_ids_and_a_prefix_opens_as_the_output_does(family, tmp_path):
    """A constraint is the phrase's ids alone (transformers' ids without special tokens: never a language code,
    BOS or EOS), whatever the family's target template; a forced prefix is what an output opens with: the
    template's ids before the text (mBART-50's and NLLB's code, BART's <s>), then the text (mBART-cc25: the
    text alone, its code closing the target)."""
    from seqlab.inference.evaluation import constraint_ids, prefix_ids

    path, hf_tok, _ = folder(family, tmp_path)
    ckpt = tmp_path / "imported.ckpt"
    src, tgt = LANGS.get(family, (None, None))
    assert main(["--hf", str(path), "--out", str(ckpt), *(["--src-lang", src, "--tgt-lang", tgt] if src else [])]) == 0
    _, tokenizer, _ = load_for_inference(ckpt)
    if src:
        hf_tok.src_lang, hf_tok.tgt_lang = src, tgt
    phrases = ["quick brown fox", "nine"]
    own = [hf_tok(text_target=p, add_special_tokens=False)["input_ids"] for p in phrases]
    assert constraint_ids(tokenizer, [phrases, []]) == [own, []]
    full = hf_tok(text_target=phrases[0])["input_ids"]
    opening = full[: full.index(own[0][0])]  # what the family's template puts before the text
    assert prefix_ids(tokenizer, phrases[:1]) == [opening + own[0]]
    assert prefix_ids(tokenizer, phrases[:1], size=2) == [(opening + own[0])[:2]]
    expected_opening = {"mbart": [], "mbart50": [hf_tok.convert_tokens_to_ids(tgt or "")], "t5_v1.1": [],
                        "nllb": [hf_tok.convert_tokens_to_ids(tgt or "")], "bart": [hf_tok.bos_token_id]}
    assert opening == expected_opening[family]
