"""unbabel-comet's side of `seqlab bench comet=true`, run in the library's own environment (make comet-fixtures
builds it: .venv-comet): times its `predict` on each system of a sweep and comet-mbr's embedding and MBR
functions on the same model folder and inputs, and prints the scores and seconds as JSON.

    .venv-comet/bin/python benchmarks/comet_library.py INPUTS.json
"""

from __future__ import annotations

import json
import sys
import time

import torch


def main(path: str) -> None:
    from comet import load_from_checkpoint
    from comet.cli.mbr import build_embeddings, mbr_decoding

    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    torch.set_num_threads(spec["threads"])
    model = load_from_checkpoint(spec["checkpoint"], local_files_only=True).eval()
    start = time.perf_counter()
    scores = []
    for hyps in spec["systems"]:
        samples = [{"src": s, "mt": h, "ref": r} for s, h, r in zip(spec["sources"], hyps, spec["references"],
                                                                                strict=True)]
        scores.append([float(x) for x in model.predict(samples, batch_size=spec["batch"], gpus=0,
                                                       progress_bar=False).scores])
    sweep_s = time.perf_counter() - start
    start = time.perf_counter()
    flat = [c for candidates in spec["mbr_candidates"] for c in candidates]
    n = len(spec["mbr_candidates"][0])
    src_emb, mt_emb = build_embeddings(spec["mbr_sources"], flat, model, spec["batch"])
    matrix = mbr_decoding(src_emb, mt_emb.view(len(spec["mbr_sources"]), n, -1), model)
    mbr_s = time.perf_counter() - start
    print(json.dumps({"scores": scores, "sweep_s": sweep_s, "mbr_s": mbr_s, "mbr": matrix.tolist()}))


if __name__ == "__main__":
    main(sys.argv[1])
