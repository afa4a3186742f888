#!/usr/bin/env bash
# Reliability checks of CI (docs/reliability.md), after the normal build and ctest:
#   1. one clang build (build-fuzz) with -fsanitize=fuzzer-no-link,address,undefined: the
#      libFuzzer harnesses of tests/fuzz and a subset of the unit tests covering every layer;
#   2. the seed corpora, written by the project's own writers (fuzz_make_seeds);
#   3. every harness replays its committed regressions, then fuzzes for FUZZ_SECONDS;
#   4. the unit-test subset under ASan + UBSan;
#   5. the tierlab CLI, built the same way, on every command: eval with every method the
#      registries list, solve, demo, run of a tiny scenario with every analysis that runs on
#      synthetic cells (figures included), figure, synth, info, methods, capture, replay, and
#      a few inputs each command must refuse (exit status 2).
# Any crash, leak, sanitizer report or failing test fails the script. LeakSanitizer stays on
# everywhere; tools/lsan.supp suppresses fontconfig's known leak (figures) and nothing else. Knobs:
#   FUZZ_SECONDS (default 30) per harness, JOBS (default: nproc), BUILD (default build-fuzz).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build="${BUILD:-$repo/build-fuzz}"
seconds="${FUZZ_SECONDS:-30}"
jobs="${JOBS:-$(nproc)}"
targets=(safetensors trace llama2c allocation scenario cell tables)
# The sanitizer subset: model (safetensors, trace, allocation, llama2.c), solvers (exact
# solver), gpu (CPU recomputation), scenarios (scenario files, runner, reliability).
tests=(test_safetensors test_trace test_allocation test_llama2c test_reliability test_exact_solver test_recompute
       test_scenario test_runner)

# clang, its sanitizer runtimes and OpenMP: developer packages that setup.sh leaves out.
bash "$repo/tools/apt-install.sh" "$repo/deps/dev-packages.txt"
t0=$(date +%s)
mkdir -p "$build"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DTIERLAB_FUZZ=ON -DTIERLAB_SANITIZE=address,undefined -DTIERLAB_CUDA=OFF -DTIERLAB_CUDA_EMULATION=OFF \
  -DTIERLAB_GUI=OFF -DTIERLAB_BENCH=OFF -DTIERLAB_NATIVE=OFF -DTIERLAB_PCH=ON > "$build/configure.log"
cmake --build "$build" -j "$jobs" --target fuzz_make_seeds "${targets[@]/#/fuzz_}" "${tests[@]}" tierlab
t1=$(date +%s)
echo "reliability: build $((t1 - t0)) s"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$repo/tools/lsan.supp:print_suppressions=0"
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
echo "reliability: sanitizer tests $((t3 - t2)) s" | tee -a "$summary"

# The CLI under ASan + UBSan + LeakSanitizer, in a scratch folder. A command passes when it
# exits as expected and its output holds no sanitizer report.
cli="$build/cli-check"
rm -rf "$cli" && mkdir -p "$cli"
tl="$build/tierlab"
cli_runs=0
tierlab_expect() {  # tierlab_expect STATUS ARGS...: `tierlab ARGS` must exit with STATUS
  local want=$1 rc=0 log="$cli/command-$((cli_runs + 1)).log"
  shift
  cli_runs=$((cli_runs + 1))
  (cd "$cli" && "$tl" "$@") > "$log" 2>&1 || rc=$?
  if [ "$rc" != "$want" ] || grep -qE '(ERROR|SUMMARY): [A-Za-z]*Sanitizer|runtime error:' "$log"; then
    tail -n 60 "$log"
    echo "reliability: 'tierlab $*' exits with $rc (expected $want) or reports under ASan/UBSan/LSan; log $log"
    exit 1
  fi
}
ok() { tierlab_expect 0 "$@"; }
refused() { tierlab_expect 2 "$@"; }
names() { "$tl" methods --kind "$1" | awk '/^  [^ ]/ {print $1}'; }  # the registry's names
ckpt="$repo/data/stories260K/stories260K.bin"

