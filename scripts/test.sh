#!/usr/bin/env bash
# Set up (or refresh) .venv, then run the whole test suite. Extra args go to pytest,
# e.g. `bash scripts/test.sh -m "not embedded"` for the fast subset.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
