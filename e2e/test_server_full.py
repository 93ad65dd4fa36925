"""(f) Server full: with ``duplex_session.max_sessions: 1`` the second browser is refused with a
clear "Server is full" message (the session limit bounds the page, not only the realtime API),
and gets in once the first one stops (its slot is freed on disconnect)."""

from __future__ import annotations

import pytest

from app.config import DEFAULT_CONFIG_PATH, load_deploy_config
from e2e.driver import OmniPage, launch, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture()
def one_slot_server(tmp_path, tiny_family):
    """A second server whose config allows one duplex session (YAML overlay on configs/tiny.yaml)."""
    from tests.live_server import LiveServer

    overlay = tmp_path / "one_slot.yaml"
    overlay.write_text(f"base_config: {DEFAULT_CONFIG_PATH}\nduplex_session:\n  max_sessions: 1\n")
    cfg = load_deploy_config(overlay)
    assert cfg.duplex_session.max_sessions == 1 and cfg.ui.concurrency_limit > 1
    srv = LiveServer(cfg, tiny_family, host="0.0.0.0", with_ui=True).start()
    yield srv
    srv.stop()


def test_second_browser_is_told_the_server_is_full(one_slot_server, pw, silent_mic, artifacts):
    first, second = launch(pw, audio=silent_mic), launch(pw, audio=silent_mic)
    try:
        a = OmniPage(first, one_slot_server.base_url).open()
        a.start(camera=False)
        a.wait_session()
        assert one_slot_server.engine.sessions.active == 1

        b = OmniPage(second, one_slot_server.base_url).open()
        b.start(camera=False)
        alert = wait_until(lambda: (t := b.text("#omni-alert")) and "full" in t.lower() and t, 30,
                           what="the server-full message")
        b.screenshot(artifacts / "f_server_full.png")
        assert "server is full" in alert.lower() and "Try again in " in alert  # when to retry, from the refusal
        wait_until(lambda: b.call_state() == "error", 10, what="the error state")
        assert b.text("[data-testid='start']").strip().endswith("Try again")  # the way out
        assert one_slot_server.engine.sessions.active == 1

        # the first conversation ends -> its slot comes back -> the second browser gets in
        a.stop()
        wait_until(lambda: one_slot_server.engine.sessions.active == 0, 20, what="the slot to be freed")
        b.page.wait_for_timeout(1500)
        b.start(camera=False)
        state = b.wait_session(30)
        assert state["session_id"]
        assert not b.page.locator("#omni-alert").is_visible(), b.page.evaluate("() => window.__omni.alerts")
        b.stop()
    finally:
        first.close()
        second.close()
