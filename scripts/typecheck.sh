#!/usr/bin/env bash
# The type checker: mypy over calm_core and app with pyproject.toml's [tool.mypy] (strict on
# calibration/, results/, runs/, io.py and settings.py; mypy's defaults elsewhere). The count of
# errors is a ratchet: more than .ci/mypy_errors fails, fewer says to lower the file.
#
#     bash scripts/typecheck.sh            # after scripts/setup.sh (mypy is in the dev extra)
#     PYTHON=/path/to/venv/bin/python bash scripts/typecheck.sh   # another interpreter with mypy
#
# The interpreter: $PYTHON when set, else this checkout's .venv, else (in a `git worktree`
# without one) the .venv of the main checkout. mypy always checks this checkout's calm_core
# and app (the studio, a package: app/__init__.py).
set -uo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-}"
if [ -z "$py" ]; then
    py=.venv/bin/python
    if [ ! -x "$py" ]; then
        common=$(git rev-parse --path-format=absolute --git-common-dir 2> /dev/null || true)
        [ -n "$common" ] && [ -x "$(dirname "$common")/.venv/bin/python" ] && py="$(dirname "$common")/.venv/bin/python"
    fi
fi
if ! "$py" -m mypy --version > /dev/null 2>&1; then
    echo "typecheck: no mypy under $py: run scripts/setup.sh, or set PYTHON to an interpreter that has it" >&2
    exit 2
fi
allowed=$(tr -d '[:space:]' < .ci/mypy_errors)
out=$("$py" -m mypy calm_core app 2>&1)
if ! printf '%s\n' "$out" | grep -qE "^(Success: no issues found|Found [0-9]+ errors?) in "; then
    printf '%s\n' "$out" >&2  # mypy did not finish its check (a crash, a bad config): no count to trust
    echo "typecheck: mypy did not report a result (above)" >&2
    exit 2
fi
count=$(printf '%s\n' "$out" | grep -c ": error:")
echo "typecheck: $count mypy errors in calm_core and app (recorded: $allowed; strict: calibration, results, runs, io, settings)"
if [ "$count" -gt "$allowed" ]; then
    printf '%s\n' "$out" | grep ": error:" >&2
    echo "typecheck: $((count - allowed)) more than .ci/mypy_errors allows; fix them (the list above)" >&2
    exit 1
fi
if [ "$count" -lt "$allowed" ]; then
    echo "typecheck: fewer than recorded: write $count into .ci/mypy_errors so the ratchet holds"
fi