ok methods
ok methods --json
ok synth --preset tiny --seed 1 --tokens 64 --obs-window 32 --decode-steps 8 --layers 1 -o t.safetensors
ok synth --preset tiny --seed 2 --stats --stats-lengths 32,64
ok info t.safetensors
ok info t.safetensors --json
# eval: every uniform policy (the templates with their first values), key quantizer, eviction
# scorer and seed allocator of the registries, then an allocation written by solve.
for p in $(names policy | sed 's/\[[^]]*\]//g; s/B/2/; s/KEEP/0.5/'); do ok eval t.safetensors --policy "$p"; done
for q in $(names quantizer); do ok eval t.safetensors --quantizer "$q"; done
for q in $(names scorer); do ok eval t.safetensors --scorer "$q" --keep ratio:0.5; done
for q in $(names allocator); do ok eval t.safetensors --seed "$q" --budget 4; done
ok solve t.safetensors --budget 2 --recompute --advantage --write-allocation alloc.safetensors
ok eval t.safetensors --allocation alloc.safetensors --per-head --json
for s in exact greedy greedy-raw waterfill smoothed; do ok solve t.safetensors --budget 3 --solver "$s" --scope layer; done
for f in quantize evict routed; do ok solve t.safetensors --budget 3 --family "$f" --recompute --json; done
ok solve t.safetensors --budgets 0:4:1 --recompute --method kivi:2 --method '{scorer: snapkv, keep: "ratio:0.5"}'
ok demo --preset tiny --tokens 48 --out demo
ok capture --checkpoint "$ckpt" --prompt-sample 24 --seed 1 --decode-steps 8 --obs-window 8 -o captured.safetensors
ok eval captured.safetensors --policy evict:0.25
ok replay --checkpoint "$ckpt" --prompt-sample 24 --seed 1 --decode-steps 8 --policy kivi:2
ok replay --checkpoint "$ckpt" --prompt-greedy 16 --decode-steps 4 --policy evict:0.5 --free-running --redecide 2 --json
cat > "$cli/tiny.yaml" <<'YAML'
name: tiny-ci
description: "tools/reliability-ci.sh: tiny synthetic cells through every analysis that runs on them, figures included"
traces:
  synthetic:
    presets: [tiny]
    seeds: [0, 1]
    context_lengths: [48]
    logit_scales: [1, 4]
    overrides: {n_layers: 1, n_kv_heads: 2, head_dim: 16, obs_window: 8, decode_steps: 8}
budgets: [2, 4]
backend: cpu
bootstrap: 100
staleness: {steps: [1, 2, 4], budget: 2}
smoothing: {kernels: [1, 3], budgets: [1]}
mismatch: {quantizers: [kivi, token], bits: [2, 4], budgets: [4]}
rd_curve: {budgets: "0:4:1"}
granularity: {sink: 2, recent: 8, age_steps: 2}
methods:
  - {quantizer: kivi, bits: 2}
  - {scorer: snapkv, keep: "ratio:0.5", window: 8}
  - {seed: ratequant, budget: 6}
  - {seed: granularity, restriction: bands, budget: 4}
  - {policy: "evict:0.5"}
  - {family: M, budget: 2}
proxy: {}
variance: {allocator: "M* B=2", baselines: {quant: ["ratequant B=6", "granularity restriction=bands B=4"], evict: ["evict:0.5"]}, defer: 4}
YAML
ok run tiny.yaml --out run --jobs 2
ok run tiny.yaml --out run  # every cell finished: read back, validated, tables and figures rewritten
ok figure run --style slides --format svg,png --dpi 50
# Inputs each command must refuse, naming what is wrong (the error paths run sanitized too).
refused eval missing.safetensors --policy exact
refused eval t.safetensors --policy kivi:0
refused solve t.safetensors --budget ''
refused synth --preset tiny -o run
refused info tiny.yaml
printf 'name: bad\nbudgetz: [2]\n' > "$cli/bad.yaml"
refused run bad.yaml --out bad
refused figure demo
t4=$(date +%s)
echo "reliability: CLI $((t4 - t3)) s ($cli_runs commands, no sanitizer report)" | tee -a "$summary"
echo "reliability: total $((t4 - t0)) s" | tee -a "$summary"
