#!/usr/bin/env bash
# CPU recomputation: the NumPy peer baseline (../shared/bench/numpy_recompute_ref.py) and
# tierlab's CPU backend (bench_recompute_cpu), side by side in one run on the same sizes
# and the same instance (bench/numpy_recompute_dump.py writes the reference's data).
#
# Usage: bench/run_recompute_cpu.sh [--build DIR] [--rounds N] [--repeats R] [--load N]
#                                   [--json FILE] [--tokens T] [--dim D] [--kv-heads H]
#                                   [--group-size G] [--queries Q] [--allocations E] [--seed S]
#                                   [--allow-reference-blas]
# NumPy's BLAS is checked first (bench/blas_probe.py, which also measures the machine's fp32
# matrix-product rate): the baseline must run on OpenBLAS (deps/debian-packages.txt), as a NumPy
# of any ordinary install does; Debian's reference BLAS is refused unless --allow-reference-blas.
# --build defaults to $REPO/build; the benchmark is built with -DTIERLAB_BENCH=ON.
# --load N: N competing busy processes (one busy loop each) run during both sides' runs
# (e.g. --load $(nproc): one per core). --json FILE: the summary as JSON too.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHARED=""  # the peer baselines: ../shared beside the repository (as run_solver.sh looks for them)
for cand in "$REPO/../shared" "$REPO/shared" /work/shared; do
  if [[ -f "$cand/bench/numpy_recompute_ref.py" ]]; then SHARED="$(cd "$cand" && pwd)"; break; fi
done
PY=/usr/bin/python3
BUILD="$REPO/build"
ROUNDS=3
REPEATS=3
LOAD=0
JSON=""
SIZES=()
ALLOW_REF=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --load) LOAD="$2"; shift 2 ;;
    --json) JSON="$2"; shift 2 ;;
    --allow-reference-blas) ALLOW_REF=1; shift ;;
    --tokens|--dim|--kv-heads|--group-size|--queries|--allocations|--seed) SIZES+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "run_recompute_cpu.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
BENCH="$BUILD/bench/bench_recompute_cpu"
REF="$SHARED/bench/numpy_recompute_ref.py"
cmake --build "$BUILD" --target bench_recompute_cpu >&2  # not in the default build; a no-op when up to date
[[ -x "$BENCH" ]] || { echo "run_recompute_cpu.sh: $BENCH not found; build the target bench_recompute_cpu (-DTIERLAB_BENCH=ON)" >&2; exit 1; }
[[ -n "$SHARED" && -f "$REF" ]] || { echo "run_recompute_cpu.sh: shared/bench/numpy_recompute_ref.py not found (shared/ must sit beside the repository)" >&2; exit 1; }

