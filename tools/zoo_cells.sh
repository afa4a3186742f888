#!/bin/bash
# Real cells from the zoo (data/zoo/): each model captured on held-out text
# (data/zoo/prompt.txt, BOS then its bytes), one capture per model at the longest prompt
# its context allows (T = seq_len - 32, S = 32 decode steps) with an observation window
# reaching back to position 0, then the realism statistics at several prompt lengths
# (tierlab info --realism --lengths ..., --obs-window 32; for a causal model they equal those
# of captures at each length, docs/synthetic.md).
# Usage: bash tools/zoo_cells.sh [OUT_DIR, default out/zoo-cells] [TIERLAB, default build/tierlab]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/zoo-cells}
tierlab=${2:-build/tierlab}
mkdir -p "$out"
for dir in data/zoo/*/; do
  name=$(basename "$dir")
  bin="$dir$name.bin"
  [ -f "$bin" ] || continue
  seq_len=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['architecture']['seq_len'])" "$dir/config.json")
  T=$((seq_len - 32))
  ids="1,$(head -c $((T - 1)) data/zoo/prompt.txt | od -An -tu1 -v | tr -s ' \n' ',' | sed 's/^,//; s/,$//')"
  lengths=64
  for L in 128 256 448; do [ "$L" -le "$T" ] && lengths="$lengths,$L"; done
  [ "${lengths##*,}" = "$T" ] || lengths="$lengths,$T"
  "$tierlab" capture --checkpoint "$bin" --prompt-ids "$ids" --decode-steps 32 --obs-window "$T" \
      -o "$out/$name-T$T.safetensors" > /dev/null
  echo "## $name (T = $T, lengths $lengths)"
  "$tierlab" info "$out/$name-T$T.safetensors" --realism --lengths "$lengths" --obs-window 32
done
