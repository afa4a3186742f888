#!/usr/bin/env bash
# The Python package against the C++ calls on the same work (solve, and recompute of a 32k-token
# head) and against the NumPy peer baseline (../shared/bench/numpy_recompute_ref.py) on the same
# instance: bench/bench_python.py, run with Debian's python3 on the build tree's package.
#
# Usage: bench/run_python.sh [--build DIR] [bench_python.py options: --tokens T --allocations E
#                            --rounds N --repeats R --solve-heads H --budget B --json FILE]
# Needs the targets _tierlab, tierlab and bench_recompute_cpu (-DTIERLAB_BENCH=ON).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$REPO/build"
if [[ "${1:-}" == "--build" ]]; then BUILD="$(cd "$2" && pwd)"; shift 2; fi
SHARED=""
for cand in "$REPO/../shared" "$REPO/shared" /work/shared; do
  if [[ -f "$cand/bench/numpy_recompute_ref.py" ]]; then SHARED="$(cd "$cand" && pwd)"; break; fi
done
[[ -n "$SHARED" ]] || { echo "run_python.sh: cannot find shared/bench/numpy_recompute_ref.py" >&2; exit 1; }
cmake --build "$BUILD" --target bench_recompute_cpu >&2  # not in the default build; a no-op when up to date
[[ -x "$BUILD/bench/bench_recompute_cpu" ]] || { echo "run_python.sh: build bench_recompute_cpu first" >&2; exit 1; }
[[ -f "$BUILD/python/tierlab/__init__.py" ]] || { echo "run_python.sh: build the Python package first (target _tierlab)" >&2; exit 1; }
# Passive waiting, as bench/run_recompute_cpu.sh: spinning threads hold a core a loaded peer needs.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
echo "uptime: $(uptime)"
echo "numpy BLAS and fp32 limit: $(/usr/bin/python3 "$REPO/bench/blas_probe.py")"
PYTHONPATH="$BUILD/python" /usr/bin/python3 "$REPO/bench/bench_python.py" --build "$BUILD" --shared "$SHARED" --repo "$REPO" "$@"
echo "uptime: $(uptime)"
