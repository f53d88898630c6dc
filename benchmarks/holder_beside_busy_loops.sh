#!/usr/bin/env bash
# Issue 51, point 4: the Hugging Face Trainer holder case (tests/e2e/test_memleak_holders.py, frameworks tier)
# N times in a row beside one busy loop per core; each loop is started here and ended by its pid.
# Usage: benchmarks/holder_beside_busy_loops.sh [N] [PYTHON]   (PYTHON: a venv with the frameworks extra)
set -u
cd "$(dirname "$0")/.."
n=${1:-10}
py=${2:-.venv/bin/python}
hogs=()
for _ in $(seq 1 "$(nproc)"); do python3 -c "while True: pass" & hogs+=($!); done
trap 'kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null' EXIT
for i in $(seq 1 "$n"); do
  out=$(timeout 400 "$py" -m pytest -q -n 0 -p no:cacheprovider tests/e2e/test_memleak_holders.py \
        -k hugging_face_trainer_subclass 2>&1 | tail -1)
  echo "run $i: $out; $(uptime | sed 's/.*load/load/')"
done
