#!/usr/bin/env bash
# The tests. Extra args go to pytest.
#
#     bash scripts/test.sh                 # set up (or refresh) .venv, then the whole suite (CI)
#     bash scripts/test.sh --fast [args]   # the inner loop: no embedded-model, Gemma, browser or
#                                          # slow tests, and no set-up once .venv exists
#     bash scripts/test.sh --long [args]   # what the whole suite leaves out: tests/long_tests.txt
#                                          # and the long bench smokes (marker long)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fast" ]; then
    shift
    [ -x .venv/bin/python ] || bash scripts/setup.sh
    exec .venv/bin/python -m pytest -m "not embedded and not gemma and not browser and not slow and not long" "$@"
fi
if [ "${1:-}" = "--long" ]; then
    shift
    [ -x .venv/bin/python ] || bash scripts/setup.sh
    exec .venv/bin/python -m pytest -m long "$@"
fi
bash scripts/setup.sh
# The long tests (over an hour together on 2 cores) run by `--long`, not here: CI runs this
# command under a time limit. A `-m` of the caller's comes later and wins.
exec .venv/bin/python -m pytest -m "not long" "$@"
