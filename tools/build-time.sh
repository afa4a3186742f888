#!/usr/bin/env bash
# Times a clean configure + build of one revision as setup.sh does it (Ninja, Release,
# -j nproc): the revision is checked out fresh into its own worktree and built into an empty
# folder, so nothing is reused. Prints the wall and CPU time and the load average before and
# after (docs/performance.md, "Build time"). Two steps when the revision has the `programs`
# target (what setup.sh builds): the programs first, then the rest of `all` (the tests).
#   bash tools/build-time.sh REV TAG [CMAKE_ARGS...]
#   bash tools/build-time.sh 1c88dff before
#   bash tools/build-time.sh HEAD after-nopch -DTIERLAB_PCH=OFF
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rev=$1; tag=$2; shift 2
wt=${TMPDIR:-/tmp}/tierlab-buildtime-wt-$tag; bd=${TMPDIR:-/tmp}/tierlab-buildtime-$tag
rm -rf "$bd"; git -C "$repo" worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
git -C "$repo" worktree add --detach "$wt" "$rev" > /dev/null
echo "== $tag ($(git -C "$wt" rev-parse --short HEAD)) $*"
echo "load before: $(cat /proc/loadavg)"
/usr/bin/time -f "configure + programs: wall %e s, user %U s, sys %S s" \
  bash -c "cmake -S '$wt' -B '$bd' -G Ninja -DCMAKE_BUILD_TYPE=Release $* > '$bd.cfg.log' 2>&1 &&
           if ninja -C '$bd' -t targets all | grep -q '^programs:'; then ninja -C '$bd' -j$(nproc) programs > '$bd.build.log' 2>&1; fi"
echo "load between: $(cat /proc/loadavg)"
/usr/bin/time -f "the rest of all (tests): wall %e s, user %U s, sys %S s" \
  bash -c "ninja -C '$bd' -j$(nproc) >> '$bd.build.log' 2>&1"
echo "load after: $(cat /proc/loadavg)"
echo "build steps: $(tail -1 "$bd.build.log")"
echo "the slowest units: sort -k1 -n of the clean build's $bd/.ninja_log (end - start ms, column 2 - column 1)"
