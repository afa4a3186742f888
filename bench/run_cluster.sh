#!/usr/bin/env bash
# `tierlab run` on several processes (docs/cluster.md), side by side with one process:
#   1. wall time of a multi-cell scenario (8 synthetic cells of about half a second) as one
#      process (the baseline), under `mpirun -n 1` and `mpirun -n 2` (and as 2 shards run at
#      once), medians of REPS alternating rounds, and the ratios;
#   2. the MPI scheduler's own cost per cell: many tiny cells under
#      `mpirun -n 3 --scheduler-only` (rank 0 only receives, writes and hands out); tierlab
#      prints rank 0's time per result; with small cells (2 KV heads) and with cells of a
#      paper-scale model's shape (256 KV heads: a results file of paper size);
#   3. from it, how many ranks one scheduler keeps busy at paper-scale cell cost (one cell of
#      scenarios/files/paper/01 at T = 4096: 6 min 43 s on 2 cores, docs/scenarios.md).
#
# Usage: bench/run_cluster.sh [BUILD_DIR]   (env: REPS (default 3), TINY (default 200))
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
build="${1:-$root/build}"
tierlab="$build/tierlab"
REPS="${REPS:-3}"
TINY="${TINY:-200}"
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
[ -x "$tierlab" ] || { echo "run_cluster.sh: build tierlab first ($tierlab missing)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "run_cluster.sh: mpirun not found (apt-get install openmpi-bin libopenmpi-dev, rebuild)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
seeds() { local n=$1 s="0"; for ((i = 1; i < n; i++)); do s="$s, $i"; done; echo "$s"; }
cat > "$work/multi.yaml" <<EOF
name: bench-multi
description: eight synthetic cells of about half a second each
traces:
  synthetic:
    presets: [tiny]
    seeds: [$(seeds 8)]
    context_lengths: [1536]
    overrides: {n_layers: 2, n_kv_heads: 2, head_dim: 32, obs_window: 16, decode_steps: 64}
budgets: [2, 3, 4]
backend: cpu
bootstrap: 100
EOF
cat > "$work/tiny.yaml" <<EOF
name: bench-tiny
description: many tiny cells (2 KV heads), for the scheduler's cost per cell
traces:
  synthetic:
    presets: [tiny]
    seeds: [$(seeds "$TINY")]
    context_lengths: [32]
    overrides: {n_layers: 1, n_kv_heads: 2, head_dim: 8, obs_window: 4, decode_steps: 4}
budgets: [2]
backend: cpu
bootstrap: 100
EOF
cat > "$work/wide.yaml" <<EOF
name: bench-wide
description: tiny cells of a paper-scale model's shape (32 layers x 8 KV heads = 256 heads), for the scheduler's cost per paper-size result
traces:
  synthetic:
    presets: [tiny]
    seeds: [$(seeds $((TINY / 4)))]
    context_lengths: [32]
    overrides: {n_layers: 32, n_kv_heads: 8, head_dim: 8, obs_window: 4, decode_steps: 4}
budgets: [2, 3, 4, 6]
backend: cpu
bootstrap: 100
EOF

now() { date +%s.%N; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# timed NAME COMMAND...: runs it into a fresh folder $work/o, appends the wall seconds to $work/NAME.
timed() {
  local name=$1; shift
  rm -rf "$work/o"
  local t0; t0=$(now)
  "$@" > "$work/last.log" 2>&1 || { echo "run_cluster.sh: '$*' failed:" >&2; cat "$work/last.log" >&2; exit 1; }
  echo "$(now) - $t0" | bc -l >> "$work/$name"
}
shards2() {
  "$tierlab" run "$work/multi.yaml" --out "$work/o" --shard 1/2 > "$work/s1.log" 2>&1 &
  local p=$!
  "$tierlab" run "$work/multi.yaml" --out "$work/o" --shard 2/2 > "$work/s2.log" 2>&1
  wait $p
  grep -q "^tables:" "$work/s1.log" "$work/s2.log" || "$tierlab" run "$work/multi.yaml" --out "$work/o" > /dev/null
}

echo "tierlab cluster benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load before: $(load)"
echo "multi-cell scenario: 8 cells (T = 1536, 4 heads, 64 decode queries, 3 budgets), $REPS alternating rounds"
for ((r = 0; r < REPS; r++)); do
  timed single "$tierlab" run "$work/multi.yaml" --out "$work/o"
  timed mpi1 $MPIRUN -n 1 "$tierlab" run "$work/multi.yaml" --out "$work/o"
  timed mpi2 $MPIRUN -n 2 "$tierlab" run "$work/multi.yaml" --out "$work/o"
  timed shard2 shards2
done
single=$(median < "$work/single"); mpi1=$(median < "$work/mpi1"); mpi2=$(median < "$work/mpi2"); shard2=$(median < "$work/shard2")
printf "  %-44s %8.2f s  (baseline)\n" "one process (tierlab run, 2 OpenMP threads)" "$single"
printf "  %-44s %8.2f s  %5.2fx the baseline\n" "mpirun -n 1 (1 rank, 2 threads)" "$mpi1" "$(echo "$single / $mpi1" | bc -l)"
printf "  %-44s %8.2f s  %5.2fx the baseline, %5.2fx n = 1\n" "mpirun -n 2 (2 ranks x 1 thread)" "$mpi2" \
  "$(echo "$single / $mpi2" | bc -l)" "$(echo "$mpi1 / $mpi2" | bc -l)"
printf "  %-44s %8.2f s  %5.2fx the baseline\n" "2 shards at once (2 OpenMP threads each)" "$shard2" "$(echo "$single / $shard2" | bc -l)"

sched() {  # LABEL YAML KEY: rank 0's time per result under --scheduler-only, n = 3 (ms into $work/KEY)
  rm -rf "$work/o"
  $MPIRUN -n 3 "$tierlab" run "$2" --out "$work/o" --scheduler-only > "$work/sched.log" 2>&1 ||
    { cat "$work/sched.log" >&2; exit 1; }
  local line; line=$(grep "^scheduler:" "$work/sched.log")
  local bytes; bytes=$(cat "$work/o"/cells/*.json | wc -c)
  local cells; cells=$(ls "$work/o"/cells/*.json | wc -l)
  local ms; ms=$(echo "$line" | sed -E 's/.*\(([0-9.]+) ms each.*/\1/')
  local per; per=$(echo "$line" | sed -E 's/.*: ([0-9]+) cells per second.*/\1/')
  printf "  %-44s %8.3f ms per result (%s results/s), %6.1f kB per results file\n" "$1" "$ms" "$per" \
    "$(echo "$bytes / $cells / 1000" | bc -l)"
  echo "$ms" > "$work/$3"
}
echo "scheduler (mpirun -n 3 --scheduler-only: rank 0 receives each result, writes it (fsync) and hands out the next)"
sched "$TINY tiny cells (2 KV heads, 1 budget)" "$work/tiny.yaml" ms_tiny
sched "$((TINY / 4)) cells of 256 KV heads (4 budgets)" "$work/wide.yaml" ms_wide
ms_wide=$(cat "$work/ms_wide")
paper=403  # s: one paper/01 cell at T = 4096 on 2 cores (docs/scenarios.md)
printf "ranks one scheduler keeps busy at paper-scale cell cost (%d s per cell, the smallest paper/01 cell, 2 cores): about %.0f\n" \
  "$paper" "$(echo "$paper / ($ms_wide / 1000)" | bc -l)"
echo "load after: $(load)"
