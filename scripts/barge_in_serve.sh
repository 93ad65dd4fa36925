#!/usr/bin/env bash
# One line to a server set up for `python -m app barge-in-check` (vLLM-Omni's barge_in_serve.sh):
#   bash scripts/barge_in_serve.sh [--port 8000]
# The default tiny config with the silence-timer turn detector (its turn ends follow the WAV's
# media clock exactly, whatever the machine's load), no resume window (the interrupting question
# is a turn of its own), barge-in after 300 ms of speech over a reply, no echo gate (a WAV has no
# loudspeaker echo); API only. Then, in another shell:
#   python scripts/make_barge_in_wav.py out/barge_in.wav        # prints its sha256
#   python -m app barge-in-check --url http://127.0.0.1:8000 --input-wav out/barge_in.wav \
#       --validation-mode response-required --input-sha256 <sha256> --expect-second-response-substring rome
set -euo pipefail
cd "$(dirname "$0")/.."
CFG=$(mktemp --suffix=.yaml)
.venv/bin/python - "$CFG" <<'PY'
import sys, yaml
cfg = yaml.safe_load(open("configs/tiny.yaml"))
cfg["turn_policy"].update(detector="silence", resume_window_ms=0, barge_in_ms=300, echo_gate=False)
yaml.safe_dump(cfg, open(sys.argv[1], "w"), sort_keys=False)
PY
exec env HF_HUB_OFFLINE=1 .venv/bin/python -m app serve --no-ui --deploy-config "$CFG" --port "${PORT:-8000}" "$@"
