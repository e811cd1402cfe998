"""`seqlab import` of instruct folders (Qwen2.5-Instruct's and Llama 3.x-Instruct's layouts, tests/instruct_folders):
several end tokens, a pad token that is not the EOS, the tokenizer's added special tokens. Any end token ends a
row as in `generate` (greedy and beam, token for token), the log-probs of continuations ending in each of them
equal transformers', and `seqlab translate` prints `generate`'s text."""

from __future__ import annotations

import io

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.app.import_hf import main  # noqa: E402
from seqlab.app.translate import run_translate  # noqa: E402
from seqlab.checkpoint import load_for_inference  # noqa: E402
from seqlab.data.sequences import pad_right  # noqa: E402
from seqlab.decoding import DecodingConfig, generate, score  # noqa: E402
from tests.instruct_folders import INSTRUCT  # noqa: E402
from tests.integration.test_import_causal import generated_texts  # noqa: E402

PROMPTS = ["the quick brown fox", "Hello World! How", "numbers 42 and", "a stitch", "el perro", "summaries of",
           "déjà vu", "the lazy dog saves"]


@pytest.fixture(scope="module", params=sorted(INSTRUCT))
def imported(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    path, hf = INSTRUCT[request.param](root)
    ckpt = root / "imported.ckpt"
    assert main(["--hf", str(path), "--out", str(ckpt)]) == 0
    return path, hf, ckpt


def test_the_end_tokens_and_the_pad_come_from_the_folder(imported):
    path, hf, ckpt = imported
    model, tokenizer, _ = load_for_inference(ckpt)
    ends = hf.generation_config.eos_token_id
    assert list(model.cfg.end_ids) == ends
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    assert model.cfg.pad_id == (hf_tok.pad_token_id if hf_tok.pad_token_id is not None else ends[0])
    assert tokenizer.encode_source(PROMPTS) == [hf_tok(p)["input_ids"] for p in PROMPTS]


@pytest.mark.parametrize("beams", [1, 3])
def test_any_end_token_ends_a_row_as_in_generate(imported, beams):
    path, hf, ckpt = imported
    model, tokenizer, _ = load_for_inference(ckpt)
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    ends, ended = set(model.cfg.end_ids), set()
    for prompt in PROMPTS:
        ids = hf_tok(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            theirs = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=10,
                                 do_sample=False, num_beams=beams, early_stopping=True)[0, ids.shape[1]:].tolist()
        cut = next((i + 1 for i, t in enumerate(theirs) if t in ends), len(theirs))
        theirs = theirs[:cut]
        ended |= ends & set(theirs[-1:])
        cfg = DecodingConfig(method="beam" if beams > 1 else "greedy", num_beams=beams, max_length=10)
        out = generate(model, ids, torch.zeros_like(ids, dtype=torch.bool), cfg)
        assert out.sequences[0, 0, : out.lengths[0, 0]].tolist() == theirs, prompt
    assert len(ended) >= 2, f"the prompts ended in {ended} only: the test would not tell the end tokens apart"


def test_continuations_ending_in_each_end_token_score_as_in_transformers(imported):
    path, hf, ckpt = imported
    model, tokenizer, _ = load_for_inference(ckpt)
    rows = tokenizer.encode_source(PROMPTS[:3])
    cont = [[40, 41, end] for end in model.cfg.end_ids][:3]
    cont += [[42, 43, model.cfg.eos_id]] * (3 - len(cont))
    src, src_pad = pad_right(rows, model.cfg.pad_id)
    tgt, _ = pad_right(cont, model.cfg.pad_id)
    got = score(model, src, src_pad, tgt)
    for i, (r, c) in enumerate(zip(rows, cont, strict=True)):
        with torch.no_grad():
            logits = hf(input_ids=torch.tensor([r + c])).logits.float()
        theirs = torch.log_softmax(logits, -1)[0, len(r) - 1 : -1].gather(1, torch.tensor(c)[:, None]).squeeze(1)
        assert torch.allclose(got[i, : len(c)], theirs, atol=1e-4), (i, got[i], theirs)


def test_translate_prints_generates_text(imported, make_cfg):
    path, hf, ckpt = imported
    expected = generated_texts(hf, transformers.AutoTokenizer.from_pretrained(path), PROMPTS)
    out = io.StringIO()
    run_translate(make_cfg("translate", [f"ckpt={ckpt}", "decoding_from_checkpoint=true"]),
                  stdin=io.StringIO("".join(p + "\n" for p in PROMPTS)), stdout=out)
    assert out.getvalue().split("\n")[:-1] == expected


@pytest.mark.parametrize("system", [None, "Answer briefly."])
def test_translate_with_the_chat_template_prints_generates_text(imported, make_cfg, system):
    """prompt.chat=true: each line asked through the folder's own chat template (kept in the checkpoint), the
    text `generate` gives on `apply_chat_template(..., add_generation_prompt=True)`'s ids."""
    path, hf, ckpt = imported
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    expected = []
    for prompt in PROMPTS:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": f"Continue: {prompt}"}]
        ids = hf_tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.no_grad():
            new = hf.generate(**ids)[:, ids["input_ids"].shape[1]:]
        expected.append(hf_tok.batch_decode(new, skip_special_tokens=True)[0].replace("\n", " "))
    args = [f"ckpt={ckpt}", "decoding_from_checkpoint=true", "prompt.chat=true", "prompt.template='Continue: {source}'"]
    out = io.StringIO()
    run_translate(make_cfg("translate", args + ([f"prompt.system='{system}'"] if system else [])),
                  stdin=io.StringIO("".join(p + "\n" for p in PROMPTS)), stdout=out)
    assert out.getvalue().split("\n")[:-1] == expected


def test_a_chat_prompt_on_a_base_model_and_shots_without_a_corpus_are_refused(tmp_path, make_cfg):
    from seqlab.config import ConfigError
    from tests.integration.test_import_causal import family_folder

    path, _ = family_folder("gpt2", tmp_path)
    ckpt = tmp_path / "base.ckpt"
    assert main(["--hf", str(path), "--out", str(ckpt)]) == 0
    with pytest.raises(ConfigError, match="prompt.chat=true: this checkpoint's tokenizer has no chat template"):
        run_translate(make_cfg("translate", [f"ckpt={ckpt}", "prompt.chat=true"]), stdin=io.StringIO("a\n"),
                      stdout=io.StringIO())
    with pytest.raises(ConfigError, match="translate.prompt.shots=2 draws examples from a corpus"):
        run_translate(make_cfg("translate", [f"ckpt={ckpt}", "prompt.shots=2"]), stdin=io.StringIO("a\n"),
                      stdout=io.StringIO())
