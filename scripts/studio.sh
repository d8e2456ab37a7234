#!/usr/bin/env bash
# Set up (or refresh) .venv, convert the embedded model once, and start the studio.
#   bash scripts/studio.sh                 # private: listens on 127.0.0.1 only (.streamlit/config.toml)
#   CALM_STUDIO_PASSWORD=... bash scripts/studio.sh --share   # every interface, behind the password
# Other arguments go to `streamlit run` (e.g. --server.port 8600). docs/security.md has the details.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
share=0
for arg in "$@"; do
    if [ "$arg" = "--share" ]; then share=1; else args+=("$arg"); fi
done
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
.venv/bin/python -c "from calm_core.scoring.models import embedded_model_dir; print('embedded model:', embedded_model_dir())"
exec .venv/bin/streamlit run app/main.py "${args[@]}"
