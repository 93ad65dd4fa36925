"""Shared fixtures: the real `tiny` family (loaded once) and real servers on loopback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

FIXTURES = Path(__file__).parent / "fixtures"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


@pytest.fixture(scope="session")
def deploy_config():
    """The default deploy config (configs/tiny.yaml)."""
    from app.config import load_deploy_config

    return load_deploy_config()


@pytest.fixture(scope="session")
def tiny_family(deploy_config):
    """The real embedded models, loaded once per test run."""
    from app.backend.models.tiny.family import load_tiny_family

    return load_tiny_family()


@pytest.fixture(scope="session")
def server(deploy_config, tiny_family):
    """A real server (API only) on loopback with the default config."""
    from tests.live_server import LiveServer

    srv = LiveServer(deploy_config, tiny_family).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def make_server(deploy_config, tiny_family):
    """Factory of extra servers sharing the loaded models: ``make_server(duplex_session={"max_sessions": 1})``.

    Keyword arguments are deploy-config sections merged over the default config.
    """
    from app.config import parse_deploy_config
    from tests.live_server import LiveServer

    started = []

    def make(*, host: str = "127.0.0.1", with_ui: bool = False, **sections):
        data = deploy_config.model_dump(exclude_none=True)
        for key, value in sections.items():
            data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
        srv = LiveServer(parse_deploy_config(data), tiny_family, host=host, with_ui=with_ui).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


def espeak_wav(text: str, path: Path, *, rate_wpm: int = 160, lead_s: float = 0.0, tail_s: float = 0.0) -> Path:
    """Synthesize ``text`` with Debian's espeak-ng to a 16 kHz mono WAV (cached by name).

    Silence of ``lead_s``/``tail_s`` seconds is added with sox.
    """
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = path.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-v", "en", "-s", str(rate_wpm), "-w", str(raw), text], check=True)
    subprocess.run(["sox", "-D", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(path),
                    "pad", str(lead_s), str(tail_s)], check=True)
    raw.unlink()
    return path


@pytest.fixture(scope="session")
def speech_dir(tmp_path_factory) -> Path:
    """A per-run folder for synthesized speech fixtures."""
    return tmp_path_factory.mktemp("speech")


@pytest.fixture(scope="session")
def question_wav(speech_dir) -> Path:
    """'What is the capital of France?' spoken by espeak-ng, 16 kHz mono, 0.5 s lead, 1.5 s tail."""
    return espeak_wav("What is the capital of France?", speech_dir / "france.wav", lead_s=0.5, tail_s=1.5)
