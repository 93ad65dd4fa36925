"""Fixtures of the browser end-to-end suite: a real server with the page, Chromium, media files.

The server is a :class:`tests.live_server.LiveServer` bound to ``0.0.0.0`` (aioice never
gathers loopback candidates, so WebRTC needs the host's non-loopback address) serving the real
``tiny`` family; pages are opened at ``http://127.0.0.1:<port>/``. Screenshots go to
``artifacts/e2e/``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from e2e.driver import CHROMIUM
from e2e.media import sign_y4m, speech_wav
from tests.conftest import deploy_config, tiny_family  # noqa: F401  (shared fixtures)

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "e2e"

QUESTION = "What is the capital of France?"
SIGN_TEXT = "OPEN\n24 HOURS"


def pytest_collection_modifyitems(config, items):
    """Skip the browser tests where Chromium or Playwright is missing (never silently pass)."""
    missing = None
    if not Path(CHROMIUM).exists():
        missing = f"{CHROMIUM} not installed"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "playwright not installed"
    if missing:
        for item in items:
            if "e2e" in item.keywords and item.fspath and "e2e" in str(item.fspath):
                item.add_marker(pytest.mark.skip(reason=missing))


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """``artifacts/e2e`` (created)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def media(tmp_path_factory) -> Path:
    """A per-run folder for the fake mic/camera files."""
    return tmp_path_factory.mktemp("e2e-media")


@pytest.fixture(scope="session")
def question_mic(media) -> Path:
    """Fake mic: 5 s silence, the question, 12 s silence (48 kHz mono PCM16)."""
    return speech_wav(QUESTION, media / "mic_france.wav", lead_s=5.0, tail_s=12.0)


@pytest.fixture(scope="session")
def sign_mic(media) -> Path:
    """Fake mic: 5 s silence, 'What does the sign say?', 12 s silence."""
    return speech_wav("What does the sign say?", media / "mic_sign.wav", lead_s=5.0, tail_s=12.0)


@pytest.fixture(scope="session")
def silent_mic(media) -> Path:
    """Fake mic: 30 s of silence (holds a session without talking)."""
    import numpy as np

    from e2e.media import write_wav

    return write_wav(media / "mic_silence.wav", np.zeros(48_000 * 30, np.float32))


@pytest.fixture(scope="session")
def sign_camera(media) -> Path:
    """Fake camera: a white sign reading OPEN 24 HOURS (Y4M, 640x480, 15 fps, looped)."""
    return sign_y4m(SIGN_TEXT, media / "sign.y4m", seconds=1.0)


@pytest.fixture(scope="session")
def clips(media) -> dict[str, Path]:
    """Speech clips for the scripted mic (0.2 s lead-in each)."""
    return {
        # (a spelling is answered with every letter, ~5 s of speech, whatever the LM: the barge-in
        # tests need an answer still playing seconds after it starts)
        "long": speech_wav("How do you spell encyclopedia?", media / "clip_spell.wav", lead_s=0.2, tail_s=0.3),
        "interrupt": speech_wav("Wait, stop. What is two plus two?", media / "clip_two.wav", lead_s=0.2, tail_s=0.3),
        "france": speech_wav(QUESTION, media / "clip_france.wav", lead_s=0.2, tail_s=0.3),
    }


@pytest.fixture(scope="session")
def ui_server(deploy_config, tiny_family):  # noqa: F811
    """The app (API + page) on 0.0.0.0 with the default config and the real tiny family."""
    from tests.live_server import LiveServer

    srv = LiveServer(deploy_config, tiny_family, host="0.0.0.0", with_ui=True).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def pw():
    """The Playwright driver (sync API). Module-scoped: while it runs, its event loop owns the
    main thread, so async tests (pytest-asyncio) in other modules must not overlap it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session", autouse=True)
def _tools_present():
    """espeak-ng/sox/ffmpeg are needed to make the media files."""
    missing = [t for t in ("sox", "ffmpeg") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"missing tools: {missing}")
