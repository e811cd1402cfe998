"""COMET's cost in an evaluation (`seqlab bench comet=true`): scoring a sweep of systems on one test set, and
MBR with a COMET utility, seqlab against unbabel-comet's `predict` and comet-mbr on the same model and inputs.

The model is a random COMET regression model at a small XLM-R shape (no weights to download), written in the
library's folder layout with a Unigram tokenizer trained on the corpus; the inputs are the Bible test set's
Spanish sources and English references, its King James verses as one system and four systems made from them
by dropping every k-th word (k = 3..6). unbabel-comet cannot be installed beside seqlab: its side runs in
its own environment (`comet_python=.venv-comet/bin/python`, built by `make comet-fixtures`) through
benchmarks/comet_library.py, and is left out without it. Every score of the two is compared (max |diff|).
"""

from __future__ import annotations

import gzip
import json
import logging
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from seqlab.bench.speed import BenchConfig
from seqlab.data.corpora import embedded_dir

log = logging.getLogger("seqlab.bench")
ROOT = Path(__file__).resolve().parents[3]
SHAPE = dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=4, intermediate_size=1024,
             max_position_embeddings=514)
SEGMENTS, MBR_SOURCES, MBR_CANDIDATES, BATCH = 200, 16, 16, 16


@dataclass
class NeuralTiming:
    task: str  # sweep: score every system; mbr: the COMET utility of every candidate pair
    items: int  # segments x systems, or sources x candidates^2 pairs
    seqlab_s: float
    encoded: int  # sentences seqlab's encoder computed (the rest came from its cache)
    library_s: float | None = None
    max_diff: float | None = None  # largest |seqlab - library| over every score

    @property
    def x_library(self) -> float | None:
        return None if self.library_s is None else self.library_s / self.seqlab_s


