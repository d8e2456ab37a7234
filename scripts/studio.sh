#!/usr/bin/env bash
# Set up (or refresh) .venv, convert the embedded model and score Learn's quiz once, and start the studio.
#   bash scripts/studio.sh                 # private: listens on 127.0.0.1 only (.streamlit/config.toml)
#   CALM_STUDIO_PASSWORD=... bash scripts/studio.sh --share   # every interface, behind the password
#       --host NAME              a name the studio answers besides localhost and IP addresses (repeatable)
#       --allow-short-password   accept a password under 12 characters (a classroom on a trusted network)
# Other arguments go to `streamlit run` (e.g. --server.port 8600). docs/security.md has the details.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
share=0
hosts="${CALM_STUDIO_HOSTS:-}"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --share) share=1 ;;
        --allow-short-password) export CALM_STUDIO_ALLOW_SHORT_PASSWORD=1 ;;
        --host)
            [ "$#" -ge 2 ] || { echo "calm studio: --host needs a name" >&2; exit 2; }
            hosts="${hosts:+$hosts,}$2"; shift ;;
        *) args+=("$1") ;;
    esac
    shift
done
[ -z "$hosts" ] || export CALM_STUDIO_HOSTS="$hosts"
if [ "$share" = 1 ]; then
    if [ -z "${CALM_STUDIO_PASSWORD:-}" ] && ! grep -qsE '^[[:space:]]*password[[:space:]]*=' .streamlit/secrets.toml ~/.streamlit/secrets.toml; then
        echo "calm studio: --share needs a password, and none is set. Either" >&2
        echo "  export CALM_STUDIO_PASSWORD='a long passphrase'   (then run this again), or" >&2
        echo "  put   password = \"a long passphrase\"   in .streamlit/secrets.toml (git ignores it)." >&2
        exit 2
    fi
    export CALM_STUDIO_SHARED=1
    args=(--server.address 0.0.0.0 "${args[@]}")
    echo "calm studio: shared on every interface, behind the password (docs/security.md)." >&2
fi
bash scripts/setup.sh
source scripts/ticker.sh
if [ "$share" = 1 ]; then
    .venv/bin/python -m calm_core.access.rules || exit 2   # a password too short: says why
fi
# Convert the embedded model and score the Learn page's quiz into the model cache, once
# (calm_core/scoring/score_cache.py): the page then opens on stored scores, not a minute of scoring.
# It says each step, and a line every 12 s while one runs (scoring/progress.py, Ticker; the
# ticker of scripts/ticker.sh covers Python's imports before its first line).
TICK_PREFIX=studio ticking "preparing the embedded model and Learn's quiz" .venv/bin/python -m calm_core.scoring.score_cache
echo "studio: starting Streamlit (it prints the address to open)"
exec .venv/bin/streamlit run app/main.py "${args[@]}"
