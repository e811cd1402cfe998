"""`seqlab import` of decoder-only folders (GPT-2's byte-level BPE, Qwen2's, Llama's SentencePiece with its BOS),
built here in each family's own layout: `seqlab translate` continues each prompt as `generate` does, the text
`batch_decode(new tokens, skip_special_tokens=True)`, with the folder's generation_config.json."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.app.import_hf import main  # noqa: E402
from seqlab.app.translate import run_translate  # noqa: E402
from seqlab.checkpoint import load_for_inference  # noqa: E402
from tests.hf_tokenizer_folders import TEXT  # noqa: E402

PROMPTS = ["the quick brown fox", "Hello World! How", "numbers 42 and"]
SMALL = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32, intermediate_size=48,
             max_position_embeddings=64)


def byte_level(root: Path, special: list[str]) -> Path:
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXT, vocab_size=300, min_frequency=1, special_tokens=special)
    folder = root / "bpe"
    folder.mkdir(parents=True, exist_ok=True)
    bpe.save_model(str(folder))
    return folder


def family_folder(family: str, root: Path) -> tuple[Path, object]:
    """(the saved folder, its transformers model) with a tokenizer of the family's kind."""
    torch.manual_seed(0)
    if family == "gpt2":
        tok = transformers.GPT2Tokenizer.from_pretrained(byte_level(root, ["<|endoftext|>"]))
        eos = tok.eos_token_id
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=eos, eos_token_id=eos))
    elif family == "qwen2":
        tok = transformers.Qwen2Tokenizer.from_pretrained(byte_level(root, ["<|endoftext|>"]))
        eos = tok.convert_tokens_to_ids("<|endoftext|>")
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            vocab_size=len(tok), num_key_value_heads=2, eos_token_id=eos, bos_token_id=None,
            tie_word_embeddings=True, **SMALL))
    else:
        tok = transformers.LlamaTokenizer.from_pretrained(spm_model(root))
        eos = tok.eos_token_id
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=len(tok), num_key_value_heads=2, bos_token_id=tok.bos_token_id, eos_token_id=eos,
            pad_token_id=None, **SMALL))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    model.eval().generation_config = transformers.GenerationConfig(max_new_tokens=6, do_sample=False,
                                                                   eos_token_id=eos, pad_token_id=eos)
    out = root / family
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out, model


def generated_texts(hf, hf_tok, texts: list[str], **settings) -> list[str]:
    """What `seqlab translate` must print for each text: `generate` on it alone (the model card's call, with the
    folder's generation defaults and `settings` on top), the new tokens decoded, a line each."""
    out = []
    for text in texts:
        ids = hf_tok(text, return_tensors="pt")
        with torch.no_grad():
            new = hf.generate(**ids, **settings)[:, ids["input_ids"].shape[1]:]
        out.append(hf_tok.batch_decode(new, skip_special_tokens=True)[0].replace("\n", " "))
    return out


def spm_model(root: Path) -> Path:
    """A folder with Llama's `tokenizer.model`, a SentencePiece model with byte fallback."""
    import sentencepiece as spm

    folder = root / "spm"
    folder.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT), model_prefix=str(folder / "tokenizer"),
                                   vocab_size=400, minloglevel=2, hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2,
                                   pad_id=-1, byte_fallback=True)
    return folder


@pytest.mark.parametrize("family", ["gpt2", "qwen2", "llama"])
def test_an_imported_causal_lm_continues_its_prompts_as_generate_does(family, tmp_path, make_cfg):
    path, hf = family_folder(family, tmp_path)
    ckpt = tmp_path / "imported.ckpt"
    assert main(["--hf", str(path), "--out", str(ckpt)]) == 0
    model, tokenizer, info = load_for_inference(ckpt)
    assert (model.cfg.architecture, model.cfg.start) == ("decoder_only", "prompt")
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    assert tokenizer.encode_source(PROMPTS) == [hf_tok(p)["input_ids"] for p in PROMPTS]
    expected = generated_texts(hf, hf_tok, PROMPTS)
    out = io.StringIO()
    cfg = make_cfg("translate", [f"ckpt={ckpt}", "decoding_from_checkpoint=true"])
    run_translate(cfg, stdin=io.StringIO("".join(p + "\n" for p in PROMPTS)), stdout=out)
    assert out.getvalue().split("\n")[:-1] == expected
    if importlib.util.find_spec("ctranslate2") is not None:  # the same text from CTranslate2's Generator
        out = io.StringIO()
        cfg = make_cfg("translate", [f"ckpt={ckpt}", "decoding_from_checkpoint=true", "engine=ctranslate2"])
        run_translate(cfg, stdin=io.StringIO("".join(p + "\n" for p in PROMPTS)), stdout=out)
        assert out.getvalue().split("\n")[:-1] == expected


