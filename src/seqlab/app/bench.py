"""`make bench`: seqlab against Hugging Face MarianMTModel, same shapes, batches and precision
(seqlab.analysis.bench measures; this command writes the JSON and prints the table).

seqlab bench [out=results/bench.json] [ckpt=RUN_DIR] [scaling=true] [positions=true] [profile=true] [bench.batch=64 ...]
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from seqlab.analysis.bench import run_bench
from seqlab.analysis.speed import BenchConfig
from seqlab.app.cli import reraise
from seqlab.app.configs import plain, typed
from seqlab.app.store import CONF_DIR
from seqlab.io import atomic_write_text


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="bench")
def main(cfg: DictConfig) -> None:
    try:
        bench = typed(BenchConfig, plain(cfg.bench), "bench")
        result = run_bench(bench, cfg.ckpt, cfg.scaling, cfg.positions, cfg.profile)
    except Exception as err:
        reraise("bench", err)
    out = Path(cfg.out)
    atomic_write_text(out, json.dumps(result.to_dict(), indent=2, default=str))
    print(result.table())
    print(f"wrote {out}")


def run() -> int:
    """`seqlab bench`."""
    main()
    return 0
