#!/usr/bin/env bash
# The apt part of a fresh `bash setup.sh` (issue 38, item 4), measured on a machine that already
# has the packages: which packages a minimal Debian 12 would need, their download, and dpkg's
# unpacking and configuring of them.
#   bench/apt_time.sh [--list-only] [--json FILE]
#
# 1. The minimal base: the packages installed here that are Essential or of priority
#    "required", with their dependencies (about 90, as in the debian:12 image), written as a
#    dpkg status file; apt resolves deps/debian-packages.txt against it (`apt-get install -s`),
#    so the list is what setup.sh would install on such a machine.
# 2. `apt-get update`, then the download of those packages into a scratch cache (timed).
# 3. `apt-get install --reinstall` of them from that cache (timed): the same unpacking,
#    maintainer scripts and triggers as a first install, the same versions (nothing changes).
#    Needs root. --list-only stops after 1 (counts and sizes only, no root needed).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIST_ONLY=0
JSON=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --list-only) LIST_ONLY=1; shift ;;
    --json) JSON="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "apt_time.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tierlab_apt.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mapfile -t packages < <(grep -v '^\s*#' "$REPO/deps/debian-packages.txt" | awk 'NF {print $1}')
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed"; then
    echo "apt_time.sh: $p (deps/debian-packages.txt) is not installed here; run bash setup.sh first." >&2
    exit 2
  fi
done

/usr/bin/python3 - "$WORK/base-status" << 'EOF'
import re, sys
stanzas = [s for s in open("/var/lib/dpkg/status").read().split("\n\n") if s.strip()]
db, provides = {}, {}
def field(s, f):
    m = re.search(r"^" + f + r": (.*(?:\n .*)*)", s, re.M)
    return m.group(1).replace("\n", " ") if m else ""
for s in stanzas:
    m = re.search(r"^Package: (\S+)", s, re.M)
    if m and "install ok installed" in field(s, "Status"):
        db[m.group(1)] = s
for p, s in db.items():
    for x in field(s, "Provides").split(","):
        x = x.strip().split(" ")[0]
        if x:
            provides.setdefault(x, p)
pending = [p for p, s in db.items() if field(s, "Essential") == "yes" or field(s, "Priority") == "required"] + ["apt"]
keep = set()
while pending:
    p = pending.pop().split(":")[0]
    p = p if p in db else provides.get(p, p)
    if p in keep or p not in db:
        continue
    keep.add(p)
    for f in ("Pre-Depends", "Depends"):
        for alt in field(db[p], f).split(","):
            for a in (x.strip().split(" ")[0].split(":")[0] for x in alt.split("|") if x.strip()):
                if a in db or a in provides:
                    pending.append(a)
                    break
open(sys.argv[1], "w").write("\n\n".join(db[p] for p in sorted(keep)) + "\n\n")
print(f"minimal base: {len(keep)} packages (Essential or required, with their dependencies)")
EOF

apt-get install -s --no-install-recommends -o Dir::State::status="$WORK/base-status" "${packages[@]}" > "$WORK/sim.txt" 2>&1 || {
  echo "apt_time.sh: apt could not resolve deps/debian-packages.txt against the minimal base:" >&2
  tail -5 "$WORK/sim.txt" >&2
  exit 1
}
awk '/^Inst /{print $2}' "$WORK/sim.txt" > "$WORK/install.txt"
n=$(wc -l < "$WORK/install.txt")
sizes=$(xargs apt-cache show --no-all-versions < "$WORK/install.txt" 2> /dev/null |
  awk '/^Size:/{s+=$2} /^Installed-Size:/{i+=$2} END {printf "%.0f %.0f", s / 1e6, i / 1e3}')
read -r download_mb installed_mb <<< "$sizes"
echo "a fresh Debian 12 needs $n packages for deps/debian-packages.txt: $download_mb MB to download, $installed_mb MB installed"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
update_s=""; download_s=""; install_s=""
if [[ $LIST_ONLY -eq 0 ]]; then
  [[ "$(id -u)" -eq 0 ]] || { echo "apt_time.sh: the reinstall needs root (or use --list-only)" >&2; exit 2; }
  mkdir -p "$WORK/cache/partial"
  t0=$(date +%s.%N)
  apt-get update -qq
  t1=$(date +%s.%N)
  xargs apt-get install -y -qq --reinstall --download-only --no-install-recommends \
    -o Dir::Cache::archives="$WORK/cache" < "$WORK/install.txt" > "$WORK/download.log" 2>&1
  t2=$(date +%s.%N)
  DEBIAN_FRONTEND=noninteractive xargs apt-get install -y -qq --reinstall --no-download --no-install-recommends \
    -o Dir::Cache::archives="$WORK/cache" < "$WORK/install.txt" > "$WORK/install.log" 2>&1
  t3=$(date +%s.%N)
  read -r update_s download_s install_s <<< "$(awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" \
    'BEGIN {printf "%.1f %.1f %.1f", b - a, c - b, d - c}')"
  echo "apt-get update $update_s s, download $download_s s, unpack and configure (reinstall) $install_s s:" \
    "$(awk -v a="$update_s" -v b="$download_s" -v c="$install_s" 'BEGIN {printf "%.1f", a + b + c}') s in all"
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
if [[ -n "$JSON" ]]; then
  printf '{"packages": %s, "download_mb": %s, "installed_mb": %s, "update_s": %s, "download_s": %s, "install_s": %s}\n' \
    "$n" "$download_mb" "$installed_mb" "${update_s:-null}" "${download_s:-null}" "${install_s:-null}" > "$JSON"
fi