def test_a_prompt_template_asks_the_task_as_gpt2s_tldr_does(tmp_path, make_cfg):
    """`prompt.template='{source}\\nTL;DR:'`: every source in the template, then continued, as `generate` on the
    templated text; a template without its slot is refused naming the key."""
    from seqlab.config import ConfigError

    path, hf = family_folder("gpt2", tmp_path)
    ckpt = tmp_path / "imported.ckpt"
    assert main(["--hf", str(path), "--out", str(ckpt)]) == 0
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    expected = generated_texts(hf, hf_tok, [f"{prompt}\nTL;DR:" for prompt in PROMPTS])
    out = io.StringIO()
    cfg = make_cfg("translate", [f"ckpt={ckpt}", "decoding_from_checkpoint=true",
                                 "prompt.template='{source}\nTL;DR:'"])
    run_translate(cfg, stdin=io.StringIO("".join(p + "\n" for p in PROMPTS)), stdout=out)
    assert out.getvalue().split("\n")[:-1] == expected
    with pytest.raises(ConfigError, match="translate.prompt.template='TL;DR:' must hold {source} exactly once"):
        run_translate(make_cfg("translate", [f"ckpt={ckpt}", "prompt.template='TL;DR:'"]),
                      stdin=io.StringIO("a\n"), stdout=io.StringIO())


def test_the_generation_configs_end_tokens_win_in_their_order_and_an_unknown_one_is_refused(tmp_path, capsys):
    """generation_config.json's eos_token_id wins over config.json's, as in `generate`; a list (an instruct
    model's) keeps its order, the first being what a forced end writes; an id outside the vocabulary is
    refused naming the file."""
    import json

    path, _ = family_folder("gpt2", tmp_path)
    settings = json.loads((path / "generation_config.json").read_text())
    eos = settings["eos_token_id"]
    (path / "generation_config.json").write_text(json.dumps({**settings, "eos_token_id": [eos, 7]}))
    assert main(["--hf", str(path), "--out", str(tmp_path / "x.ckpt")]) == 0
    cfg = load_for_inference(tmp_path / "x.ckpt")[0].cfg
    assert (cfg.eos_id, cfg.extra_eos_ids, cfg.end_ids) == (eos, (7,), (eos, 7))
    (path / "generation_config.json").write_text(json.dumps({**settings, "eos_token_id": [eos, 100000]}))
    assert main(["--hf", str(path), "--out", str(tmp_path / "y.ckpt")]) == 2
    err = capsys.readouterr().err
    assert "generation_config.json: eos_token_id=" in err and "[100000] ids outside the vocabulary" in err


def test_decoding_overrides_apply_on_top_of_the_checkpoints_defaults(tmp_path, make_cfg):
    """decoding_from_checkpoint=true with decoding.* given: the folder's generation defaults with those values
    changed (here max_length, HF's max_new_tokens, and beams), as `generate` with the same two changed."""
    path, hf = family_folder("llama", tmp_path)
    ckpt = tmp_path / "imported.ckpt"
    assert main(["--hf", str(path), "--out", str(ckpt)]) == 0
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    expected = generated_texts(hf, hf_tok, PROMPTS, max_new_tokens=3, num_beams=2, early_stopping=True)
    out = io.StringIO()
    cfg = make_cfg("translate", [f"ckpt={ckpt}", "decoding_from_checkpoint=true", "decoding.max_length=3",
                                 "decoding.num_beams=2", "decoding.method=beam", "decoding.early_stopping=true"])
    run_translate(cfg, stdin=io.StringIO("".join(p + "\n" for p in PROMPTS)), stdout=out)
    assert out.getvalue().split("\n")[:-1] == expected
