#!/usr/bin/env bash
# Run the xdns demo (see scripts/demo.py). Needs root and a built target/release/xdns.
# Extra arguments are passed on, e.g. `scripts/demo.sh --peer knot`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/demo.py "$@"
