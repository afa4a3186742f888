#!/usr/bin/env bash
# One paper/01 cell at a reduced head count, profiled (issue 38, item 1: a profile first): the
# llama-3.1-8b preset with 4 layers (32 KV heads of its 256), T tokens, paper/01's ladder,
# budgets, total bits, decode queries and the model-wide routed verdict, on the CPU backend.
# Prints the wall time, the peak resident memory and the hottest symbols (perf, when present).
#   bench/profile_paper_cell.sh [--build DIR] [--tokens T] [--layers L]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$REPO/build"
T=4096
LAYERS=4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --tokens) T="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "profile_paper_cell.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tierlab_cell.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
# The cell bench/bench_paper_cell.py times by phase (one definition of it).
/usr/bin/python3 "$REPO/bench/bench_paper_cell.py" --print-scenario --tokens "$T" --layers "$LAYERS" > "$WORK/cell.yaml"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run=("$BUILD/tierlab" run "$WORK/cell.yaml" --out "$WORK/out")
if command -v perf > /dev/null && perf record -q -F 199 -o "$WORK/perf.data" -- true 2> /dev/null; then
  /usr/bin/time -v perf record -q -F 199 -o "$WORK/perf.data" -- "${run[@]}" > "$WORK/run.log" 2> "$WORK/time.log"
  prof=1
else
  /usr/bin/time -v "${run[@]}" > "$WORK/run.log" 2> "$WORK/time.log"
  prof=0
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cell: llama-3.1-8b, $LAYERS layers x 8 KV heads, T = $T, budgets 1-4"
grep -E "Elapsed \(wall|Maximum resident" "$WORK/time.log" | sed 's/^\s*//'
if [[ $prof -eq 1 ]]; then
  echo "hottest symbols (perf, share of samples):"
  perf report -i "$WORK/perf.data" --no-children --sort symbol --stdio 2> /dev/null | grep "%" |
    awk '{$1=$1; print}' | cut -c1-110 | head -12 | sed 's/^/  /'
  echo "by object:"
  perf report -i "$WORK/perf.data" --no-children --sort dso --stdio 2> /dev/null | grep "%" | head -4 | sed 's/^/  /'
fi
