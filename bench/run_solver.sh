#!/usr/bin/env bash
# Runs bench_solver side by side with its peers on the same instance:
#   the NumPy Lagrangian bisection (../shared/bench/numpy_lagrangian_ref.py) and CBC.
# The weights are the script's own: w = default_rng(SEED).lognormal(0, 2, ITEMS), dumped
# here as raw float64 with the same generator call, so both sides solve one instance.
#
# Usage: bench/run_solver.sh [BUILD_DIR]   (env: ITEMS, BUDGET, REPS, REF_REPS, SEED,
#                                           CBC_ITEMS, GREEDY=1, PYTHON)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
build="${1:-$root/build}"
bin="$build/bench/bench_solver"
ITEMS="${ITEMS:-8388608}"
BUDGET="${BUDGET:-2.0}"
REPS="${REPS:-7}"
REF_REPS="${REF_REPS:-1}"
SEED="${SEED:-0}"
CBC_ITEMS="${CBC_ITEMS:-20000}"
PYTHON="${PYTHON:-/usr/bin/python3}"
shared=""
for cand in "$root/../shared" "$root/shared" /work/shared; do
  if [ -f "$cand/bench/numpy_lagrangian_ref.py" ]; then shared="$(cd "$cand" && pwd)"; break; fi
done
[ -n "$shared" ] || { echo "run_solver.sh: cannot find shared/bench/numpy_lagrangian_ref.py" >&2; exit 1; }
cmake --build "$build" --target bench_solver >&2  # not in the default build; a no-op when up to date
[ -x "$bin" ] || { echo "run_solver.sh: $bin missing after building bench_solver (cmake -DTIERLAB_BENCH=ON)" >&2; exit 1; }
command -v cbc >/dev/null || { echo "run_solver.sh: cbc not found (apt-get install coinor-cbc); CBC part skipped" >&2; CBC_ITEMS=0; }

# The NumPy baseline's BLAS (bench/blas_probe.py; the bisection is elementwise, so it matters
# little here, but every baseline says what it ran on).
echo "numpy BLAS and fp32 limit: $("$PYTHON" "$here/blas_probe.py" --n 1024 --repeats 3)" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PYTHON" - "$ITEMS" "$SEED" "$work/weights.f64" <<'PY'
import sys
import numpy as np
items, seed, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
# The same generator and call as numpy_lagrangian_ref.py main().
w = np.random.default_rng(seed).lognormal(mean=0.0, sigma=2.0, size=items)
w.astype(np.float64).tofile(path)
PY
extra=()
[ "${GREEDY:-0}" = 1 ] && extra+=(--greedy)
"$bin" --weights "$work/weights.f64" --items "$ITEMS" --budget "$BUDGET" --reps "$REPS" --seed "$SEED" \
  --python "$PYTHON" --ref "$shared/bench/numpy_lagrangian_ref.py" --ref-reps "$REF_REPS" \
  --cbc-items "$CBC_ITEMS" --workdir "$work" "${extra[@]}"
