#!/usr/bin/env bash
# The type checker: mypy over calm_core with pyproject.toml's [tool.mypy] (strict on
# calibration/, runs/, io.py and settings.py; mypy's defaults elsewhere). The count of
# errors is a ratchet: more than .ci/mypy_errors fails, fewer says to lower the file.
#
#     bash scripts/typecheck.sh            # after scripts/setup.sh (mypy is in the dev extra)
set -uo pipefail
cd "$(dirname "$0")/.."
allowed=$(tr -d '[:space:]' < .ci/mypy_errors)
out=$(.venv/bin/python -m mypy calm_core 2>&1)
count=$(printf '%s\n' "$out" | grep -c ": error:")
echo "typecheck: $count mypy errors in calm_core (recorded: $allowed; strict: calibration, runs, io, settings)"
if [ "$count" -gt "$allowed" ]; then
    printf '%s\n' "$out" | grep ": error:" >&2
    echo "typecheck: $((count - allowed)) more than .ci/mypy_errors allows; fix them (the list above)" >&2
    exit 1
fi
if [ "$count" -lt "$allowed" ]; then
    echo "typecheck: fewer than recorded: write $count into .ci/mypy_errors so the ratchet holds"
fi
