"""(a) The page loads with no network and shows its controls; API routes still win over ``/``;
the "Chat (no mic)" tab answers through ``/v1/chat/completions``; a denied microphone is explained."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest

from e2e.driver import OmniPage, active_sessions, launch, wait_until
from e2e.media import sign_png

pytestmark = pytest.mark.e2e

CONTROLS = [
    "#webrtc-av", "[data-testid='start']", "[data-testid='camera-toggle']", "[data-testid='state']",
    "[data-testid='mic-meter']", "[data-testid='assistant-meter']", "#captions-box", "#metrics-box", "#status-box",
    "#instructions", "#speech-on", "#temperature", "#max-tokens", "#stack-frames", "#overlap", "#voice-ref",
    "[role='tab']:has-text('Talk')", "[role='tab']:has-text('Chat (no mic)')",
]


@pytest.fixture
def active(ui_server) -> Callable[[], int]:
    """Counts the server's open sessions; waits first until earlier tests' sessions are closed."""
    def count() -> int:
        return active_sessions(ui_server.base_url)

    wait_until(lambda: count() == 0, 20, what="no conversation left by other tests")
    return count


def test_api_routes_win_over_the_page(ui_server):
    base = ui_server.base_url
    h = httpx.get(base + "/health", timeout=10)
    assert h.status_code == 200 and h.json()["status"] == "ok"
    m = httpx.get(base + "/metrics", timeout=10)
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    assert httpx.get(base + "/v1/models", timeout=10).json()["object"] == "list"
    wrong = httpx.get(base + "/v1/chat/completions", timeout=10)  # not the page's {"detail": ...}
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert httpx.get(base + "/v1/nope", timeout=10).json()["error"]["code"] == "unknown_url"
    page = httpx.get(base + "/", timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    # FastRTC's API route is mounted on the same app
    r = httpx.post(base + "/webrtc/offer", json={"type": "ice-candidate", "webrtc_id": "nope", "candidate": {}}, timeout=10)
    assert r.status_code == 200 and r.json()["meta"]["error"] == "unknown_connection"
    assert httpx.get(base + "/webrtc/state/nope", timeout=10).status_code == 404


def test_page_loads_offline_with_controls(ui_server, pw, artifacts):
    browser = launch(pw)
    try:
        tab = OmniPage(browser, ui_server.base_url, block_external=True).open()
        for sel in CONTROLS:
            assert tab.page.query_selector(sel) is not None, f"missing control {sel}"
        # voice cloning is a capability flag; tiny has none -> upload disabled with a note
        wait_until(lambda: "not supported" in tab.text("#voice-note"), 15, what="voice note")
        assert "tiny" in tab.text("#model-info")
        assert tab.page.query_selector("#webrtc-av button:has-text('Click to Access Webcam')") is not None
        tab.screenshot(artifacts / "a_page_offline.png")
        # nothing outside the machine was needed (Gradio's optional iframe-resizer/font links were refused)
        assert all(not u.startswith("http://127.0.0.1") for u in tab.external)
        assert tab.page.title()
    finally:
        browser.close()


def test_camera_off_gives_the_conversation_the_row(ui_server, pw, artifacts):
    """With the camera switch off there is no preview column to leave empty: the conversation is
    centred at a readable width; switched back on, the preview is beside it again."""
    browser = launch(pw)
    try:
        tab = OmniPage(browser, ui_server.base_url, context_kwargs={"viewport": {"width": 1280, "height": 800}}).open()
        box = lambda sel: tab.page.locator(sel).bounding_box()
        assert tab.page.is_visible("#preview-col")
        tab.set_camera(False)
        wait_until(lambda: not tab.page.is_visible("#preview-col"), 5, what="the preview column to go")
        talk, row = box("#talk-row > :first-child"), box("#talk-row")
        left, right = talk["x"] - row["x"], row["x"] + row["width"] - talk["x"] - talk["width"]
        assert talk["width"] <= 760 and abs(left - right) < 4, (talk, row)
        tab.screenshot(artifacts / "a_page_camera_off.png")
        tab.set_camera(True)
        wait_until(lambda: tab.page.is_visible("#preview-col"), 5, what="the preview column to come back")
        assert box("#preview-col")["x"] > box("#talk-row > :first-child")["x"]
    finally:
        browser.close()


@pytest.mark.filterwarnings("error:Trying to convert audio automatically:UserWarning")  # (we hand it PCM16)
def test_chat_tab_answers_text_and_image(ui_server, pw, media, artifacts):
    browser = launch(pw)
    try:
        tab = OmniPage(browser, ui_server.base_url).open()
        tab.page.get_by_role("tab", name="Chat (no mic)").click()
        tab.page.click("#chat-send")  # nothing to send: a hint, not an error on every output
        tab.page.get_by_text("Type a message or upload a file.").first.wait_for(timeout=10_000)
        assert tab.page.locator("#tab-chat :text-is('Error')").count() == 0
        tab.page.fill("#chat-text textarea", "What is the capital of France?")
        tab.page.click("#chat-send")
        answer = wait_until(lambda: tab.page.input_value("#chat-answer textarea"), 90, what="a chat answer")
        assert "paris" in answer.lower()
        # the spoken answer is loaded in the player (its duration is shown as 0:0N, N > 0)
        wait_until(lambda: re.search(r"0:0[1-9]|0:[1-5][0-9]", tab.text("#chat-audio")), 30, what="the spoken answer")
        tab.screenshot(artifacts / "a_chat_tab.png")
        # an uploaded picture is read
        tab.page.set_input_files("#chat-files input[type=file]", str(sign_png("OPEN\n24 HOURS", media / "chat_sign.png")))
        # Gradio uploads the file on its own: a Send before the upload is done sends no picture
        wait_until(lambda: tab.page.query_selector("#chat-files [aria-label='chat_sign.png']"), 30,
                   what="the uploaded picture listed")
        tab.page.fill("#chat-text textarea", "What does the sign say?")
        tab.page.click("#chat-send")
        heard = wait_until(lambda: (t := tab.page.input_value("#chat-heard textarea")) and "Read:" in t and t, 90,
                           what="what the model read")
        assert "HOURS" in heard.upper()
        tab.screenshot(artifacts / "a_chat_tab_image.png")
    finally:
        browser.close()


def test_mic_denied_is_explained(ui_server, pw, artifacts):
    browser = launch(pw, fake_ui=False)  # no auto-grant: the permission request is refused headless
    try:
        tab = OmniPage(browser, ui_server.base_url).open()
        tab.start(camera=False)
        msg = wait_until(lambda: tab.text("#omni-alert"), 15, what="the mic-denied message")
        assert "denied" in msg.lower()
        tab.screenshot(artifacts / "g_mic_denied.png")
    finally:
        browser.close()


def test_start_clicked_again_while_connecting_opens_one_conversation(ui_server, pw, active, artifacts):
    """A second click on Start while FastRTC still shows "Connecting…" is ignored: one session
    opens (FastRTC alone would open a second connection and orphan the first), the page shows
    its status, and Stop frees the slot at once."""
    browser = launch(pw)
    try:
        tab = OmniPage(browser, ui_server.base_url, scripted_mic=True).open()
        tab.set_camera(False)
        # FastRTC's own (hidden) buttons, pressed directly: the guard is against its double start
        tab.page.evaluate("""() => { for (const b of document.querySelectorAll("#webrtc-audio button"))
            if (/Click to Access/.test(b.textContent)) b.click(); }""")
        tab.page.wait_for_selector("#webrtc-audio button[aria-label='start stream']", state="attached")
        # the second click lands after the first connection's offer went out, while the answer and
        # ICE are still pending (FastRTC alone then starts another connection, keeping the first)
        spinner_at_second_click = tab.page.evaluate("""async () => {
            const b = () => document.querySelector("#webrtc-audio button[aria-label='start stream']");
            const before = window.__omni.webrtcId;
            b().click();
            while (window.__omni.webrtcId === before) await new Promise((r) => setTimeout(r, 1));
            const spinner = !!b().querySelector("[title=spinner]");
            b().click();
            return spinner;
        }""")
        assert spinner_at_second_click, "connected before the second click: nothing was tested"
        tab.wait_session()
        wait_until(lambda: "listening" in tab.text("#status-box").lower(), 20, what="the page's status")
        tab.page.wait_for_timeout(4000)  # > the handler's 3 s wait for page inputs (an orphan opens then)
        assert active() == 1
        assert tab.page.evaluate("window.__omni.ignoredClicks") == 1
        assert "listening" in tab.text("#status-box").lower()
        tab.screenshot(artifacts / "h_start_twice.png")
        tab.stop()
        wait_until(lambda: active() == 0, 5, what="Stop to free the conversation slot")
    finally:
        browser.close()


def test_closing_the_tab_frees_the_conversation_slot_at_once(ui_server, pw, active):
    """Closing the tab without pressing Stop: the page closes its WebRTC connection on
    ``pagehide``, so the server frees the slot in well under its 15 s input-stall timeout."""
    browser = launch(pw)
    try:
        tab = OmniPage(browser, ui_server.base_url, scripted_mic=True).open()
        tab.start(camera=False)
        tab.wait_session()
        assert active() == 1
        tab.page.close()
        wait_until(lambda: active() == 0, 3, what="the slot to be freed after the tab closed")
    finally:
        browser.close()
