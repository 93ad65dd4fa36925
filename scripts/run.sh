#!/usr/bin/env bash
# Set up (idempotent) and start the app on the embedded `tiny` models: http://localhost:7860/
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec env HF_HUB_OFFLINE=1 .venv/bin/python -m app serve "$@"
