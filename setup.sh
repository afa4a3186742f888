#!/usr/bin/env bash
# Sets tierlab up on Debian 12: installs the Debian packages listed in
# deps/debian-packages.txt (tools/apt-install.sh: with sudo when not root; skipped when all
# are present),
# then configures and builds the programs into ./build: the tierlab tool, tierlab-explorer and
# the Python package (CUDA backend too when nvcc is found). The tests are built by the README's
# test command (`cmake --build build && ctest --test-dir build --output-on-failure`).
#   bash setup.sh            # install + configure + build the programs
#   TIERLAB_SETUP_TARGET=all bash setup.sh               # the tests too
#   TIERLAB_CMAKE_ARGS="-DTIERLAB_CUDA=OFF" bash setup.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")" && pwd)
build="${TIERLAB_BUILD_DIR:-$repo/build}"

bash "$repo/tools/apt-install.sh" "$repo/deps/debian-packages.txt"

# ccache, where it is installed, keeps a rebuild of unchanged sources short (not in deps/).
launcher=""
command -v ccache > /dev/null && launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
# shellcheck disable=SC2086
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release $launcher ${TIERLAB_CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)" --target "${TIERLAB_SETUP_TARGET:-programs}"
echo "setup: built the ${TIERLAB_SETUP_TARGET:-programs} into $build (the tests: cmake --build $build)"
