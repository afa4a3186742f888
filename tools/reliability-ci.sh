#!/usr/bin/env bash
# Reliability checks of CI (docs/reliability.md), after the normal build and ctest:
#   1. one clang build (build-fuzz) with -fsanitize=fuzzer-no-link,address,undefined: the
#      libFuzzer harnesses of tests/fuzz and a subset of the unit tests covering every layer;
#   2. the seed corpora, written by the project's own writers (fuzz_make_seeds);
#   3. every harness replays its committed regressions, then fuzzes for FUZZ_SECONDS;
#   4. the unit-test subset under ASan + UBSan.
# Any crash, leak, sanitizer report or failing test fails the script. Knobs:
#   FUZZ_SECONDS (default 30) per harness, JOBS (default: nproc), BUILD (default build-fuzz).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build="${BUILD:-$repo/build-fuzz}"
seconds="${FUZZ_SECONDS:-30}"
jobs="${JOBS:-$(nproc)}"
targets=(safetensors trace llama2c allocation scenario cell)
# The sanitizer subset: model (safetensors, trace, allocation, llama2.c), solvers (exact
# solver), gpu (CPU recomputation), scenarios (scenario files, runner, reliability).
tests=(test_safetensors test_trace test_allocation test_llama2c test_reliability test_exact_solver test_recompute
       test_scenario test_runner)

t0=$(date +%s)
mkdir -p "$build"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DTIERLAB_FUZZ=ON -DTIERLAB_SANITIZE=address,undefined -DTIERLAB_CUDA=OFF -DTIERLAB_CUDA_EMULATION=OFF \
  -DTIERLAB_GUI=OFF -DTIERLAB_BENCH=OFF -DTIERLAB_NATIVE=OFF -DTIERLAB_PCH=ON > "$build/configure.log"
cmake --build "$build" -j "$jobs" --target fuzz_make_seeds "${targets[@]/#/fuzz_}" "${tests[@]}"
t1=$(date +%s)
echo "reliability: build $((t1 - t0)) s"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
corpus="$build/fuzz-corpus"
rm -rf "$corpus" && mkdir -p "$corpus"
"$build/tests/fuzz/fuzz_make_seeds" "$corpus/seeds" "$repo"
summary="$build/fuzz-summary.txt"
: > "$summary"
for t in "${targets[@]}"; do
  exe="$build/tests/fuzz/fuzz_$t"
  work="$corpus/$t"
  mkdir -p "$work" "$build/fuzz-crashes/$t"
  # The committed regressions first (each input once), then fuzzing from seeds + regressions.
  "$exe" -runs=0 "$repo/tests/fuzz/regressions/$t" > "$build/fuzz-$t-regressions.log" 2>&1 || {
    cat "$build/fuzz-$t-regressions.log"; echo "reliability: fuzz_$t fails on a committed regression"; exit 1; }
  cp "$corpus/seeds/$t"/* "$work"/ 2>/dev/null || true
  cp "$repo/tests/fuzz/regressions/$t"/* "$work"/
  inputs=$(ls "$work" | wc -l)
  # One process (fork=0): the readers are deterministic; -timeout: a hang is a failure; -rss_limit_mb: a blow-up.
  if ! "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$build/fuzz-crashes/$t/" "$work" > "$build/fuzz-$t.log" 2>&1; then
    tail -n 60 "$build/fuzz-$t.log"
    echo "reliability: fuzz_$t found a defect; the input is in $build/fuzz-crashes/$t/"
    exit 1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/fuzz-$t.log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -o 'cov: [0-9]*' "$build/fuzz-$t.log" | tail -1 | grep -o '[0-9]*' || echo '?')
  echo "fuzz_$t: seeds+regressions $inputs, ${seconds} s, executions $execs, coverage $cov, crashes 0" | tee -a "$summary"
done
t2=$(date +%s)
echo "reliability: fuzzing $((t2 - t1)) s"

# The unit-test subset under ASan + UBSan (the fault test of `tierlab run` needs the CLI:
# it runs in the normal build).
for t in "${tests[@]}"; do
  "$build/tests/$t" --order lex > "$build/sanitize-$t.log" 2>&1 || {
    tail -n 80 "$build/sanitize-$t.log"; echo "reliability: $t fails under ASan/UBSan"; exit 1; }
  echo "sanitized $t: $(grep -E '^(All tests passed|test cases)' "$build/sanitize-$t.log" | tail -1)" | tee -a "$summary"
done
t3=$(date +%s)
echo "reliability: sanitizer tests $((t3 - t2)) s; total $((t3 - t0)) s" | tee -a "$summary"
