#!/usr/bin/env bash
# The one script the GPU machine runs: build with CUDA, run the test suite (CUDA backend
# included), compare the CUDA recomputation with the PyTorch baseline side by side, and
# leave logs in $OUT. Run from anywhere; it works in the repository root.
#
#   OUT=/some/dir tools/gpu-check.sh
#
# What it assumes (each is a variable below, so the lead can adjust it):
#   - cmake >= 3.25, g++ (C++20), nvcc (CUDA 13, /usr/local/cuda/bin), python3 with torch,
#     OpenMP (libgomp); ninja if present, else make. Nothing is downloaded.
#   - The Debian -dev packages are NOT installed there: the header-only dependencies come
#     from .devcarry/prefix.tar.xz (made by tools/make-devcarry.sh: Eigen3, nlohmann_json,
#     Catch2 2.13 with libCatch2WithMain.a, CLI11, Boost headers, as a relocatable usr/
#     tree). It is unpacked into .devcarry/root and passed as CMAKE_PREFIX_PATH.
#     TIERLAB_PREFIX=/path/to/usr uses an existing prefix instead; TIERLAB_CMAKE_ARGS adds
#     configure arguments (e.g. "-DEigen3_DIR=..."). No Qt or yaml-cpp there: -DTIERLAB_SCENARIOS=OFF builds model, solvers, gpu, their tests and the benches only.
#     No Boost.Context either: the CPU emulator of the CUDA backend (which CI runs) is off here
#     (-DTIERLAB_CUDA_EMULATION=OFF); the real device is the point of this script.
#   - The PyTorch baseline at .devcarry/torch_recompute_ref.py (or ../shared/bench/), and
#     the ceilings probe gpu_limits_probe.py next to it (measured fp32 GEMM rate and copy
#     bandwidth, to put the benchmark's "fraction of the fp32 peak" next to a measured one).
# Budget: about 6 minutes in all; every step has its own timeout, optional steps are
# skipped when the budget is spent. The exit status is 0 only if every step passed.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
REPO=$(pwd)
OUT=${OUT:-$REPO/out/gpu-check}
mkdir -p "$OUT"
JOBS=${JOBS:-16}
BUDGET=${BUDGET:-360}                      # seconds for the whole script
BUILD=${BUILD_DIR:-$REPO/build-gpu}
CARRY=$REPO/.devcarry
PREFIX=${TIERLAB_PREFIX:-$CARRY/root/usr}
TORCH_REF=${TORCH_REF:-$CARRY/torch_recompute_ref.py}
[ -f "$TORCH_REF" ] || TORCH_REF=$REPO/../shared/bench/torch_recompute_ref.py
PYTHON=${PYTHON:-python3}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
export PATH=/usr/local/cuda/bin:$PATH

