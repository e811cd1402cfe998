#!/usr/bin/env bash
# Train the norm_position x positions x tie_embeddings grid for a short budget, then evaluate
# every run with greedy and beam-5 decoding. Usage: sweep_arch.sh PYTHON "extra train overrides"
set -euo pipefail
PY=${1:-python}
EXTRA=${2:-}
STAMP=$(date +%Y-%m-%d_%H-%M-%S)
SWEEP=outputs/sweep_arch/$STAMP
# shellcheck disable=SC2086
"$PY" pipelines/train.py -m experiment=mt_bible_small \
  model.norm_position=pre,post model.positions=sinusoidal,learned model.tie_embeddings=none,decoder,all \
  trainer.max_time=00:00:04:00 train.quick_eval_size=0 logger.group=sweep_arch-$STAMP \
  hydra.sweep.dir="$SWEEP" $EXTRA
for run in "$SWEEP"/*/; do
  if [ -f "$run/checkpoints/best.ckpt" ]; then
    "$PY" pipelines/evaluate.py -m ckpt="$run" decoding=greedy,beam split=test \
      logger.group=sweep_arch-$STAMP limit=300
  fi
done
