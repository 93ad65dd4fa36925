"""The camera costs little: the page sends what the units read and takes no video back.

A camera call (Chromium's fake camera fed a 640x480, 15 fps sign, the real server and tiny family):

* the camera's transceiver is send-only and the page receives no video (no inbound-rtp video; the
  server used to encode a 10 fps echo of the frames and the page showed that);
* the preview is the local camera: the component's ``<video>`` holds the track the page sends,
  and it plays the assistant's audio beside it;
* the encoder sends at most the units' rate (``page.js`` ``camFps``: one unit of 1000 ms, frame
  stacking 1 -> 2 frames/s) at the models' tile (448 px on the longer side): the page's
  outbound-rtp and the server's own count of decoded frames (``GET /webrtc/state`` ``camera``)
  say so (the old page sent 15-30 frames/s at 640x480);
* the model is still given the camera: the unit preview's frame (``/webrtc/unit/{id}/0.jpg``).
"""

from __future__ import annotations

import io
import time

import httpx
import pytest
from PIL import Image

from e2e.driver import OmniPage, active_sessions, launch, wait_until

pytestmark = pytest.mark.e2e

UNIT_FPS_LIMIT = 2.0
"""``page.js`` ``camFps`` for the default config (1000 ms unit, stacking 1): ceil(1 * 1000 / 1000) + 1."""

SEND_MAX_SIDE = 448
"""``app.ui.page.CAMERA_SEND_MAX_SIDE`` (the vision tile)."""

VIDEO_STATS = """async () => {
  const pc = window.__pcs[window.__pcs.length - 1];
  const rep = await pc.getStats();
  const out = {inbound_video: 0, outbound: null};
  rep.forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "video") out.inbound_video += 1;
    if (s.type === "outbound-rtp" && s.kind === "video")
      out.outbound = {frames: s.framesEncoded, width: s.frameWidth, height: s.frameHeight, t: s.timestamp};
  });
  out.directions = pc.getTransceivers().map((t) => [t.receiver.track && t.receiver.track.kind, t.currentDirection]);
  out.receivers_video = pc.getReceivers().filter((r) => r.track && r.track.kind === "video"
                                                  && r.track.readyState === "live" && !r.track.muted).length;
  const sent = pc.getSenders().map((s) => s.track).find((t) => t && t.kind === "video");
  const el = document.querySelector("#webrtc-av video");
  const shown = el && el.srcObject ? el.srcObject.getTracks().map((t) => [t.kind, t.id]) : [];
  out.preview = {shown: shown, sent: sent ? sent.id : null, muted: el ? el.muted : null,
                 playing: el ? !el.paused : null, flipped: el ? el.classList.contains("flip") : null};
  out.cam_send = (window.__omni || {}).camSend || null;
  return out;
}"""


def test_camera_call_sends_the_unit_rate_and_takes_no_video_back(ui_server, pw, question_mic, sign_camera,
                                                                 artifacts):
    base = ui_server.base_url
    wait_until(lambda: active_sessions(base) == 0, 20, what="no conversation left by other tests")
    browser = launch(pw, audio=question_mic, video=sign_camera)
    try:
        tab = OmniPage(browser, base).open()
        tab.start(camera=True)
        tab.wait_session(60)
        wait_until(lambda: tab.page.evaluate("() => !!(window.__omni || {}).camSend"), 20, what="the camera tuned")
        first = tab.page.evaluate(VIDEO_STATS)
        t0 = time.monotonic()
        tab.page.wait_for_timeout(6000)
        st = tab.page.evaluate(VIDEO_STATS)
        wall = time.monotonic() - t0

        # no video back: the camera's transceiver is send-only, nothing is received
        assert st["inbound_video"] == 0, st
        assert ["video", "sendonly"] in st["directions"], st["directions"]
        assert st["receivers_video"] == 0, st
        # the preview shows the local camera (the track sent), beside the assistant's audio
        pv = st["preview"]
        assert pv["sent"] and ["video", pv["sent"]] in pv["shown"], pv
        assert any(k == "audio" for k, _ in pv["shown"]) and pv["muted"] is False and pv["playing"], pv
        # sent at the units' rate and the models' size
        assert st["cam_send"]["fps"] == UNIT_FPS_LIMIT, st["cam_send"]
        a, b = first["outbound"], st["outbound"]
        sent_fps = (b["frames"] - a["frames"]) / ((b["t"] - a["t"]) / 1000.0)
        assert sent_fps <= UNIT_FPS_LIMIT * 1.25, (sent_fps, a, b)
        assert max(b["width"], b["height"]) <= SEND_MAX_SIDE, b
        # the server decoded no more than that (its own count)
        cam = tab.state()["camera"]
        assert cam["frames"] >= 2 and cam["fps"] <= UNIT_FPS_LIMIT * 1.25, (cam, wall)
        # and the model is still given the camera: the unit's frame, at the sent size
        r = httpx.get(f"{base}/webrtc/unit/{tab.webrtc_id()}/0.jpg", timeout=10)
        assert r.status_code == 200, r.text
        img = Image.open(io.BytesIO(r.content))
        assert max(img.size) <= SEND_MAX_SIDE and min(img.size) >= 200, img.size
        tab.screenshot(artifacts / "camera_cost_call.png")
        tab.stop()
    finally:
        browser.close()
