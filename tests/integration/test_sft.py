"""Supervised fine-tuning of an imported instruct model on task data (`seqlab train train.init_from=IMPORTED.ckpt
prompt.*`): the layout decoding continues (prompt, then the target and the end token), the loss on the target's
tokens only, equal to transformers' loss with the prompt's labels at -100 (TRL's completion-only collator); LoRA
lowers the validation loss, the checkpoint keeps the prompt that evaluate then asks with, and the merged export
generates what seqlab decodes, stopping at the end token."""

from __future__ import annotations

import gzip
import io
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqlab.app.import_hf import main as import_main  # noqa: E402
from seqlab.app.train import train  # noqa: E402
from seqlab.app.translate import run_translate  # noqa: E402
from seqlab.checkpoint import load_for_inference  # noqa: E402
from seqlab.data.datamodule import PromptCollate  # noqa: E402
from seqlab.data.prompting import Completions, Prompt, PromptSettings  # noqa: E402
from seqlab.train.levers import step_loss  # noqa: E402
from tests.instruct_folders import INSTRUCT  # noqa: E402

WORDS = ["fox", "dog", "time", "nine", "world", "today", "numbers", "here", "café", "lazy", "quick", "brown"]
CHAT = ["prompt.chat=true", "prompt.template='say {source}'"]


def toy_corpus(root):
    """`w1 w2` -> ` w2 w1.`: a task a tiny model learns in a few dozen steps."""
    g = torch.Generator().manual_seed(0)
    folder = root / "toy"
    folder.mkdir()
    for split, n in (("train", 192), ("validation", 16), ("test", 8)):
        rows = []
        for i in range(n):
            a, b = (WORDS[int(j)] for j in torch.randint(len(WORDS), (2,), generator=g))
            rows.append({"id": f"{split}-{i}", "translation": {"es": f"{a} {b}", "en": f"{b} {a}."}})
        with gzip.open(folder / f"{split}.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return folder


@pytest.fixture(scope="module")
def instruct(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    path, hf = INSTRUCT["llama3_instruct"](root)
    ckpt = root / "imported.ckpt"
    assert import_main(["--hf", str(path), "--out", str(ckpt)]) == 0
    return path, hf, ckpt, toy_corpus(root)


@pytest.mark.parametrize("chat", [False, True])
def test_the_loss_is_transformers_completion_only_loss(instruct, chat):
    """seqlab's summed NLL of a padded batch equals transformers' cross-entropy with the prompt's labels at
    -100, the continuation's end token (the tokenizer's <|eot_id|>, not the padding) counted."""
    path, hf, ckpt, _ = instruct
    model, tokenizer, _ = load_for_inference(ckpt)
    settings = PromptSettings(template="say {source}", chat=chat)
    tok = Completions(tokenizer, Prompt(settings, (), tokenizer.chat))
    sources, targets = ["fox dog", "nine"], ["dog fox.", "a stitch in time saves nine, today and here."]
    prompts, conts = tok.encode_source(sources), tok.encode_target(targets)
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    assert all(c[-1] == hf_tok.eos_token_id for c in conts)
    batch = PromptCollate(model.cfg.pad_id)([(i, p, c) for i, (p, c) in enumerate(zip(prompts, conts, strict=True))])
    _, nll, n = step_loss(model.train(), batch.src_ids, batch.src_pad_mask, batch.tgt_in, batch.tgt_out, 0.0,
                          keep=batch.tgt_keep)
    assert int(n) == sum(map(len, conts))
    theirs = 0.0
    for p, c in zip(prompts, conts, strict=True):
        ids = torch.tensor([p + c])
        labels = torch.tensor([[-100] * len(p) + c])
        with torch.no_grad():
            theirs += float(hf(input_ids=ids, labels=labels).loss) * len(c)
    assert abs(float(nll.detach()) - theirs) < 1e-4 * theirs, (float(nll.detach()), theirs)


@pytest.mark.slow
def test_lora_sft_learns_keeps_its_prompt_and_exports_a_model_that_stops(instruct, make_cfg, tmp_path):
    path, hf, ckpt, corpus = instruct
    common = [f"train.init_from={ckpt}", "data=bible_es_en", f"data.corpus.path={corpus}", "data.corpus.name=toy",
              "logger=csv", "optim.lr=1e-2",
              "optim.warmup_steps=5", "data.max_tokens=1024", "data.max_source_len=40", "data.max_target_len=16",
              "trainer.precision=32", "train.val_every_n_steps=20", "train.checkpoint_every_n_steps=20",
              "train.quick_eval_size=0", "train.lora.r=8", "experiment=smoke", "trainer.max_steps=60", *CHAT]
    out = tmp_path / "run"
    result = train(make_cfg("train", common, out=out))
    assert result["step"] == 60
    from seqlab.tracking.results import read_val_curve

    curve = read_val_curve(out / "csv" / "metrics.csv")
    assert curve[-1][1] < curve[0][1], curve
    model, tokenizer, info = load_for_inference(result["last"])
    assert info.prompt["chat"] is True and info.prompt["template"] == "say {source}"
    # translate asks with the checkpoint's own prompt; the merged export gives generate the same outputs
    lines = ["fox dog", "nine time", "quick brown"]
    out_text = io.StringIO()
    run_translate(make_cfg("translate", [f"ckpt={result['last']}", "decoding.max_length=12"]),
                  stdin=io.StringIO("".join(s + "\n" for s in lines)), stdout=out_text)
    ours = out_text.getvalue().split("\n")[:-1]
    from seqlab.app.export import main as export_main

    folder = tmp_path / "export"
    assert export_main(["--ckpt", str(result["last"]), "--out", str(folder)]) == 0
    exported = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    stopped = 0
    for line, text in zip(lines, ours, strict=True):
        ids = hf_tok.apply_chat_template([{"role": "user", "content": f"say {line}"}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)
        with torch.no_grad():
            new = exported.generate(**ids, max_new_tokens=12, do_sample=False)[0, ids["input_ids"].shape[1]:]
        stopped += int(new[-1]) in exported.generation_config.eos_token_id
        assert hf_tok.decode(new, skip_special_tokens=True).replace("\n", " ") == text, line
    assert stopped, "the fine-tuned model never ended a row within 12 tokens"
    from seqlab.app.evaluate import run_evaluation

    record = run_evaluation(make_cfg("eval", [f"ckpt={result['last']}", "logger=none", "decoding=greedy",
                                              "decoding.max_length=12", "n_bootstrap=0"], out=tmp_path / "eval"))
    assert record["prompt"]["chat"] is True and record["prompt"]["template"] == "say {source}"  # its own prompt
    assert record["metrics"]["bleu"] >= 0.0 and record["metrics"]["ref_logprob_per_token"] < 0.0
