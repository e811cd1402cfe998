#!/usr/bin/env bash
# The architecture study: each question's variants x SEEDS seeds, every run with the same step budget,
# each evaluated greedily on the whole test split; then the comparison tables (seqlab.study).
# Usage: arch_study.sh PYTHON QUESTION...   (QUESTION: norm_warmup | tying | positions | all)
# Environment: SEEDS (3), STUDY_DIR (outputs/arch_study), TRAIN_ARGS / EVAL_ARGS (extra overrides).
# The budget and schedule live in conf/experiment/arch_study.yaml. Variants share one baseline (the
# experiment's default model); a run whose evaluation already exists is skipped, so the three questions
# can be run one after the other and the baseline is trained once per seed. Seeds run outermost: a stopped
# study leaves complete seeds behind. A failed run is reported and the study goes on; the exit status
# says whether any failed.
set -uo pipefail
PY=${1:?usage: arch_study.sh PYTHON QUESTION...}
shift
QUESTIONS=${*:-all}
SEEDS=${SEEDS:-3}
STUDY=${STUDY_DIR:-outputs/arch_study}

# variant name -> train overrides (the baseline has none)
declare -A VARIANT=(
  [baseline]=""
  [post_nowarmup]="optim.warmup_steps=0"
  [pre]="model.norm_position=pre"
  [pre_nowarmup]="model.norm_position=pre optim.warmup_steps=0"
  [tie_none]="model.tie_embeddings=none"
  [tie_decoder]="model.tie_embeddings=decoder"
  [learned_positions]="model.positions=learned"
)
declare -A QUESTION=(
  [norm_warmup]="baseline post_nowarmup pre pre_nowarmup"
  [tying]="baseline tie_none tie_decoder"
  [positions]="baseline learned_positions"
)
[[ "$QUESTIONS" == all ]] && QUESTIONS="norm_warmup tying positions"

variants=()
for q in $QUESTIONS; do
  [[ -n "${QUESTION[$q]:-}" ]] || { echo "unknown question '$q' (norm_warmup | tying | positions | all)" >&2; exit 2; }
  for v in ${QUESTION[$q]}; do [[ " ${variants[*]} " == *" $v "* ]] || variants+=("$v"); done
done

failed=()
for ((seed = 0; seed < SEEDS; seed++)); do
  for v in "${variants[@]}"; do
    run="$STUDY/runs/$v-seed$seed"
    if compgen -G "$STUDY/results/$v-seed$seed/*/metrics.json" > /dev/null \
        && grep -q '"status": "ok"' "$STUDY"/results/"$v-seed$seed"/*/metrics.json; then
      echo "== $v seed $seed: done"; continue
    fi
    echo "== $v seed $seed: training"
    # shellcheck disable=SC2086
    if ! "$PY" pipelines/train.py experiment=arch_study seed="$seed" run_name="arch_$v" \
        hydra.run.dir="$run" ${VARIANT[$v]} ${TRAIN_ARGS:-}; then
      failed+=("$v-seed$seed (training)"); continue
    fi
    # shellcheck disable=SC2086
    "$PY" pipelines/evaluate.py ckpt="$run" decoding=greedy split=test logger=csv \
        results_dir="$STUDY/results" ${EVAL_ARGS:-} || failed+=("$v-seed$seed (evaluation)")
  done
done
"$PY" -m seqlab.study "$STUDY" --questions $QUESTIONS || failed+=("summary")
if ((${#failed[@]})); then
  echo "arch study: ${#failed[@]} failed: ${failed[*]}" >&2
  exit 1
fi
echo "arch study: every run finished"
