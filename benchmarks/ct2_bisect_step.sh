#!/usr/bin/env bash
# One step of `git bisect run` over the families bench's ratio (benchmarks/ct2_bisect.py), run from a worktree:
#   git -C ../seqlab-bisect bisect start <slow> <fast>
#   git -C ../seqlab-bisect bisect run "$PWD/benchmarks/ct2_bisect_step.sh" 0.82
# with this checkout's virtualenv; exit 0 (good: CTranslate2 / seqlab above THRESHOLD, seqlab as fast as at
# the good end), 1 (bad), 125 (this revision does not run: skipped). Each step's JSON line goes to
# $BISECT_LOG (default /tmp/ct2_bisect.jsonl) with its commit.
set -u
threshold=${1:?usage: ct2_bisect_step.sh THRESHOLD [ROUNDS]}
rounds=${2:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
tree=$(git rev-parse --show-toplevel)
commit=$(git rev-parse --short HEAD)
line=$(PYTHONPATH="$tree/src" "$here/.venv/bin/python" "$here/benchmarks/ct2_bisect.py" --rounds "$rounds" 2>/dev/null | tail -1)
[ -n "$line" ] || exit 125
echo "{\"commit\": \"$commit\", \"result\": $line}" >> "${BISECT_LOG:-/tmp/ct2_bisect.jsonl}"
ratio=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["ct2_over_seqlab"])' "$line")
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$ratio" "$threshold"
