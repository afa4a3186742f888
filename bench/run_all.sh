#!/usr/bin/env bash
# Every headline benchmark of docs/performance.md, each beside its peer baseline, in one run,
# with one table at the end (bench/run_all.py says what runs and how to read it).
#   bench/run_all.sh [--build DIR] [--quick] [--record] [--json FILE] [--only NAME,...]
# Needs Debian's /usr/bin/python3 (NumPy) and ../shared/bench beside the repository.
set -euo pipefail
exec /usr/bin/python3 "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/run_all.py" "$@"
