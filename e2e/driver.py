"""Drive the page in Debian Chromium with Playwright: fake media, start/stop, captions, audio levels.

Shared by the e2e tests and ``benchmarks/bench_browser.py``. Remote (assistant) audio is
measured inside the page by :file:`hooks.js` (WebAudio ``AnalyserNode`` RMS every 50 ms into
``window.__rms``); times are the page's ``performance.now()`` milliseconds.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

CHROMIUM = "/usr/bin/chromium"
"""Debian's Chromium (Playwright cannot download its own browser here)."""

HOOKS_JS = (Path(__file__).parent / "hooks.js").read_text()

TIMEOUT_SCALE = float(os.environ.get("E2E_TIMEOUT_SCALE", "1"))
"""Multiplies every wait (set >1 on a loaded machine: the models share the CPU with Chromium)."""

RMS_THRESHOLD = 0.01
"""Remote audio louder than this (RMS of a 2048-sample window) counts as audible speech."""

SILENCE_HOLD_MS = 600.0
"""Remote audio must stay below the threshold this long to count as silence (longer than the
pauses between words and sentences of the assistant's speech)."""

OFFLINE_ARGS: tuple[str, ...] = (
    "--autoplay-policy=no-user-gesture-required",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)


def chromium_args(*, audio: Path | None = None, video: Path | None = None, fake_ui: bool = True) -> list[str]:
    """Launch flags: fake devices (optionally fed from files), auto-granted permissions, offline hygiene."""
    args = ["--use-fake-device-for-media-stream", *OFFLINE_ARGS]
    if fake_ui:
        args.append("--use-fake-ui-for-media-stream")
    if audio is not None:
        args.append(f"--use-file-for-fake-audio-capture={Path(audio).resolve()}%noloop")
    if video is not None:
        args.append(f"--use-file-for-fake-video-capture={Path(video).resolve()}")
    return args


def launch(pw: Any, **kwargs: Any) -> Any:
    """A headless Debian Chromium with :func:`chromium_args` (``kwargs`` are passed on)."""
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=chromium_args(**kwargs))


def active_sessions(base_url: str) -> int:
    """Duplex sessions open on the server (``GET /health`` ``sessions.active``)."""
    return int(httpx.get(base_url + "/health", timeout=10).json()["sessions"]["active"])


