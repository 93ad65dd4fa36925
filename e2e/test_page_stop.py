"""After Stop, no mic or camera track stays live (the browser's recording indicator goes off),
and Start again asks anew: the second conversation is heard, answered and (camera on) seen.

Every track ``navigator.mediaDevices.getUserMedia`` hands to the page is recorded by an init
script (:data:`RECORD_GUM`), with when it was asked for: before Stop, or after it (FastRTC's
components ask for the mic, and the camera, again when their Stop is pressed, to keep a preview).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from e2e.driver import OmniPage, active_sessions, first_rise, launch, wait_until

pytestmark = pytest.mark.e2e

ANSWER_TIMEOUT_S = 90.0
"""As in ``test_conversation.py``: the tiny family shares 2 cores with Chromium."""

RECORD_GUM = """(() => {
  const md = navigator.mediaDevices;
  const orig = md.getUserMedia.bind(md);
  window.__gumLog = [];  // [{at, audio, video, tracks}] every getUserMedia call, in order
  md.getUserMedia = async function (constraints) {
    const rec = {at: performance.now(), audio: !!(constraints && constraints.audio),
                 video: !!(constraints && constraints.video), tracks: []};
    window.__gumLog.push(rec);
    const stream = await orig(constraints);
    rec.tracks = stream.getTracks();
    return stream;
  };
})();"""
"""Init script (added after ``hooks.js``, so it sees what Chromium's fake devices give; the
page's own scripts wrap it): records every getUserMedia call and the tracks it handed out."""

LIVE_TRACKS = """(stopAt) => window.__gumLog.flatMap((rec, call) => rec.tracks
    .filter((tr) => tr.readyState !== 'ended')
    .map((tr) => ({call, kind: tr.kind, state: tr.readyState, afterStop: stopAt !== null && rec.at >= stopAt})))"""


def _live_tracks(tab: OmniPage, stop_at: float | None = None) -> list[dict[str, Any]]:
    """Tracks from getUserMedia that are not ended: ``[{call, kind, state, afterStop}]``."""
    return tab.page.evaluate(LIVE_TRACKS, stop_at)


def _wait_listening(tab: OmniPage) -> None:
    """Wait until the page says the conversation is listening."""
    wait_until(lambda: tab.call_state() == "listening", 30,
               what=f"listening (alert: {tab.text('#omni-alert')!r})")


def _stop_and_check_nothing_live(tab: OmniPage, base_url: str) -> None:
    """Press Stop, wait for the slot to be freed and for FastRTC's own requests at Stop to settle,
    then require every track from getUserMedia to have ended."""
    stop_at = tab.now_ms()
    tab.stop()
    wait_until(lambda: tab.call_state() == "idle", 20, what="Stop")  # (10 s ran out once, camera on, 2 slow cores)
    wait_until(lambda: active_sessions(base_url) == 0, 10, what="the slot to be freed")
    tab.page.wait_for_timeout(1500)  # FastRTC's own re-acquisition at Stop resolves well within this
    live = _live_tracks(tab, stop_at)
    assert live == [], f"tracks still live after Stop: {live}"


def _sent_tracks(tab: OmniPage) -> list[dict[str, str]]:
    """Kind and state of the tracks the newest peer connection sends (``hooks.js``'s ``__pcs``)."""
    return tab.page.evaluate("""() => { const pc = window.__pcs[window.__pcs.length - 1];
        return pc.getSenders().filter((s) => s.track).map((s) => ({kind: s.track.kind, state: s.track.readyState})); }""")


@pytest.mark.parametrize("camera", [False, True], ids=["mic_only", "camera_on"])
def test_after_stop_no_mic_or_camera_track_stays_live(ui_server, pw, question_mic, sign_camera, camera):
    """After Stop every mic (and camera) track the page was given has ended, including any asked
    for at Stop; Start again sends live tracks, and the second conversation is heard, answered
    aloud and (camera on) given camera frames; after its Stop nothing is live either."""
    base = ui_server.base_url
    wait_until(lambda: active_sessions(base) == 0, 20, what="no conversation left by other tests")
    browser = launch(pw, audio=question_mic, video=sign_camera if camera else None)
    try:
        tab = OmniPage(browser, base)
        tab.page.add_init_script(RECORD_GUM)
        tab.open()
        tab.start(camera=camera)
        _wait_listening(tab)
        kinds = sorted({t["kind"] for t in _live_tracks(tab)})
        assert kinds == (["audio", "video"] if camera else ["audio"]), kinds  # (the probe sees the call's tracks)
        _stop_and_check_nothing_live(tab, base)

        # Start again: new live tracks go out, the question is heard and answered aloud
        first_id = tab.webrtc_id()
        started = tab.now_ms()
        tab.start(camera=camera)
        _wait_listening(tab)
        assert tab.webrtc_id() != first_id
        sent = _sent_tracks(tab)
        assert sorted(s["kind"] for s in sent) == (["audio", "video"] if camera else ["audio"]), sent
        assert all(s["state"] == "live" for s in sent), sent
        tab.wait_caption("user", lambda c: "capital" in c.lower(), ANSWER_TIMEOUT_S)
        tab.wait_caption("assistant", lambda c: "capital" in c.lower() or "paris" in c.lower(), ANSWER_TIMEOUT_S)
        wait_until(lambda: first_rise(tab.rms(), started), 30, what="the second conversation's answer, audible")
        if camera:  # the server was given camera frames in the second conversation
            unit = f"{base}/webrtc/unit/{tab.webrtc_id()}/0.jpg"
            wait_until(lambda: httpx.get(unit, timeout=5).status_code == 200, 15, what="a camera frame given")
        _stop_and_check_nothing_live(tab, base)
        assert tab.external == [], tab.external
    finally:
        browser.close()
