#!/usr/bin/env bash
# Train the norm_position x positions x tie_embeddings grid for a short budget, then evaluate
# every run with greedy and beam-5 decoding.
# Usage: sweep_arch.sh PYTHON ["extra train overrides"]
# Environment: SEEDS (1: training seeds per variant, aggregated by the report), EXPERIMENT (mt_bible_small), BUDGET (00:00:04:00, DD:HH:MM:SS per run), LIMIT (300 test
# sentences), SWEEP_DIR (where the runs go), EVAL_ARGS (extra evaluation overrides)
set -uo pipefail  # no -e: a failed job is counted and the others still run
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
failed=()
# shellcheck disable=SC2086
"$PY" pipelines/train.py -m experiment="$EXPERIMENT" \
  model.norm_position=pre,post model.positions=sinusoidal,learned model.tie_embeddings=none,decoder,all \
  seed="$SEED_LIST" \
  trainer.max_time="$BUDGET" train.quick_eval_size=0 logger.group="$GROUP" hydra.sweep.dir="$SWEEP" $EXTRA \
  || failed+=("training (see the multirun's summary above)")
for run in "$SWEEP"/*/; do
  if [ -f "$run/checkpoints/best.ckpt" ] || [ -f "$run/checkpoints/last.ckpt" ]; then
    # shellcheck disable=SC2086
    "$PY" pipelines/evaluate.py -m ckpt="$run" decoding=greedy,beam split=test limit="$LIMIT" \
      logger.group="$GROUP" ${EVAL_ARGS:-} || failed+=("evaluation of $run")
  else
    failed+=("$run: no checkpoint")
  fi
done
n_runs=$(find "$SWEEP" -mindepth 1 -maxdepth 1 -type d | wc -l)
echo "sweep-arch: $n_runs runs in $SWEEP, ${#failed[@]} failures" >&2
for f in "${failed[@]}"; do echo "  failed: $f" >&2; done
((${#failed[@]} == 0))
