"""(b) spoken question -> spoken answer + captions; (d) the camera's printed text is read and used;
(e) two browsers at once both get answers. Fake mic/camera files, real server, real tiny models."""

from __future__ import annotations

import pytest

from e2e.driver import RMS_THRESHOLD, OmniPage, launch, wait_until

pytestmark = pytest.mark.e2e

ANSWER_TIMEOUT_S = 90.0
"""The tiny family answers in ~2-10 s on 2 idle cores; Chromium shares those cores, and a busy
machine stretches that a lot (scale every wait with ``E2E_TIMEOUT_SCALE``)."""


def _has_paris(text: str) -> bool:
    return "paris" in text.lower()


def _answered(text: str) -> bool:
    """An answer: Paris, or any whole sentence. Whisper base, through WebRTC's Opus on a loaded
    machine, has heard "What is the capital of friends?" (answers: "The capital of friends is New
    York.", or one without "capital"); the tests then require Paris only when the user's caption
    shows that "France" was heard. (A caption's text is its role label, the words, and the reply's
    latency line, "346 ms", when it is done.)"""
    lines = [line.strip() for line in text.lower().splitlines()]
    return any("paris" in line or line.endswith((".", "!", "?")) for line in lines)


def test_spoken_question_gets_spoken_answer_and_captions(ui_server, pw, question_mic, artifacts):
    browser = launch(pw, audio=question_mic)
    try:
        tab = OmniPage(browser, ui_server.base_url).open()
        tab.start(camera=False)
        tab.wait_session()
        user = tab.wait_caption("user", lambda c: "capital" in c.lower(), ANSWER_TIMEOUT_S)
        # the answer to what was heard: Paris when Whisper heard "France" (over WebRTC's Opus it has
        # heard "friends" on a loaded machine; the page then still answers the question it heard)
        answer = tab.wait_caption("assistant", _answered, ANSWER_TIMEOUT_S)
        wait_until(lambda: max((v for _, v in tab.rms()), default=0) > RMS_THRESHOLD, 20, what="audible remote audio")
        peak = max(v for _, v in tab.rms())
        wait_until(lambda: tab.text("[data-testid='metric-first-audio']") not in ("", "–"), 10, what="latency metric")
        tab.screenshot(artifacts / "b_spoken_answer.png")
        assert "capital" in user.lower()
        assert _has_paris(answer) or "france" not in user.lower(), (user, answer)
        assert peak > RMS_THRESHOLD
        assert "ms" in tab.text("[data-testid='metric-first-audio']")
        assert "/" in tab.text("[data-testid='metric-context']")
        tab.stop()
    finally:
        browser.close()


def test_camera_text_is_read_and_used(ui_server, pw, sign_mic, sign_camera, artifacts):
    browser = launch(pw, audio=sign_mic, video=sign_camera)
    try:
        tab = OmniPage(browser, ui_server.base_url).open()
        tab.start(camera=True)
        tab.wait_session()
        seen = wait_until(lambda: (t := tab.text("[data-testid='metric-seen-text']")) and "HOURS" in t.upper() and t,
                          ANSWER_TIMEOUT_S, what="the camera text in the metrics panel")
        answer = tab.wait_caption("assistant", lambda c: any(w in c.upper() for w in ("OPEN", "24", "HOURS")),
                                  ANSWER_TIMEOUT_S)
        tab.screenshot(artifacts / "d_camera_sign.png")
        assert "OPEN" in seen.upper()
        assert any(w in answer.upper() for w in ("OPEN", "24", "HOURS"))
        tab.stop()
    finally:
        browser.close()


def test_two_browsers_at_once(ui_server, pw, question_mic, artifacts):
    browsers = [launch(pw, audio=question_mic) for _ in range(2)]
    try:
        tabs = [OmniPage(b, ui_server.base_url).open() for b in browsers]
        # press Start in both tabs back to back: the two conversations overlap in time
        for tab in tabs:
            tab.start(camera=False)
        ids = [tab.wait_session()["session_id"] for tab in tabs]
        assert ids[0] != ids[1]
        answers = [tab.wait_caption("assistant", _answered, ANSWER_TIMEOUT_S * 1.5) for tab in tabs]
        for i, tab in enumerate(tabs):
            wait_until(lambda t=tab: max((v for _, v in t.rms()), default=0) > RMS_THRESHOLD, 20,
                       what=f"audio in tab {i}")
            tab.screenshot(artifacts / f"e_two_browsers_{i}.png")
        for tab, answer in zip(tabs, answers, strict=True):  # each tab answers its own user's question
            asked = " ".join(tab.captions("user")).lower()
            assert asked and all(w in asked for w in ("capital", "of")), asked
            assert _has_paris(answer) or "france" not in asked, (asked, answer)
        for tab in tabs:
            tab.stop()
    finally:
        for b in browsers:
            b.close()