def inputs() -> dict[str, Any]:
    with gzip.open(embedded_dir() / "bible_es_en" / "test.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line)["translation"] for line in f][:SEGMENTS]
    kjv = [r["en-kjv"] for r in rows]
    systems = [kjv] + [[" ".join(w for i, w in enumerate(t.split()) if (i + 1) % k) for t in kjv] for k in (3, 4, 5, 6)]
    candidates = [[" ".join(w for i, w in enumerate(r["en"].split()) if (i + j) % (2 + j % 5)) for j in
                   range(MBR_CANDIDATES)] for r in rows[:MBR_SOURCES]]
    return {"sources": [r["es"] for r in rows], "references": [r["en"] for r in rows], "systems": systems,
            "mbr_sources": [r["es"] for r in rows[:MBR_SOURCES]], "mbr_candidates": candidates}


def tokenizer_folder(folder: Path) -> None:
    """A Unigram tokenizer with XLM-R's special tokens and pair template, trained on the corpus's train split."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    with gzip.open(embedded_dir() / "bible_es_en" / "train.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line)["translation"] for _, line in zip(range(5000), f, strict=False)]
    tok = Tokenizer(models.Unigram())
    tok.normalizer, tok.pre_tokenizer = normalizers.NFKC(), pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator([r[k] for r in rows for k in ("es", "en")],
                            trainers.UnigramTrainer(vocab_size=4000, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                    unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    special = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
               "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<unk>", "model_max_length": 512}
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "XLMRobertaTokenizer", **special}))


def comet_folder(root: Path, seed: int) -> Path:
    """A random COMET regression model (layers mixed by softmax, layer norm, average pooling) in the library's
    layout: the encoder folder beside it, hparams.yaml and checkpoints/model.ckpt."""
    import yaml
    from transformers import XLMRobertaConfig, XLMRobertaModel

    tokenizer_folder(root / "encoder")
    torch.manual_seed(seed)
    config = XLMRobertaConfig(vocab_size=4000, pad_token_id=1, bos_token_id=0, eos_token_id=2, **SHAPE)
    encoder = XLMRobertaModel(config, add_pooling_layer=False)
    encoder.config.save_pretrained(root / "encoder")
    layers, d = SHAPE["num_hidden_layers"] + 1, SHAPE["hidden_size"]
    state = {f"encoder.model.{k}": v for k, v in encoder.state_dict().items()}
    state.update({f"layerwise_attention.scalar_parameters.{i}": torch.randn(1) for i in range(layers)})
    state["layerwise_attention.gamma"] = torch.ones(1)
    for i, (n_in, n_out) in enumerate(((6 * d, 512), (512, 128), (128, 1))):
        linear = torch.nn.Linear(n_in, n_out)
        state[f"estimator.ff.{3 * i}.weight"], state[f"estimator.ff.{3 * i}.bias"] = linear.weight, linear.bias
    hparams = {"class_identifier": "regression_metric", "encoder_model": "XLM-RoBERTa",
               "pretrained_model": str(root / "encoder"), "layer": "mix", "layer_transformation": "softmax",
               "layer_norm": True, "pool": "avg", "hidden_sizes": [512, 128], "activations": "Tanh",
               "final_activation": None, "dropout": 0.1}
    folder = root / "comet"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "hparams.yaml").write_text(yaml.safe_dump(hparams))
    torch.save({"state_dict": {k: v.detach().clone() for k, v in state.items()}, "hyper_parameters": hparams,
                "pytorch-lightning_version": "2.6.6", "epoch": 0, "global_step": 0},
               folder / "checkpoints" / "model.ckpt")
    return folder


def seqlab_side(folder: Path, data: dict[str, Any]) -> tuple[list[list[float]], list, float, float, int, int]:
    from seqlab.metrics.neural.comet import load_comet

    model = load_comet(folder)
    start = time.perf_counter()
    scores = [model.score(data["sources"], hyps, data["references"]) for hyps in data["systems"]]
    sweep_s, sweep_encoded = time.perf_counter() - start, model.encoded
    model = load_comet(folder)  # MBR from a cold cache, as comet-mbr starts
    start = time.perf_counter()
    matrices = [model.pairwise(s, c, c) for s, c in zip(data["mbr_sources"], data["mbr_candidates"], strict=True)]
    return scores, matrices, sweep_s, time.perf_counter() - start, sweep_encoded, model.encoded


def library_side(python: str, folder: Path, data: dict[str, Any], root: Path) -> dict[str, Any] | None:
    spec = {**data, "checkpoint": str(folder / "checkpoints" / "model.ckpt"), "batch": BATCH,
            "threads": torch.get_num_threads()}
    (root / "inputs.json").write_text(json.dumps(spec))
    script = ROOT / "benchmarks" / "comet_library.py"
    try:
        out = subprocess.run([python, str(script), str(root / "inputs.json")], capture_output=True, text=True,
                             check=True, timeout=3600)
    except (OSError, subprocess.CalledProcessError) as err:
        log.warning("unbabel-comet's side failed (%s): its column is left out", str(err)[:300])
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def neural_bench(cfg: BenchConfig, library_python: str | None) -> list[NeuralTiming]:
    """The sweep and MBR rows; the library's columns where `library_python` runs unbabel-comet."""
    data = inputs()
    with tempfile.TemporaryDirectory(prefix="seqlab-comet-bench-") as tmp:
        folder = comet_folder(Path(tmp), cfg.seed)
        scores, matrices, sweep_s, mbr_s, sweep_encoded, mbr_encoded = seqlab_side(folder, data)
        lib = library_side(library_python, folder, data, Path(tmp)) if library_python else None
    pairs = MBR_SOURCES * MBR_CANDIDATES ** 2
    rows = [NeuralTiming("sweep", SEGMENTS * len(data["systems"]), sweep_s, sweep_encoded),
            NeuralTiming("mbr", pairs, mbr_s, mbr_encoded)]
    if lib is not None:
        rows[0].library_s = lib["sweep_s"]
        rows[0].max_diff = max(abs(a - b) for ours, theirs in zip(scores, lib["scores"], strict=True)
                               for a, b in zip(ours, theirs, strict=True))
        rows[1].library_s = lib["mbr_s"]
        n = MBR_CANDIDATES  # comet-mbr's rule: the mean over the other candidates (self-comparison left out)
        ours = [[float((m[j].sum() - m[j, j]) / (n - 1)) for j in range(n)] for m in matrices]
        rows[1].max_diff = max(abs(a - b) for o, t in zip(ours, lib["mbr"], strict=True)
                               for a, b in zip(o, t, strict=True))
    return rows


def to_dict(rows: list[NeuralTiming]) -> list[dict[str, Any]]:
    return [{**asdict(r), "x_library": r.x_library} for r in rows]
