#!/usr/bin/env bash
# Installs the Debian packages listed in the given files (deps/*.txt: one per line, `#` starts a
# comment) that are not installed yet, with sudo when not root; does nothing when all are.
#   tools/apt-install.sh deps/debian-packages.txt [deps/dev-packages.txt ...]
set -euo pipefail
packages=()
for list in "$@"; do
  [ -r "$list" ] || { echo "apt-install: $list: no such package list" >&2; exit 2; }
  mapfile -t -O "${#packages[@]}" packages < <(sed 's/#.*//' "$list" | awk 'NF {print $1}')
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ "${#missing[@]}" -gt 0 ] || exit 0
echo "apt-install: installing Debian packages: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
