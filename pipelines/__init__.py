"""seqlab's experiments: one module per experiment the docs report, each a thin composition of seqlab
commands (stages) and the tables it renders from its archive in results/<name>/.

    python -m pipelines --list              # the experiments
    python -m pipelines NAME [--dry-run]    # run what its archive lacks (make pipeline NAME=...)
    python -m pipelines render [--check]    # write (or check) every table in the docs from the archives

`pipelines` imports seqlab; seqlab never imports it.
"""

from __future__ import annotations

from pipelines import (
    arch_study,
    arch_study_trained,
    beam_curse,
    bench,
    bench_families,
    bench_features,
    bench_finetune,
    bench_gpu,
    bench_int8,
    bench_language_models,
    bench_levers,
    bench_neural,
    bench_norms,
    bench_one_source,
    bench_speculative,
    constraints,
    decoding_sweep,
    distillation,
    lm_workflow,
    mbr,
    mt_bible_small,
    no_repeat,
    quality_aware,
    sum_debian_small,
    truncation,
)
from seqlab.pipeline.core import Pipeline

PIPELINES: dict[str, Pipeline] = {m.PIPELINE.name: m.PIPELINE for m in (
    mt_bible_small, sum_debian_small, decoding_sweep, truncation, mbr, beam_curse, no_repeat, constraints, arch_study,
    arch_study_trained, bench, bench_families, bench_features, bench_gpu, bench_levers, bench_language_models,
    bench_finetune, bench_speculative, bench_neural, bench_norms, bench_one_source, bench_int8, distillation,
    quality_aware, lm_workflow)}
