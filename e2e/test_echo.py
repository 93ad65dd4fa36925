"""The page's own voice in its microphone (issue #10, part 5): an init script (``hooks.js``,
``window.__E2E.echo``) mixes the page's remote (assistant) audio into the outgoing mic track at
-15 dB, 60 ms late. The mix is made after capture, so the browser's echo canceller never sees it:
the hard case of a speaker with no echo cancellation.

* The assistant stays audible to the end of its answer: the page does not mute it on its own
  echo (``window.__omni.ducks`` stays empty, ``app/ui/assets/barge_in.js`` compares the mic with
  what it plays), and the server does not stop it (its echo gate, ``app/backend/duplex/echo.py``).
* A real barge-in over the echo still works: silent within :data:`BARGE_IN_LIMIT_MS`, the new
  question answered.
"""

from __future__ import annotations

import pytest

from e2e.driver import (
    OmniPage,
    audible_between,
    first_rise,
    launch,
    silence_from,
    wait_until,
)
from e2e.media import speech_span

pytestmark = pytest.mark.e2e

ECHO = {"gain_db": -15.0, "delay_ms": 60.0}


@pytest.fixture(scope="module")
def ui_server(deploy_config, tiny_family):
    """The app (API + page) on 0.0.0.0 with the echo gate on (``turn_policy.echo_gate``)."""
    from app.config import parse_deploy_config
    from tests.live_server import LiveServer

    data = deploy_config.model_dump(exclude_none=True)
    data["turn_policy"]["echo_gate"] = True
    srv = LiveServer(parse_deploy_config(data), tiny_family, host="0.0.0.0", with_ui=True).start()
    yield srv
    srv.stop()
BARGE_IN_LIMIT_MS = 500.0
"""The assistant must be silent within this long after the user starts talking over it."""

ONSET_AFTER_MS = 450.0
"""The barge-in's speech onset comes this long after the second answer became audible. The second
answer to the same question is the model's and may be short (about 1 s on a fresh CI machine), so
the user cuts in early in it, well inside the answer."""


def _duck_report(tab: OmniPage, rise: float) -> str:
    """What the page heard and played around its first mute (for a failure message)."""
    ducks = tab.ducks()
    t = ducks[0]["t"]
    near = lambda rows: [(round(r[0] - t), round(r[1], 4)) for r in rows if t - 300 <= r[0] <= t + 50]
    coupling = tab.page.evaluate("() => window.__omni.echoCouplingDb")
    return (f"the page muted the assistant on its own echo {t - rise:.0f} ms after the answer became audible: "
            f"{ducks}; coupling {coupling} dB; played {near(tab.rms())}; mic {near(tab.mic_rms())}")


def _ask(tab: OmniPage, clip) -> float:
    """Say ``clip``; returns the page time (ms) its answer became audible."""
    start, _ = tab.say(clip)
    return wait_until(lambda: first_rise(tab.rms(), start), 60, what="the answer's audio")


def test_the_pages_own_echo_neither_mutes_nor_stops_the_answer_and_a_barge_in_still_works(
        ui_server, pw, clips, artifacts):
    browser = launch(pw)
    try:
        tab = OmniPage(browser, ui_server.base_url, scripted_mic=True, echo=ECHO).open()
        tab.start(camera=False)
        tab.wait_session()
        tab.sleep_until(tab.now_ms() + 1500)

        # 1) the whole answer plays with its echo in the mic: no local mute, no server stop
        rise = _ask(tab, clips["long"])
        end = wait_until(lambda: silence_from(tab.rms(), rise + 1000), 60, what="the end of the answer")
        tab.screenshot(artifacts / "echo_answer.png")
        # (a floor only: the spelled answer lasts ~5 s; the checks below
        # are the point: no mute by the page, no cut by the server)
        assert end - rise >= 1000, f"the answer stopped after {end - rise:.0f} ms"
        assert tab.ducks() == [], _duck_report(tab, rise)
        assert not any("interrupted" in c for c in tab.captions("assistant")), tab.captions()
        assert tab.page.evaluate("() => window.__omni.echoCouplingDb") is not None  # the echo was measured
        coupling = tab.page.evaluate("() => window.__omni.echoCouplingDb")
        mic = tab.mic_rms()
        assert audible_between(mic, rise + 200, end - 200, threshold=0.003), "the echo never reached the mic"

        # 2) a real barge-in over the echo still silences the assistant at once and is answered
        tab.sleep_until(tab.now_ms() + 1500)
        rise2 = _ask(tab, clips["long"])
        lead_ms = speech_span(clips["interrupt"])[0] * 1000.0
        tab.sleep_until(rise2 + ONSET_AFTER_MS - lead_ms)
        assert tab.ducks() == [], _duck_report(tab, rise2)
        answers = len(tab.captions("assistant"))  # (the cut answer's bubble is one of them)
        start2, end2 = tab.say(clips["interrupt"])
        onset = start2 + lead_ms
        silent = wait_until(lambda: silence_from(tab.rms(), onset), 10, what="silence after the barge-in")
        rms = tab.rms()
        assert audible_between(rms, onset - 300, onset), \
            f"assistant was not speaking at the barge-in onset ({onset - rise2:.0f} ms into its answer)"
        assert silent - onset <= BARGE_IN_LIMIT_MS, f"still audible {silent - onset:.0f} ms after the barge-in"
        ducks = tab.ducks()
        assert len(ducks) == 1 and onset <= ducks[0]["t"] <= onset + BARGE_IN_LIMIT_MS, \
            f"speech onset {onset - rise2:.0f} ms into the answer; " + _duck_report(tab, rise2)
        # answered: with "4" when the turn's words are the user's alone; the echo just before the onset
        # can lead the transcript ("The sign is wait stop what is 2 plus 2"), and the 270M model may
        # answer that otherwise ("Wait!")
        wait_until(lambda: len(tab.captions("assistant")) > answers, 60, what="an answer to the barge-in")
        heard = tab.page.query_selector_all("#captions-box [data-testid='caption-user'] .cap-text")[-1].inner_text()
        heard = heard.strip().lower()
        if heard.startswith(("wait", "stop")):
            tab.wait_caption("assistant", lambda c: "4" in c or "four" in c.lower(), 60)
        wait_until(lambda: first_rise(tab.rms(), end2), 30, what="the second answer's audio")
        tab.screenshot(artifacts / "echo_barge_in.png")
        print(f"echo: coupling {coupling} dB; answer {end - rise:.0f} ms unmuted; barge-in silent in "
              f"{silent - onset:.0f} ms")
        tab.stop()
    finally:
        browser.close()
