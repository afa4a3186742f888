#!/usr/bin/env bash
# Sets tierlab up on Debian 12: installs the Debian packages listed in
# deps/debian-packages.txt (with sudo when not root; skipped when all are present),
# then configures and builds into ./build (CUDA backend too when nvcc is found).
#   bash setup.sh            # install + configure + build
#   TIERLAB_CMAKE_ARGS="-DTIERLAB_CUDA=OFF" bash setup.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")" && pwd)
build="${TIERLAB_BUILD_DIR:-$repo/build}"

mapfile -t packages < <(grep -v '^\s*#' "$repo/deps/debian-packages.txt" | awk 'NF {print $1}')
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# shellcheck disable=SC2086
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TIERLAB_CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)"
echo "setup: built into $build"