def wait_until(cond: Callable[[], Any], timeout_s: float, *, every_s: float = 0.25, what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something truthy; raise ``TimeoutError`` after ``timeout_s``
    (times :data:`TIMEOUT_SCALE`)."""
    timeout_s *= TIMEOUT_SCALE
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


# ----------------------------------------------------------------------------- audio levels
def first_rise(rms: Sequence[Sequence[float]], after_ms: float, threshold: float = RMS_THRESHOLD) -> float | None:
    """Time of the first RMS sample above ``threshold`` at or after ``after_ms`` (None if none)."""
    for t, v in rms:
        if t >= after_ms and v > threshold:
            return t
    return None


def silence_from(rms: Sequence[Sequence[float]], after_ms: float, threshold: float = RMS_THRESHOLD,
                 hold_ms: float = SILENCE_HOLD_MS) -> float | None:
    """First time ``t >= after_ms`` from which RMS stays below ``threshold`` for ``hold_ms`` (None if not yet)."""
    start = None
    for t, v in rms:
        if t < after_ms:
            continue
        if v > threshold:
            start = None
            continue
        if start is None:
            start = t
        if t - start >= hold_ms:
            return start
    return None


def audible_between(rms: Sequence[Sequence[float]], t0: float, t1: float, threshold: float = RMS_THRESHOLD) -> bool:
    """Whether any RMS sample in ``[t0, t1]`` is above ``threshold``."""
    return any(t0 <= t <= t1 and v > threshold for t, v in rms)


# ----------------------------------------------------------------------------- page
class OmniPage:
    """One browser tab on the app's page.

    Args:
        browser: a Playwright browser (from :func:`launch`).
        base_url: ``http://127.0.0.1:<port>``.
        scripted_mic: replace the mic with a WebAudio source fed by :meth:`say` (exact timing).
        block_external: abort every request that leaves the machine (proves the page is offline-safe).
        echo: (scripted mic) ``{"gain_db": -15, "delay_ms": 60}``: the page's own remote audio is mixed
            into its mic (a speaker with no echo cancellation; see :file:`hooks.js`).
    """

    def __init__(self, browser: Any, base_url: str, *, scripted_mic: bool = False, block_external: bool = True,
                 context_kwargs: dict[str, Any] | None = None, echo: dict[str, float] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.context = browser.new_context(**{"viewport": {"width": 1280, "height": 1100}, **(context_kwargs or {})})
        self.page = self.context.new_page()
        self.external: list[str] = []
        self.legacy = False
        self.console_errors: list[str] = []
        if block_external:
            self.page.route("**/*", self._route)
        self.page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        if scripted_mic:
            self.page.add_init_script(f"window.__E2E = {{scriptedMic: true, echo: {json.dumps(echo)}}};")
        self.page.add_init_script(HOOKS_JS)

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith((self.base_url, "data:", "blob:")):
            route.continue_()
        else:
            self.external.append(url)
            route.abort()

    # -- navigation and controls ----------------------------------------------------
    def open(self) -> OmniPage:
        """Load the page and wait until its call bar is ready (``window.__omni.ready``).

        A page from before the call bar (``benchmarks/bench_browser.py --baseline-tree`` of an
        older checkout) is driven through FastRTC's own buttons (:attr:`legacy`).
        """
        self.page.goto(self.base_url + "/", wait_until="networkidle")
        self.page.wait_for_selector("#webrtc-av", state="attached", timeout=30_000)
        self.legacy = self.page.query_selector("[data-testid='start']") is None
        if not self.legacy:
            self.page.wait_for_function("() => window.__omni && window.__omni.ready", timeout=30_000)
        return self

    def _legacy_start(self, camera: bool) -> None:
        comp = "#webrtc-av" if camera else "#webrtc-audio"
        if not camera and not self.page.is_visible(comp):
            self.page.click("#camera-mode label:has-text('Mic only')")
            self.page.wait_for_selector(comp, state="visible")
        access = self.page.query_selector(f"{comp} button:has-text('Click to Access')")
        if access is not None:
            access.click()
        self.page.click(f"{comp} button[aria-label='start stream']", timeout=20_000)

    def _legacy_stop(self) -> None:
        for sel in ("#webrtc-av", "#webrtc-audio"):
            btn = self.page.query_selector(f"{sel} button[aria-label='stop stream']") or \
                self.page.query_selector(f"{sel} button:has-text('Stop')")
            if btn is not None and btn.is_visible():
                btn.click()
                return

    def set_camera(self, on: bool) -> None:
        """Set the camera switch beside Start (``data-testid="camera-toggle"``)."""
        box = self.page.locator("[data-testid='camera-toggle']")
        if box.is_checked() != on:
            box.click()

    def start(self, *, camera: bool) -> None:
        """Press Start (``data-testid="start"``) with the camera switch on or off."""
        if self.legacy:
            self._legacy_start(camera)
            return
        self.set_camera(camera)
        self.page.click("[data-testid='start'][data-mode='start']", timeout=20_000)

    def stop(self) -> None:
        """Press Stop (the same control), if a call is live or connecting."""
        if self.legacy:
            self._legacy_stop()
            return
        btn = self.page.query_selector("[data-testid='start'][data-mode='stop']")
        if btn is not None:
            btn.click()

    def call_state(self) -> str:
        """The page's conversation state (``data-testid="state"`` ``data-state``)."""
        return self.page.get_attribute("[data-testid='state']", "data-state") or ""

    def phases(self) -> list[str]:
        """Every state the page has shown so far, in order."""
        return self.page.evaluate("() => (window.__omni.phases || []).map((p) => p.phase)")

    def open_settings(self) -> None:
        """Open the settings drawer (closed by default)."""
        if not self.page.is_visible("#instructions"):
            self.page.click("#settings button, #settings .label-wrap")
            self.page.wait_for_selector("#instructions", state="visible")

    def screenshot(self, path: Path) -> Path:
        """Full-page screenshot."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def screenshot_viewport(self, path: Path) -> Path:
        """Screenshot of what is visible (the viewport, as a user sees it)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))
        return path

    def close(self) -> None:
        """Close the tab's context."""
        self.context.close()

    # -- state ------------------------------------------------------------------------
    def webrtc_id(self) -> str | None:
        """The current connection's id (recorded by the page's own script when it sends the offer)."""
        return self.page.evaluate("() => (window.__omni && window.__omni.webrtcId) || null")

    def state(self) -> dict[str, Any] | None:
        """``GET /webrtc/state/{id}`` of the current connection (None while not connected)."""
        wid = self.webrtc_id()
        if not wid:
            return None
        r = httpx.get(f"{self.base_url}/webrtc/state/{wid}", timeout=5)
        return r.json() if r.status_code == 200 else None

    def wait_session(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait until the handler opened its duplex session."""
        return wait_until(lambda: (s := self.state()) and s.get("session_id") and s, timeout_s, what="a duplex session")

    def captions(self, role: str | None = None) -> list[str]:
        """Caption lines shown on the page (``role``: ``user`` / ``assistant`` / None = all)."""
        sel = f"#captions-box [data-testid='caption-{role}']" if role else "#captions-box .cap"
        return [e.inner_text() for e in self.page.query_selector_all(sel)]

    def text(self, selector: str) -> str:
        """Inner text of an element ('' when absent)."""
        el = self.page.query_selector(selector)
        return el.inner_text() if el is not None else ""

    def wait_caption(self, role: str, predicate: Callable[[str], bool], timeout_s: float) -> str:
        """Wait for a caption line of ``role`` matching ``predicate``; returns it."""
        def find() -> str | None:
            return next((c for c in self.captions(role) if predicate(c)), None)
        try:
            return wait_until(find, timeout_s, what=f"a {role} caption")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; captions: {self.captions()}; status: {self.text('#status-box')!r}") from None

    def now_ms(self) -> float:
        """The page's ``performance.now()``."""
        return float(self.page.evaluate("() => performance.now()"))

    def rms(self) -> list[list[float]]:
        """Remote-audio RMS samples ``[[t_ms, rms], ...]``."""
        return self.page.evaluate("() => window.__rms.slice()")

    def ducks(self) -> list[dict[str, Any]]:
        """Local barge-ins so far (``app/ui/assets/barge_in.js``): ``[{t, level_db, floor_db, unmuted_at}]``."""
        return self.page.evaluate("() => ((window.__omni || {}).ducks || []).slice()")

    def rms_since(self, t_ms: float) -> list[list[float]]:
        """Remote-audio RMS samples at or after ``t_ms`` (cheaper than :meth:`rms` in a poll loop)."""
        return self.page.evaluate("(t) => window.__rms.filter((r) => r[0] >= t)", t_ms)

    def rises_since(self, t_ms: float) -> list[list[float]]:
        """``[[t_poll_ms, t_onset_ms], ...]``: each rise of the remote audio above the threshold
        at or after ``t_ms``, the poll and the first 5 ms window above it (``hooks.js``)."""
        return self.page.evaluate("(t) => window.__rise.filter((r) => r[0] >= t)", t_ms)

    def rx_since(self, t_ms: float) -> list[dict[str, Any]]:
        """Inbound-rtp stats rows of the remote audio at or after ``t_ms`` (``hooks.js``: every
        50 ms; ``t`` and ``lastPacketReceivedTimestamp`` on the page clock)."""
        rows, fields = self.page.evaluate("(t) => [window.__rx.filter((r) => r[0] >= t), window.__rxFields]", t_ms)
        return [dict(zip(["t", *fields], r, strict=True)) for r in rows]

    def clock_offset_s(self, tries: int = 5) -> tuple[float, float]:
        """``(offset, rtt)``: ``time.monotonic() ~= performance.now() / 1000 + offset``, from the
        round trip with the smallest ``rtt`` (s) of ``tries``. ``time.monotonic()`` is the machine's
        ``CLOCK_MONOTONIC``: the same in the server process."""
        best = (0.0, float("inf"))
        for _ in range(tries):
            t0 = time.monotonic()
            p = self.now_ms()
            t1 = time.monotonic()
            if t1 - t0 < best[1]:
                best = ((t0 + t1) / 2 - p / 1000.0, t1 - t0)
        return best

    def mic_rms(self) -> list[list[float]]:
        """Mic RMS samples as sent by the page."""
        return self.page.evaluate("() => window.__micRms.slice()")

    def say(self, wav: Path) -> tuple[float, float]:
        """(scripted mic) Play ``wav`` into the mic now; returns its ``(start_ms, end_ms)`` in page time."""
        b64 = base64.b64encode(Path(wav).read_bytes()).decode("ascii")
        out = self.page.evaluate("(b) => window.__say(b)", b64)
        return float(out["start"]), float(out["end"])

    def sleep_until(self, t_ms: float) -> None:
        """Block until the page clock reaches ``t_ms``."""
        while True:
            left = t_ms - self.now_ms()
            if left <= 0:
                return
            time.sleep(min(left / 1000.0, 0.05))
