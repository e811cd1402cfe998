"""The model boundary: every model the searches see serves `DecodingModel`, the architecture reaches the code
around the models only as their `RowLayout`, and no module outside `seqlab.model` compares it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.decoding.ensemble import Ensemble
from seqlab.model import DecodingModel, ModelConfig, build_model
from seqlab.model.layout import CAUSAL_LM, DECODER_ONLY, ENCODER_DECODER, PREFIX_LM

SRC = Path(__file__).resolve().parents[2] / "src" / "seqlab"
SMALL = dict(src_vocab_size=30, d_model=16, n_heads=2, d_ff=32, decoder_layers=1)
VARIANTS = {  # (architecture, start) -> the layout declared for it
    ("encoder_decoder", "bos"): ENCODER_DECODER,
    ("decoder_only", "bos"): DECODER_ONLY,
    ("decoder_only", "prompt"): CAUSAL_LM,
    ("prefix_lm", "bos"): PREFIX_LM,
}


def model_of(architecture: str, start: str) -> torch.nn.Module:
    layers = 1 if architecture == "encoder_decoder" else 0
    return build_model(ModelConfig(**SMALL, encoder_layers=layers, architecture=architecture, start=start))


@pytest.mark.parametrize(("architecture", "start"), list(VARIANTS))
def test_every_model_and_an_ensemble_serve_the_protocol_with_their_layout(architecture, start):
    model = model_of(architecture, start)
    assert isinstance(model, DecodingModel)
    assert model.layout is VARIANTS[architecture, start]
    ensemble = Ensemble([model, model_of(architecture, start)])
    assert isinstance(ensemble, DecodingModel)
    assert ensemble.layout is model.layout
    assert ensemble.attention_modules() == []  # no one map is the ensemble's
    assert ensemble.step_at_blocker() == "an ensemble decodes with each model's own step"
    kinds = {kind for _, kind in model.attention_modules()}
    assert kinds == ({"decoder_self"} if model.layout.one_sequence else {"encoder", "decoder_self", "cross"})
    assert len(model.blocks()) == (2 if architecture == "encoder_decoder" else 1)


def test_how_a_row_starts_and_what_its_positions_count():
    ids = torch.tensor([[5, 6, 7], [8, 9, 0]])
    pad = torch.tensor([[False, False, False], [False, False, True]])
    same = ENCODER_DECODER.split(ids, pad, 0)
    assert same[0] is ids and same[1] is pad and same[2] is None
    assert DECODER_ONLY.split(ids, pad, 0)[2] is None
    read, read_pad, first = CAUSAL_LM.split(ids, pad, 0)
    assert first.tolist() == [7, 9]  # each prompt's last real token opens its target
    assert read.tolist() == [[5, 6], [8, 0]] and read_pad.tolist() == [[False, False], [False, True]]
    assert CAUSAL_LM.read_before_target(pad).tolist() == [[False, False, True], [False, True, True]]
    limits = torch.tensor([10, 10])
    assert ENCODER_DECODER.room(limits, pad, 4).tolist() == [10, 10]  # its own positions per stack
    assert DECODER_ONLY.room(limits, pad, 4).tolist() == [1, 2]  # the source takes its share
    with pytest.raises(ConfigError, match="prompt 0 of the batch leaves no room"):
        DECODER_ONLY.room(limits, pad, 3)
    assert (ENCODER_DECODER.prompt_room(8, 3), DECODER_ONLY.prompt_room(8, 3), CAUSAL_LM.prompt_room(8, 3)) == (8, 7, 5)
    with pytest.raises(ConfigError, match="prompt 1 of the batch is empty"):
        CAUSAL_LM.split(ids, torch.tensor([[False, True, True], [True, True, True]]), 0)


def test_export_classes_are_declared_with_the_reason_where_there_is_none():
    assert (ENCODER_DECODER.hf_class, ENCODER_DECODER.ct2_class) == ("AutoModelForSeq2SeqLM", "Translator")
    for layout in (DECODER_ONLY, CAUSAL_LM):
        assert (layout.hf_class, layout.ct2_class) == ("AutoModelForCausalLM", "Generator")
    assert PREFIX_LM.hf_class is None and PREFIX_LM.ct2_class is None
    assert PREFIX_LM.unexportable.startswith("model.architecture=prefix_lm")


def comparisons_of_the_architecture(tree: ast.AST) -> list[int]:
    """Lines that compare `.architecture` or `.start` with a string, read `.one_stack`, or ask
    `isinstance(..., Ensemble)`: the architecture decided outside the boundary."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "one_stack":
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = any(isinstance(o, ast.Attribute) and o.attr in ("architecture", "start") for o in operands)
            if named and any(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands):
                lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
              and any(isinstance(a, ast.Name) and a.id == "Ensemble" for a in ast.walk(node))):
            lines.append(node.lineno)
    return lines


def test_no_module_outside_the_model_package_decides_by_the_architecture():
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        if path.is_relative_to(SRC / "model"):
            continue
        if lines := comparisons_of_the_architecture(ast.parse(path.read_text(), str(path))):
            found[str(path.relative_to(SRC))] = lines
    assert found == {}


def test_the_walk_finds_what_it_looks_for():
    code = ('if cfg.one_stack: pass\nif model.cfg.start == "prompt": pass\nif "prefix_lm" != cfg.architecture: pass\n'
            'if isinstance(model, Ensemble): pass\nif cfg.layout.one_sequence: pass\n')
    assert comparisons_of_the_architecture(ast.parse(code)) == [1, 2, 3, 4]
