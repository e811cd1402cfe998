"""Tiny instruct-model folders in their families' layouts, built with transformers: the tokenizer's special
tokens (<|im_start|>, <|im_end|>, <|eot_id|>, ...), an EOS different from the pad token, generation_config.json's
list of end tokens, and a chat template in tokenizer_config.json. Each model's end tokens are made likely enough
that some of its outputs end within a few tokens, so the tests see which token ended them."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers
from tokenizers import ByteLevelBPETokenizer
from tokenizers.processors import TemplateProcessing

from tests.hf_tokenizer_folders import TEXT

SMALL = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32, intermediate_size=48,
             max_position_embeddings=128)
# a template in the shape of Qwen2.5-Instruct's (system turn by default, <|im_start|>role ... <|im_end|>)
QWEN_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content | trim + '<|im_end|>' + '\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# Llama 3's shape: bos_token first, header ids, <|eot_id|> after each turn
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
    "'<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>", "<|start_header_id|>",
                  "<|end_header_id|>"]


def bpe(special: list[str]) -> ByteLevelBPETokenizer:
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(TEXT, vocab_size=300, min_frequency=1, special_tokens=special)
    return tok


def likelier(model: transformers.PreTrainedModel, ids: list[int], factor: float = 3.0) -> None:
    """The output rows of `ids` scaled (a tied head: the embedding rows too), so the random model ends rows."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
        model.get_output_embeddings().weight[ids] *= factor


def qwen_instruct(root: Path) -> tuple[Path, transformers.PreTrainedModel]:
    """Qwen2.5-Instruct's layout: eos <|im_end|>, pad <|endoftext|> (also the bos of config.json), end tokens
    [<|im_end|>, <|endoftext|>] in generation_config.json, config.json naming only the first."""
    tok = bpe(QWEN_SPECIAL)
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tok._tokenizer, eos_token="<|im_end|>",
                                                  pad_token="<|endoftext|>", chat_template=QWEN_TEMPLATE)
    hf_tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    end, text_end = hf_tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=len(hf_tok), num_key_value_heads=2, eos_token_id=end, bos_token_id=text_end,
        tie_word_embeddings=True, **SMALL))
    likelier(model, [end, text_end])
    model.eval().generation_config = transformers.GenerationConfig(
        bos_token_id=text_end, eos_token_id=[end, text_end], pad_token_id=text_end, do_sample=False,
        max_new_tokens=10)
    return save(root / "qwen_instruct", model, hf_tok)


def llama3_instruct(root: Path) -> tuple[Path, transformers.PreTrainedModel]:
    """Llama 3.x-Instruct's layout: <|begin_of_text|> opens every text (the tokenizer's post-processor), the
    tokenizer's eos <|eot_id|>, no pad token, config.json and generation_config.json listing three end
    tokens [<|end_of_text|>, <|eom_id|>, <|eot_id|>]."""
    tok = bpe(LLAMA3_SPECIAL)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tok._tokenizer, bos_token="<|begin_of_text|>",
                                                  eos_token="<|eot_id|>", chat_template=LLAMA3_TEMPLATE)
    hf_tok.add_special_tokens({"additional_special_tokens": LLAMA3_SPECIAL[1:3] + LLAMA3_SPECIAL[4:]})
    ends = hf_tok.convert_tokens_to_ids(["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"])
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=len(hf_tok), num_key_value_heads=2, bos_token_id=bos, eos_token_id=ends, pad_token_id=None,
        tie_word_embeddings=False, **SMALL))
    likelier(model, ends, 2.5)
    model.eval().generation_config = transformers.GenerationConfig(
        bos_token_id=bos, eos_token_id=ends, do_sample=False, max_new_tokens=10)
    return save(root / "llama3_instruct", model, hf_tok)


def save(out: Path, model: transformers.PreTrainedModel, tok: transformers.PreTrainedTokenizerBase
         ) -> tuple[Path, transformers.PreTrainedModel]:
    model.save_pretrained(out)
    tok.save_pretrained(out)
    assert json.loads((out / "tokenizer_config.json").read_text()).get("chat_template") or \
        (out / "chat_template.jinja").is_file()
    return out, model


INSTRUCT = {"qwen_instruct": qwen_instruct, "llama3_instruct": llama3_instruct}