declare -a RESULTS=()
FAILED=0
log() { echo "[gpu-check $(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
left() { echo $((BUDGET - SECONDS)); }
# step NAME TIMEOUT LOGFILE COMMAND...: runs COMMAND with a timeout, tee'd to LOGFILE.
step() {
  local name=$1 limit=$2 logfile=$3
  shift 3
  log "start $name (timeout ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$logfile"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then RESULTS+=("PASS $name"); else RESULTS+=("FAIL $name (exit $rc)"); FAILED=1; fi
  log "end $name: exit $rc"
  return "$rc"
}
finish() {
  log "steps:"
  for r in "${RESULTS[@]}"; do log "  $r"; done
  log "logs in $OUT"
  exit "$FAILED"
}

: > "$OUT/summary.txt"
log "repository $REPO, output $OUT, budget ${BUDGET}s"
{ nvidia-smi || true; "$NVCC" --version || true; cmake --version || true; } > "$OUT/machine.txt" 2>&1
head -20 "$OUT/machine.txt"

# ---- 1. dependencies -------------------------------------------------------------------
if [ -z "${TIERLAB_PREFIX:-}" ] && [ ! -d "$PREFIX" ]; then
  if [ -f "$CARRY/prefix.tar.xz" ]; then
    mkdir -p "$CARRY/root"
    step unpack-deps 60 "$OUT/unpack.log" tar -C "$CARRY/root" -xJf "$CARRY/prefix.tar.xz" || finish
  else
    log "no $CARRY/prefix.tar.xz: relying on system packages"
  fi
fi
MULTI=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
CMAKE_DEPS=()
if [ -d "$PREFIX" ]; then
  CMAKE_DEPS+=("-DCMAKE_PREFIX_PATH=$PREFIX")
  [ -d "$PREFIX/lib/cmake/Catch2" ] && CMAKE_DEPS+=("-DCMAKE_MODULE_PATH=$PREFIX/lib/cmake/Catch2")
  [ -d "$PREFIX/lib/$MULTI/cmake/Boost-1.74.0" ] && CMAKE_DEPS+=("-DBoost_DIR=$PREFIX/lib/$MULTI/cmake/Boost-1.74.0")
fi
GEN="Unix Makefiles"
command -v ninja > /dev/null && GEN=Ninja

# ---- 2. configure and build --------------------------------------------------------------
# shellcheck disable=SC2086
step configure 120 "$OUT/configure.log" cmake -S "$REPO" -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release \
  -DTIERLAB_CUDA=ON -DTIERLAB_TESTS=ON -DTIERLAB_BENCH=ON -DTIERLAB_CUDA_PTXAS_VERBOSE=ON -DTIERLAB_SCENARIOS=OFF -DTIERLAB_CUDA_EMULATION=OFF \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DPython3_EXECUTABLE="$(command -v "$PYTHON")" \
  "${CMAKE_DEPS[@]}" ${TIERLAB_CMAKE_ARGS:-} || finish
grep -q "CUDA backend ON" "$OUT/configure.log" || { log "configure did not enable the CUDA backend"; FAILED=1; finish; }
step build 240 "$OUT/build.log" cmake --build "$BUILD" -j"$JOBS" --target all benches || finish
grep -E "Compiling entry|registers|spill" "$OUT/build.log" > "$OUT/ptxas.txt" || true

# ---- 3. tests ------------------------------------------------------------------------------
step ctest 150 "$OUT/ctest.log" ctest --test-dir "$BUILD" --output-on-failure -j 8 --timeout 120
if [ -x "$BUILD/tests/test_recompute" ]; then
  step test-recompute-cuda-simple 90 "$OUT/test_recompute_simple.log" \
    env TIERLAB_CUDA_PATH=simple "$BUILD/tests/test_recompute" "[recompute]"
fi

# ---- 4. benchmark: CUDA backend vs the PyTorch baseline, same sizes, same GPU ---------------
BENCH=$BUILD/bench/bench_recompute_cuda
TORCH_ARGS=()
if [ -f "$TORCH_REF" ]; then TORCH_ARGS=(--torch-ref "$TORCH_REF" --python "$PYTHON"); else log "no torch baseline at $TORCH_REF"; fi
if [ -x "$BENCH" ]; then
  step bench 200 "$OUT/bench.log" "$BENCH" --json "$OUT/bench.json" "${TORCH_ARGS[@]}"
  if [ -f "$OUT/bench.json" ]; then
    "$PYTHON" - "$OUT/bench.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
b = json.load(open(sys.argv[1]))
c = b.get("cuda", {})
print("backend:", b.get("backend", b.get("error")))
print("cuda allocations/s: %.1f (%.3f ms per allocation of %d heads)" % (
    c.get("allocations_per_second", 0), 1e3 * c.get("seconds_per_allocation", 0), b.get("kv_heads", 0)))
t = b.get("torch", {})
if "gather" in t:
    print("torch gather allocations/s: %.1f, naive: %.1f" % (t["gather"]["allocations_per_second"], t["naive"]["allocations_per_second"]))
    print("speedup vs torch gather: %.2fx (target 10x: %s)" % (b.get("speedup_vs_torch_gather", 0), b.get("meets_target")))
else:
    print("torch:", t.get("error", "not run"))
f = b.get("flops", {})
print("useful TFLOP/s (D = delta V): %.2f = %.1f%% of the fp32 peak" % (f.get("achieved_tflops", 0), 100 * f.get("fraction_of_fp32_peak", 0)))
print("max rel. difference cuda vs cpu:", b.get("cpu_check", {}).get("max_relative_difference_cuda_vs_cpu", b.get("cpu_check")))
print("within the tolerance %s: %s" % (b.get("cpu_check", {}).get("tolerance"), b.get("cpu_check", {}).get("within_tolerance")))
print("max rel. difference tc vs simple:", b.get("simple_check", {}).get("max_relative_difference_main_vs_simple", b.get("simple_check")))
PY
  fi
fi

# ---- 5. optional: the measured ceilings (fp32 GEMM with TF32 off and on, copy bandwidth) ----
PROBE=${PROBE:-$CARRY/gpu_limits_probe.py}
[ -f "$PROBE" ] || PROBE=$REPO/../shared/bench/gpu_limits_probe.py
if [ -f "$PROBE" ] && [ "$(left)" -gt 60 ]; then
  step ceilings 45 "$OUT/ceilings.json" "$PYTHON" "$PROBE"
fi

# ---- 6. optional: memory checker on the CUDA tests and a small benchmark --------------------
if command -v compute-sanitizer > /dev/null && [ "$(left)" -gt 90 ] && [ -x "$BENCH" ]; then
  step memcheck-bench $(( $(left) > 150 ? 60 : 40 )) "$OUT/memcheck.log" compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$BENCH" --tokens 3000 --kv-heads 2 --queries 16 --allocations 3 --repeats 1 \
    --cpu-allocations 1 --simple-allocations 1 --simple-heads 1
fi
if command -v compute-sanitizer > /dev/null && [ "$(left)" -gt 70 ] && [ -x "$BUILD/tests/test_recompute" ]; then
  step memcheck-tests $(( $(left) - 20 )) "$OUT/memcheck_tests.log" compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$BUILD/tests/test_recompute" "[recompute]" -c "backend cuda"
fi
finish
