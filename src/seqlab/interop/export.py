"""A checkpoint as a Hugging Face `save_pretrained` folder (`seqlab export --ckpt RUN --out DIR`)
or a CTranslate2 model directory (`--format ctranslate2 [--quantization int8]`, interop.ct2).

The folder holds the family's config and `model.safetensors` (interop.hf_export: an imported model goes back
to its family, a seqlab model to the family whose shape it has, Marian for seqlab's default variants; the
same logits), `generation_config.json` with the decoding defaults given here (seqlab's names mapped onto
HF's, the inverse of `DecodingConfig.from_generation_config`), and the tokenizer: an imported family's as it
came (`tokenizer.json`, or Marian's and M2M100's SentencePiece files and vocab.json, with the family's
tokenizer config files), or seqlab's own laid out as `MarianTokenizer` reads it: `source.spm` /
`target.spm` and `vocab.json` (piece -> id, seqlab's ids; `target_vocab.json` too for separate
vocabularies). So `AutoTokenizer.from_pretrained(DIR)` and `AutoModelForSeq2SeqLM.from_pretrained(DIR)`
reproduce seqlab's tokenization and outputs (tested).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqlab.checkpoint import load_for_inference, read_checkpoint
from seqlab.config import ConfigError
from seqlab.decoding import DecodingConfig
from seqlab.decoding.options import refusals
from seqlab.decoding.registry import suppressed
from seqlab.interop.hf_export import write_family
from seqlab.model import ModelConfig


def generation_config(cfg: DecodingConfig, model: ModelConfig) -> dict[str, Any]:
    """Hugging Face `GenerationConfig` values equal to `cfg` for an encoder-decoder.

    What `generate` can take of each option is declared with it (decoding.options, consumer `hf`); anything
    else is refused by name. HF's lengths count the decoder start token; without `max_length` (and with
    fairseq's per-source limit at its default) the model's position limit is written.
    """
    problems = refusals(cfg, "hf")
    if problems:
        raise ConfigError("; ".join(problems))
    sample = cfg.method == "sample"
    out: dict[str, Any] = {
        "decoder_start_token_id": model.bos_id, "pad_token_id": model.pad_id, "eos_token_id": model.eos_id,
        "suppress_tokens": suppressed(cfg, model) or None, "bad_words_ids": cfg.bad_words_ids,
        "sequence_bias": cfg.sequence_bias,
        "forced_bos_token_id": cfg.forced_bos_token_id, "renormalize_logits": cfg.renormalize_logits,
        "do_sample": sample, "num_beams": cfg.num_beams, "num_return_sequences": cfg.n_best,
        "max_new_tokens": cfg.max_length or model.max_positions - 1, "min_new_tokens": cfg.min_length or None,
        "no_repeat_ngram_size": cfg.no_repeat_ngram_size or 0, "repetition_penalty": cfg.repetition_penalty or 1.0,
        "forced_eos_token_id": model.eos_id if cfg.force_eos else None,
    }
    if cfg.method == "beam":  # HF refuses beam options without beams
        out.update(length_penalty=cfg.length_penalty, early_stopping=cfg.early_stopping)
        if cfg.num_beam_groups > 1:  # transformers >= 4.56 runs it from its hub repository group-beam-search
            out.update(num_beam_groups=cfg.num_beam_groups, diversity_penalty=cfg.diversity_penalty)
    if cfg.method == "contrastive":  # transformers >= 4.56 runs it from its hub repository contrastive-search
        out.update(penalty_alpha=cfg.penalty_alpha, top_k=cfg.top_k)
    if sample:
        out.update(temperature=cfg.temperature or 1.0, top_k=cfg.top_k or 0, top_p=cfg.top_p or 1.0,
                   min_p=cfg.min_p, typical_p=cfg.typical_p or 1.0, epsilon_cutoff=cfg.epsilon or 0.0,
                   eta_cutoff=cfg.eta or 0.0)
    return out


def export(checkpoint: str | Path, out: str | Path, decoding: DecodingConfig | None = None) -> Path:
    """Write the save_pretrained folder of a seqlab checkpoint; returns the folder."""
    from transformers import GenerationConfig

    model, tokenizer, info = load_for_inference(checkpoint)
    out = Path(out)
    write_family(model, out, read_checkpoint(info.path)["seqlab"].get("family"))
    if decoding is None:  # the checkpoint's own defaults (an imported model's generation config), else greedy
        decoding = DecodingConfig(**info.decoding) if info.decoding else DecodingConfig()
    GenerationConfig(**generation_config(decoding, model.cfg)).save_pretrained(out)
    tokenizer.write_hf(out)
    return out
