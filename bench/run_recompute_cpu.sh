#!/usr/bin/env bash
# CPU recomputation: the NumPy peer baseline (../shared/bench/numpy_recompute_ref.py) and
# tierlab's CPU backend (bench_recompute_cpu), side by side in one run on the same sizes
# and the same instance (bench/numpy_recompute_dump.py writes the reference's data).
#
# Usage: bench/run_recompute_cpu.sh [--build DIR] [--numpy-runs N] [--repeats R]
#                                   [--tokens T] [--dim D] [--kv-heads H] [--group-size G]
#                                   [--queries Q] [--allocations E] [--seed S]
# --build defaults to $REPO/build; the benchmark is built with -DTIERLAB_BENCH=ON.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHARED="$(cd "$REPO/../shared" && pwd)"
PY=/usr/bin/python3
BUILD="$REPO/build"
NUMPY_RUNS=3
REPEATS=5
SIZES=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --numpy-runs) NUMPY_RUNS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --tokens|--dim|--kv-heads|--group-size|--queries|--allocations|--seed) SIZES+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "run_recompute_cpu.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
BENCH="$BUILD/bench/bench_recompute_cpu"
REF="$SHARED/bench/numpy_recompute_ref.py"
[[ -x "$BENCH" ]] || { echo "run_recompute_cpu.sh: $BENCH not found; build the target bench_recompute_cpu (-DTIERLAB_BENCH=ON)" >&2; exit 1; }
[[ -f "$REF" ]] || { echo "run_recompute_cpu.sh: $REF not found (shared/ must sit beside the repository)" >&2; exit 1; }

# Threads that spin while waiting hold a core that a descheduled peer needs: on a shared,
# loaded machine that costs a scheduler slice per barrier. Wait passively unless told.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tierlab_recompute.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "numpy reference: $NUMPY_RUNS run(s) ..." >&2
for ((i = 0; i < NUMPY_RUNS; i++)); do
  "$PY" "$REF" "${SIZES[@]}" > "$WORK/numpy_$i.json"
done
echo "dumping the reference's instance ..." >&2
"$PY" "$REPO/bench/numpy_recompute_dump.py" --out "$WORK/data" "${SIZES[@]}" > "$WORK/dump.json"
echo "tierlab cpu backend: $REPEATS repeat(s) after a warm-up ..." >&2
"$BENCH" --data "$WORK/data" --repeats "$REPEATS" "${SIZES[@]}" > "$WORK/tierlab.json"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$WORK" "$NUMPY_RUNS" "$(nproc)" "$load_before" "$load_after" "$OMP_WAIT_POLICY" <<'EOF'
import json, statistics, sys
work, runs, cores, load_before, load_after, wait = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
npy = [json.load(open(f"{work}/numpy_{i}.json")) for i in range(runs)]
tl = json.load(open(f"{work}/tierlab.json"))
n_ms = 1e3 * statistics.median(r["seconds_per_allocation"] for r in npy)
n_setup = statistics.median(r["setup_seconds"] for r in npy)
t_ms = 1e3 * tl["seconds_per_allocation"]
t_am = 1e3 * tl["seconds_per_allocation_amortized"]
n_err, t_err = npy[0]["mean_rel_error"], tl["mean_rel_error"]
print(f"workload: {tl['kv_heads']} KV heads x {tl['query_heads_per_kv'] * tl['queries_per_head']} query rows, "
      f"T={tl['tokens']}, d={tl['dim']}, variants kivi2/kivi4/exact + evict, {tl['allocations']} allocations")
print(f"machine: {cores} cores, load average {load_before} before, {load_after} after; OMP_WAIT_POLICY={wait}")
print(f"numpy    ({npy[0]['impl']}, median of {runs} runs): {n_ms:9.2f} ms/allocation   setup {n_setup:7.3f} s")
print(f"tierlab  ({tl['impl']}, median of {tl['repeats']}x{tl['allocations']}): {t_ms:9.2f} ms/allocation"
      f"   setup {tl['setup_seconds']:7.3f} s   (setup included, amortized: {t_am:.2f} ms/allocation)")
print(f"speed-up numpy / tierlab: {n_ms / t_ms:.1f}x per allocation, "
      f"{(n_ms + 1e3 * n_setup / tl['allocations']) / t_am:.1f}x with setup amortized")
print(f"mean relative error: numpy {n_err:.10g}, tierlab {t_err:.10g}, relative difference {abs(t_err - n_err) / abs(n_err):.2e}")
print(f"same instance: KIVI keys differing from numpy's: {tl['kivi_elements_differing_from_numpy']}; "
      f"max relative difference of per-allocation errors vs numpy float32 {tl['max_rel_diff_per_allocation_vs_numpy_f32']:.2e}, "
      f"vs the same formula in float64 {tl['max_rel_diff_per_allocation_vs_numpy_f64']:.2e}")
EOF
