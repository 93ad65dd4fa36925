#!/usr/bin/env bash
# Set up (idempotent, with test tools and Chromium) and run every test: unit, integration, browser E2E.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False
exec .venv/bin/python -m pytest -ra "$@"
