#!/usr/bin/env bash
# Packs what the GPU check machine lacks into the git-ignored folder .devcarry/:
# the header-only Debian dependencies (Eigen, nlohmann-json, Catch2, CLI11, Boost) as a
# relocatable prefix, the PyTorch peer baseline and the GPU ceilings probe. tools/gpu-check.sh unpacks them.
# Run here (a machine where setup.sh has installed the packages), then carry .devcarry.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/.devcarry"
mkdir -p "$out"
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
tar -C / -cJf "$out/prefix.tar.xz" \
  usr/include/eigen3 usr/share/eigen3/cmake \
  usr/include/nlohmann usr/share/cmake/nlohmann_json \
  usr/include/catch2 usr/lib/cmake/Catch2 usr/lib/libCatch2WithMain.a \
  usr/include/CLI usr/share/cmake/CLI11 \
  usr/include/boost "usr/lib/$multi/cmake/Boost-1.74.0" "usr/lib/$multi/cmake/boost_headers-1.74.0" \
  "usr/lib/$multi/cmake/BoostDetectToolset-1.74.0.cmake"
cp "$repo/../shared/bench/torch_recompute_ref.py" "$repo/../shared/bench/gpu_limits_probe.py" "$out/"
du -sh "$out"
