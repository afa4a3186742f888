#!/bin/bash
# Trains every model of data/zoo/ (tools/train_zoo.py, one command per model), in two lanes
# of one thread each, MINUTES of training per model (3 x MINUTES + a few minutes on 2 cores). Rerunning resumes unfinished models from
# build-zoo/ and rewrites finished ones' files from their saved state.
# Usage: bash tools/train_zoo_all.sh [MINUTES per model, default 24]
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build-zoo
minutes=${1:-24}
py=/usr/bin/python3
train() { "$py" tools/train_zoo.py --max-minutes "$minutes" "$@"; }
lane_a() {
  train --name kjv-l8-gqa4-d16 --layers 8 --heads 8 --kv-heads 2 --head-dim 16 --rope-theta 1e6 --ctx 256 --batch 8 --steps 4000
  train --name kjv-l4-mha-d32 --layers 4 --heads 4 --kv-heads 4 --head-dim 32 --rope-theta 1e4 --ctx 256 --batch 8 --steps 4000
  train --name kjv-l6-gqa2-d64 --layers 6 --heads 2 --kv-heads 1 --head-dim 64 --rope-theta 5e5 --ctx 512 --batch 4 --steps 4000
}
lane_b() {
  train --name kjv-l12-gqa2-d24 --layers 12 --heads 4 --kv-heads 2 --head-dim 24 --rope-theta 1e6 --ctx 256 --batch 8 --steps 4000
  train --name kjv-l6-gqa2-d16 --layers 6 --heads 8 --kv-heads 4 --head-dim 16 --rope-theta 1e4 --ctx 256 --batch 8 --steps 4000
  train --name kjv-l4-mha-d16 --layers 4 --heads 8 --kv-heads 8 --head-dim 16 --rope-theta 1e6 --ctx 512 --batch 4 --steps 4000
}
lane_a > build-zoo/lane-a.log 2>&1 &
lane_b > build-zoo/lane-b.log 2>&1 &
wait
