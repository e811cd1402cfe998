"""Chat templates and few-shot prompts (data.chat, data.prompting): the instruct families' templates
(tests/fixtures/chat_templates: Qwen2.5's, Llama 3.1's, Gemma 2's and 3's, Phi-3's, Mistral-Instruct's) render
byte-identically to transformers' `apply_chat_template(..., add_generation_prompt=True)`, with and without a
system message, with 0, 1 and 5 shots; a template's own refusal is named with its folder; plain few-shot
prompts put the shots as lines before the query."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqlab.config import ConfigError
from seqlab.data.chat import ChatTemplate, ChatTemplateError
from seqlab.data.prompting import Prompt, PromptSettings, draw_shots

transformers = pytest.importorskip("transformers")
from tokenizers import ByteLevelBPETokenizer  # noqa: E402

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
# each family's special tokens as its tokenizer names them
SPECIAL = {"qwen2_5": dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"),
           "llama3_1": dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"),
           "gemma2": dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"),
           "gemma3": dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"),
           "phi3": dict(bos_token="<s>", eos_token="<|endoftext|>"),
           "mistral_instruct": dict(bos_token="<s>", eos_token="</s>")}
NO_SYSTEM = {"gemma2"}  # its template refuses a system message
POOL = [("la casa es grande", "the house is big"), ("  el perro come  ", "the dog eats"), ("hola", "hello"),
        ("buenos días, señor", "good morning, sir"), ("{source} no es un hueco", "{source} is not a slot"),
        ("tres\nlíneas\naquí", "three\nlines\nhere"), ("¿qué?", "what?")]


def hf_tokenizer(name: str):
    bpe = ByteLevelBPETokenizer()
    special = sorted(set(SPECIAL[name].values()))
    bpe.train_from_iterator([s for pair in POOL for s in pair], vocab_size=280, special_tokens=special)
    template = (TEMPLATES / f"{name}.jinja").read_text()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, chat_template=template,
                                                **SPECIAL[name])


def ours(hf) -> ChatTemplate:
    """What `seqlab import` keeps of the tokenizer (interop.hf_tokenizers.chat_of)."""
    from seqlab.interop.hf_tokenizers import chat_of

    out = chat_of(hf, Path("/models/instruct"))
    assert out is not None
    return out


@pytest.mark.parametrize("shots", [0, 1, 5])
@pytest.mark.parametrize("system", [None, "Translate Spanish to English. Answer with the translation only."])
@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_a_chat_prompt_renders_as_apply_chat_template(name, system, shots):
    hf = hf_tokenizer(name)
    settings = PromptSettings(template="Translate from {src_lang} to {tgt_lang}:\n{source}", chat=True,
                              system=system, shots=shots, source_language="Spanish", target_language="English",
                              variables={"date_string": "04 Dec 2026"} if name == "llama3_1" else {})
    prompt = Prompt(settings, draw_shots(POOL, settings, "eval.prompt"), ours(hf))
    source = "el gato duerme"
    messages = prompt.messages(source)
    assert len(messages) == (system is not None) + 2 * shots + 1
    if system is not None and name in NO_SYSTEM:
        with pytest.raises(Exception, match="System role not supported"):
            hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        with pytest.raises(ChatTemplateError, match=r"/models/instruct: its chat template does not render .*System "
                                                    "role not supported"):
            prompt.text(source)
        return
    theirs = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **settings.variables)
    assert prompt.text(source) == theirs
    ids = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, **settings.variables)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert hf(prompt.text(source), add_special_tokens=False)["input_ids"] == list(ids)  # tokenized without adding


def test_a_template_that_is_not_jinja_is_named_with_its_folder():
    bad = ChatTemplate("{% for m in messages %}{{ m.content }", {}, "/models/broken")
    with pytest.raises(ChatTemplateError, match="/models/broken: its chat template is not valid Jinja"):
        bad.render([{"role": "user", "content": "hi"}])


def test_plain_shots_are_lines_before_the_query_and_drawn_once_by_seed():
    settings = PromptSettings(template="{src_lang}: {source}\n{tgt_lang}:", shots=2, source_language="Spanish",
                              target_language="English")
    shots = draw_shots(POOL, settings, "eval.prompt")
    assert shots == draw_shots(POOL, settings, "eval.prompt")  # the seed fixes them
    assert shots != draw_shots(POOL, PromptSettings(**{**settings.to_dict(), "shots_seed": 1}), "eval.prompt")
    text = Prompt(settings, shots).text("el gato")
    (s1, t1), (s2, t2) = shots
    assert text == f"Spanish: {s1}\nEnglish: {t1}\nSpanish: {s2}\nEnglish: {t2}\nSpanish: el gato\nEnglish:"


@pytest.mark.parametrize(("change", "message"), [
    ({"template": "no slot"}, "eval.prompt.template='no slot' must hold {source} exactly once"),
    ({"template": "{src_lang}: {source}"}, "holds {src_lang}: set eval.prompt.source_language"),
    ({"shots": -1}, "eval.prompt.shots=-1 must be >= 0"),
    ({"shots": 1, "shots_split": "test"}, "never from test"),
    ({"system": "be brief"}, "eval.prompt.system is a chat message; set eval.prompt.chat=true"),
    ({"variables": {"date_string": "x"}}, "eval.prompt.variables are a chat template's"),
    ({"shots": "two"}, "eval.prompt.shots='two' must be an integer"),
    ({"chatty": True}, "unknown key"),
])
def test_bad_prompt_settings_are_refused_by_key(change, message):
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}").replace("?", r"\?")):
        PromptSettings.of(change, "eval.prompt")


def test_more_shots_than_the_split_has_and_chat_without_a_template_are_refused():
    with pytest.raises(ConfigError, match="eval.prompt.shots=9 but the validation split has only 7 examples"):
        draw_shots(POOL, PromptSettings(shots=9), "eval.prompt")
    with pytest.raises(ConfigError, match="prompt.chat=true: this checkpoint's tokenizer has no chat template"):
        Prompt(PromptSettings(chat=True))