# Threads that spin while waiting hold a core that a descheduled peer needs: on a shared,
# loaded machine that costs a scheduler slice per barrier. Wait passively unless told.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tierlab_recompute.XXXXXX")"
BUSY=()
cleanup() {
  [[ ${#BUSY[@]} -gt 0 ]] && kill "${BUSY[@]}" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" "$REPO/bench/blas_probe.py" > "$WORK/blas.json"
blas="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["blas"])' "$WORK/blas.json")"
echo "numpy BLAS: $blas" >&2
if [[ "$blas" != "openblas" && $ALLOW_REF -eq 0 ]]; then
  echo "run_recompute_cpu.sh: NumPy runs on the $blas BLAS, not OpenBLAS: install libopenblas0-pthread (deps/debian-packages.txt) or pass --allow-reference-blas" >&2
  exit 1
fi
echo "dumping the reference's instance ..." >&2
"$PY" "$REPO/bench/numpy_recompute_dump.py" --out "$WORK/data" "${SIZES[@]}" > "$WORK/dump.json"
for ((i = 0; i < LOAD; i++)); do
  ( trap - EXIT; while :; do :; done ) &
  BUSY+=($!)
done
[[ $LOAD -gt 0 ]] && echo "competing load: $LOAD busy processes (pids ${BUSY[*]})" >&2 && sleep 2
# Rounds of (numpy run, tierlab run) back to back, so that each pair meets about the same
# load; the speed-up is the median of the rounds' ratios.
for ((i = 0; i < ROUNDS; i++)); do
  echo "round $((i + 1))/$ROUNDS: numpy reference, then tierlab ($REPEATS repeats after a warm-up) ..." >&2
  "$PY" "$REF" "${SIZES[@]}" > "$WORK/numpy_$i.json"
  "$BENCH" --data "$WORK/data" --repeats "$REPEATS" "${SIZES[@]}" > "$WORK/tierlab_$i.json"
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
if [[ ${#BUSY[@]} -gt 0 ]]; then kill "${BUSY[@]}" 2>/dev/null; BUSY=(); fi

"$PY" - "$WORK" "$ROUNDS" "$(nproc)" "$load_before" "$load_after" "$OMP_WAIT_POLICY" "$LOAD" "$JSON" <<'PYEOF'
import json, statistics, sys
work, rounds, cores, load_before, load_after, wait, busy, json_out = sys.argv[1], int(sys.argv[2]), *sys.argv[3:9]
npy = [json.load(open(f"{work}/numpy_{i}.json")) for i in range(rounds)]
probe = json.load(open(f"{work}/blas.json"))
tls = [json.load(open(f"{work}/tierlab_{i}.json")) for i in range(rounds)]
med = statistics.median
tl = tls[0]
E = tl["allocations"]
n_ms = 1e3 * med(r["seconds_per_allocation"] for r in npy)
n_setup = med(r["setup_seconds"] for r in npy)
t_ms = 1e3 * med(r["seconds_per_allocation"] for r in tls)
t_am = 1e3 * med(r["seconds_per_allocation_amortized"] for r in tls)
t_setup = med(r["setup_seconds"] for r in tls)
t_cpu = 1e3 * med(r["cpu_seconds_per_allocation"] for r in tls)
ratios = [n["seconds_per_allocation"] / t["seconds_per_allocation"] for n, t in zip(npy, tls)]
ratios_am = [(n["seconds_per_allocation"] + n["setup_seconds"] / E) / t["seconds_per_allocation_amortized"]
             for n, t in zip(npy, tls)]
n_err, t_err = npy[0]["mean_rel_error"], tl["mean_rel_error"]
print(f"workload: {tl['kv_heads']} KV heads x {tl['query_heads_per_kv'] * tl['queries_per_head']} query rows, "
      f"T={tl['tokens']}, d={tl['dim']}, variants kivi2/kivi4/exact + evict, {E} allocations")
print(f"machine: {cores} cores, load average {load_before} before, {load_after} after; OMP_WAIT_POLICY={wait}; "
      f"competing busy processes: {busy}")
print(f"numpy    ({npy[0]['impl']}, median of {rounds} rounds): {n_ms:8.2f} ms/allocation   setup {n_setup:6.3f} s")
print(f"tierlab  ({tl['impl']}, median of {rounds} rounds x {tl['repeats']} repeats): {t_ms:8.2f} ms/allocation"
      f"   setup {t_setup:6.3f} s   (setup included, amortized over {E}: {t_am:.2f} ms/allocation)")
print(f"tierlab CPU time per allocation, all threads together: {t_cpu:.2f} ms "
      f"(on an idle machine the wall time would be about this divided by {cores} cores)")
print(f"speed-up numpy / tierlab per allocation: {med(ratios):.1f}x (rounds: {', '.join(f'{r:.1f}' for r in ratios)}); "
      f"with setup amortized: {med(ratios_am):.1f}x")
# The work of one allocation recomputed in full: per KV head, the logits Q K^T and the output
# P V of every query row over the T tokens, 2 T d flops each (softmax and quantization not
# counted). The rate is EFFECTIVE: tierlab reuses the exact tokens' share prepared once per head,
# so it does less than this and its fraction of the GEMM rate can exceed 1.
rows = tl["query_heads_per_kv"] * tl["queries_per_head"]
flops = 4.0 * tl["kv_heads"] * rows * tl["tokens"] * tl["dim"]
t_gflops, n_gflops = flops / (t_ms * 1e-3) / 1e9, flops / (n_ms * 1e-3) / 1e9
limit = probe["sgemm_gflops"]
print(f"numpy BLAS: {probe['blas']} ({probe['library']}); measured fp32 limit: {limit:.1f} GFLOP/s "
      f"(float32 {probe['n']}^3 matrix products through that BLAS, median)")
print(f"effective rate (a full recomputation's {flops / 1e6:.1f} MFLOP, 4 T d per query row and head, per allocation's "
      f"time): tierlab {t_gflops:.1f} GFLOP/s "
      f"= {t_gflops / limit:.2f} of the limit; numpy {n_gflops:.1f} GFLOP/s = {n_gflops / limit:.2f}")
print(f"mean relative error: numpy {n_err:.10g}, tierlab {t_err:.10g}, relative difference {abs(t_err - n_err) / abs(n_err):.2e}")
print(f"same instance: KIVI keys differing from numpy's: {tl['kivi_elements_differing_from_numpy']}; "
      f"max relative difference of per-allocation errors vs numpy float32 {tl['max_rel_diff_per_allocation_vs_numpy_f32']:.2e}, "
      f"vs the same formula in float64 {tl['max_rel_diff_per_allocation_vs_numpy_f64']:.2e}")
if json_out:
    with open(json_out, "w") as f:
        json.dump({"numpy_ms": n_ms, "tierlab_ms": t_ms, "tierlab_cpu_ms": t_cpu, "speedup": med(ratios),
                   "speedup_rounds": ratios, "speedup_amortized": med(ratios_am), "load_before": load_before,
                   "load_after": load_after, "busy_processes": int(busy), "wait_policy": wait,
                   "numpy_mean_rel_error": n_err, "tierlab_mean_rel_error": t_err,
                   "blas": probe["blas"], "sgemm_gflops": limit, "flops_per_allocation": flops,
                   "tierlab_gflops": t_gflops, "numpy_gflops": n_gflops,
                   "tierlab_fraction_of_limit": t_gflops / limit}, f, indent=1)
PYEOF
