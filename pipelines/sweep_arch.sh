#!/usr/bin/env bash
# Train the norm_position x positions x tie_embeddings grid for a short budget, then evaluate
# every run with greedy and beam-5 decoding.
# Usage: sweep_arch.sh PYTHON ["extra train overrides"]
# Environment: SEEDS (1: training seeds per variant, aggregated by the report), EXPERIMENT (mt_bible_small), BUDGET (00:00:04:00, DD:HH:MM:SS per run), LIMIT (300 test
# sentences), SWEEP_DIR (where the runs go), EVAL_ARGS (extra evaluation overrides)
set -euo pipefail
PY=${1:-python}
EXTRA=${2:-}
EXPERIMENT=${EXPERIMENT:-mt_bible_small}
BUDGET=${BUDGET:-00:00:04:00}
LIMIT=${LIMIT:-300}
SEEDS=${SEEDS:-1}
SEED_LIST=$(seq -s, 0 $((SEEDS - 1)))
STAMP=$(date +%Y-%m-%d_%H-%M-%S)
SWEEP=${SWEEP_DIR:-outputs/sweep_arch/$STAMP}
GROUP=sweep_arch-$STAMP
# shellcheck disable=SC2086
"$PY" pipelines/train.py -m experiment="$EXPERIMENT" \
  model.norm_position=pre,post model.positions=sinusoidal,learned model.tie_embeddings=none,decoder,all \
  seed="$SEED_LIST" \
  trainer.max_time="$BUDGET" train.quick_eval_size=0 logger.group="$GROUP" hydra.sweep.dir="$SWEEP" $EXTRA
for run in "$SWEEP"/*/; do
  if [ -f "$run/checkpoints/best.ckpt" ] || [ -f "$run/checkpoints/last.ckpt" ]; then
    # shellcheck disable=SC2086
    "$PY" pipelines/evaluate.py -m ckpt="$run" decoding=greedy,beam split=test limit="$LIMIT" \
      logger.group="$GROUP" ${EVAL_ARGS:-}
  fi
done
