"""A checkpoint as a Hugging Face `save_pretrained` folder (`seqlab export --ckpt RUN --out DIR`)
or a CTranslate2 model directory (`--format ctranslate2 [--quantization int8]`, interop.ct2).

The folder holds the family's config and `model.safetensors` (interop.hf_export: an imported model goes back
to its family, a seqlab model to the family whose shape it has, Marian for seqlab's default variants; the
same logits), `generation_config.json` with the decoding defaults given here (seqlab's names mapped onto
HF's by interop.generation, the inverse of the import's reading), and the tokenizer: an imported family's as it
came (`tokenizer.json`, or Marian's and M2M100's SentencePiece files and vocab.json, with the family's
tokenizer config files), or seqlab's own laid out as `MarianTokenizer` reads it: `source.spm` /
`target.spm` and `vocab.json` (piece -> id, seqlab's ids; `target_vocab.json` too for separate
vocabularies). So `AutoTokenizer.from_pretrained(DIR)` and `AutoModelForSeq2SeqLM.from_pretrained(DIR)`
reproduce seqlab's tokenization and outputs (tested). A decoder-only model seqlab trained goes out as the causal
LM it is, its source-then-target layout as the folder's chat template (interop.causal_export).
"""

from __future__ import annotations

from pathlib import Path

from seqlab.checkpoint import load_for_inference, read_checkpoint
from seqlab.decoding import DecodingConfig
from seqlab.interop import causal_export
from seqlab.interop.generation import generation_config
from seqlab.interop.hf_export import write_family
from seqlab.io import atomic_write_text


def export(checkpoint: str | Path, out: str | Path, decoding: DecodingConfig | None = None) -> Path:
    """Write the save_pretrained folder of a seqlab checkpoint; returns the folder."""
    from transformers import GenerationConfig

    model, tokenizer, info = load_for_inference(checkpoint)
    out = Path(out)
    layout_files = None  # a decoder-only model seqlab trained: its tokenizer and layout, checked before writing
    if causal_export.needs_layout(model):
        model = causal_export.as_causal_lm(model)
        layout_files = causal_export.tokenizer_files(tokenizer, model.cfg.max_positions)
    write_family(model, out, read_checkpoint(info.path)["seqlab"].get("family"))
    if decoding is None:  # the checkpoint's own defaults (an imported model's generation config), else greedy
        decoding = DecodingConfig(**info.decoding) if info.decoding else DecodingConfig()
    GenerationConfig(**generation_config(decoding, model.cfg)).save_pretrained(out)
    if layout_files is None:
        tokenizer.write_hf(out)
    for name, text in (layout_files or {}).items():
        atomic_write_text(out / name, text)
    return out
