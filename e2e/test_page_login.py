"""(k) A keyed server protects the page: Chromium is sent to /login, a wrong key is refused, the
right one (typed once) opens the page, whose Gradio calls and WebRTC offer then pass with the
login cookie; with ``server.public_page`` the page opens without a key while ``/v1`` stays keyed;
the page's conversations count against ``duplex_session.max_sessions_per_client``."""

from __future__ import annotations

import httpx
import pytest

from e2e.driver import OmniPage, launch, wait_until
from tests.conftest import make_server  # noqa: F401  (shared fixture)

pytestmark = pytest.mark.e2e

KEY = "sk-e2e-Charlie-51b7"


@pytest.fixture(scope="module")
def keyed_ui(make_server):  # noqa: F811
    """The app with the page on 0.0.0.0 (WebRTC needs a non-loopback candidate), keyed."""
    return make_server(host="0.0.0.0", with_ui=True, server={"api_key": KEY})


def test_page_asks_for_the_key_once_then_talks(keyed_ui, pw, silent_mic, artifacts):
    browser = launch(pw, audio=silent_mic)
    try:
        tab = OmniPage(browser, keyed_ui.base_url)
        page = tab.page
        page.goto(keyed_ui.base_url + "/")
        assert page.url.endswith("/login")
        page.fill("#api_key", "sk-wrong")
        page.click("#login")
        assert "not valid" in page.inner_text("body")
        page.fill("#api_key", KEY)
        page.click("#login")
        page.wait_for_selector("#webrtc-av", timeout=30_000)
        # Gradio's own calls carry the cookie: the load event filled in the model line
        wait_until(lambda: "tiny" in tab.text("#model-info"), 20, what="the model line")
        tab.screenshot(artifacts / "k_login_page.png")
        # the WebRTC offer passes the key check: a conversation opens a session
        tab.start(camera=False)
        # (each poll calls into the page: Playwright serves the page's routed requests only then)
        wait_until(lambda: "Listening" in tab.text("#status-box") and keyed_ui.engine.sessions.active == 1, 30,
                   what="a duplex session")
        tab.stop()
        wait_until(lambda: tab.text("#status-box") is not None and keyed_ui.engine.sessions.active == 0, 20,
                   what="the slot to be freed")
        # the chat tab runs the model through the keyed /v1 route in-process: it passes too
        page.get_by_role("tab", name="Chat (no mic)").click()
        page.fill("#chat-text textarea", "What is the capital of France?")
        page.click("#chat-send")
        answer = wait_until(lambda: page.input_value("#chat-answer textarea"), 90, what="a chat answer")
        assert "paris" in answer.lower()
    finally:
        browser.close()
    # (the browser's cookie is not a key for the API)
    assert httpx.get(keyed_ui.base_url + "/v1/models", timeout=10).status_code == 401


def test_public_page_opens_without_a_key_but_the_api_stays_keyed(make_server, pw):  # noqa: F811
    srv = make_server(with_ui=True, server={"api_key": KEY, "public_page": True})
    assert httpx.get(srv.base_url + "/", timeout=10).status_code == 200
    assert httpx.get(srv.base_url + "/v1/models", timeout=10).status_code == 401
    browser = launch(pw)
    try:
        tab = OmniPage(browser, srv.base_url).open()
        wait_until(lambda: "tiny" in tab.text("#model-info"), 20, what="the model line")
    finally:
        browser.close()


def test_the_page_counts_against_the_per_client_session_limit(make_server, pw, silent_mic):  # noqa: F811
    srv = make_server(host="0.0.0.0", with_ui=True, duplex_session={"max_sessions_per_client": 1, "max_sessions": 4})
    first, second = launch(pw, audio=silent_mic), launch(pw, audio=silent_mic)
    try:
        a = OmniPage(first, srv.base_url).open()
        a.start(camera=False)
        wait_until(lambda: "Listening" in a.text("#status-box") and srv.engine.sessions.active == 1, 30,
                   what="the first conversation")
        b = OmniPage(second, srv.base_url).open()  # same client address: over its share
        b.start(camera=False)
        alert = wait_until(lambda: (t := b.text("#omni-alert")) and "already have" in t and t, 30,
                           what="the per-client refusal")
        assert "1 conversation" in alert and srv.engine.sessions.active == 1
        a.stop()
    finally:
        first.close()
        second.close()
