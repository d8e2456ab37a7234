#!/usr/bin/env bash
# Set up (or refresh) .venv, convert the embedded model once, and start the studio.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -c "from calm_core.scoring.models import embedded_model_dir; print('embedded model:', embedded_model_dir())"
exec .venv/bin/streamlit run app/main.py "$@"
