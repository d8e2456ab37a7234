#!/usr/bin/env bash
# The tests. Extra args go to pytest.
#
#     bash scripts/test.sh                 # set up (or refresh) .venv, then the whole suite (CI)
#     bash scripts/test.sh --fast [args]   # the inner loop: no embedded-model, Gemma, browser or
#                                          # slow tests, and no set-up once .venv exists
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fast" ]; then
    shift
    [ -x .venv/bin/python ] || bash scripts/setup.sh
    exec .venv/bin/python -m pytest -m "not embedded and not gemma and not browser and not slow" "$@"
fi
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
