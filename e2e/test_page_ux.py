"""(i) The page as a newcomer meets it (issue 12): one Start at desktop and phone sizes, the live
state through a scripted conversation with a barge-in and the interrupt control, the transcript
after it, each error message, no request outside the server's origin, and axe-core's
accessibility check (vendored ``e2e/vendor/axe.min.js``, axe-core 4.10.3, MPL-2.0).

Screenshots of every state go to ``artifacts/e2e/ux_*.png``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.driver import (
    TIMEOUT_SCALE,
    OmniPage,
    active_sessions,
    first_rise,
    launch,
    wait_until,
)

pytestmark = pytest.mark.e2e

AXE_JS = (Path(__file__).parent / "vendor" / "axe.min.js").read_text()

AXE_DISABLED: dict[str, str] = {}
"""axe-core rules not run, with the reason (none: every rule runs over the whole page)."""

SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}

STATES = ("connecting", "listening", "thinking", "speaking", "interrupted")

STATUS_OF_STATE = {
    "idle": r"Press Start to talk\.|Stopped\. Press Start to talk again\.",
    "connecting": r"Connecting…",
    "listening": r"(Connected\. )?Listening…|Hearing you…",
    "thinking": r"Thinking…",
    "speaking": r"Speaking… \(talk to interrupt\)",
    "interrupted": r"Interrupted\. Listening…|Hearing you…",
    "ended": r"Conversation ended.*",
    "error": r".+",
}
"""The status line's texts that go with each state of the pill (``app/ui/view.py`` PHASE_STATUS and
the changes that name their own; the page's own for idle and connecting, ``assets/page.js``)."""

PAIRS_JS = """(() => {
  window.__pairs = [];
  let last = null;
  const sample = () => {
    const pill = document.getElementById("omni-state"), line = document.getElementById("status");
    if (!pill || !line) return;
    const key = pill.dataset.state + "|" + line.textContent;
    if (key === last) return;
    last = key;
    window.__pairs.push({t: performance.now(), state: pill.dataset.state, status: line.textContent.trim(),
                         level: line.dataset.level, shown: getComputedStyle(line).display !== "none"});
  };
  new MutationObserver(sample).observe(document, {subtree: true, childList: true, characterData: true,
                                                  attributes: true, attributeFilter: ["data-state", "data-level"]});
})();"""
"""Init script: ``window.__pairs``, the state pill and the status line as the page shows them (and
whether the line is shown at all), sampled at every change of either (a MutationObserver: after each task that changed the page)."""


def _disagreements(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Samples where the status line does not go with the pill: at each pill change, and whenever
    the line shows a state's words (a notice, such as a server error, may stand under any state)."""
    bad, prev = [], None
    for p in pairs:
        ok = re.fullmatch(STATUS_OF_STATE.get(p["state"], ".+"), p["status"])
        state_words = any(re.fullmatch(rx, p["status"]) for st, rx in STATUS_OF_STATE.items() if st != "error")
        if not ok and (p["state"] != prev or state_words):
            bad.append(p)
        prev = p["state"]
    return bad


@pytest.fixture
def idle_server(ui_server):
    """The shared server once earlier tests' conversations are closed."""
    wait_until(lambda: active_sessions(ui_server.base_url) == 0, 20, what="no conversation left by other tests")
    return ui_server


def _in_viewport(tab: OmniPage, selector: str) -> bool:
    box = tab.page.locator(selector).bounding_box()
    vp = tab.page.viewport_size
    return bool(box and box["y"] >= 0 and box["x"] >= 0 and box["y"] + box["height"] <= vp["height"]
                and box["x"] + box["width"] <= vp["width"])


def _wait_state(tab: OmniPage, state: str, timeout_s: float) -> None:
    wait_until(lambda: state in tab.phases(), timeout_s, every_s=0.05,
               what=f"state {state!r} (seen: {tab.phases()}; alert: {tab.text('#omni-alert')!r})")


def _axe(tab: OmniPage) -> list[dict[str, Any]]:
    """axe-core over the whole page: the critical and serious violations."""
    tab.page.evaluate(AXE_JS)
    rules = {rule: {"enabled": False} for rule in AXE_DISABLED}
    result = tab.page.evaluate("(rules) => axe.run(document, {rules, resultTypes: ['violations']})", rules)
    return [{"id": v["id"], "impact": v["impact"], "help": v["help"],
             "nodes": [(n["target"], n["failureSummary"][:300], n["html"][:200]) for n in v["nodes"]][:5]}
            for v in result["violations"] if v["impact"] in ("critical", "serious")]


@pytest.mark.parametrize("size", list(SIZES))
def test_start_is_obvious_and_keyboard_operable(idle_server, pw, size, artifacts):
    """One Start, visible without scrolling; Enter starts (asking for the mic, and the camera when
    its switch is on), the state says so, and the same control stops."""
    camera = size == "desktop"
    browser = launch(pw)
    try:
        tab = OmniPage(browser, idle_server.base_url, context_kwargs={"viewport": SIZES[size]}).open()
        tab.page.set_viewport_size(SIZES[size])
        assert _in_viewport(tab, "[data-testid='start']"), "Start needs scrolling"
        assert _in_viewport(tab, "[data-testid='camera-toggle']") and _in_viewport(tab, "[data-testid='state']")
        assert tab.call_state() == "idle" and tab.text("[data-testid='start']").strip().endswith("Start")
        assert tab.page.evaluate("() => window.__omni.gumAsked") is None  # nothing asked before Start
        tab.screenshot_viewport(artifacts / f"ux_{size}_idle.png")
        tab.set_camera(camera)
        tab.page.focus("[data-testid='start']")
        tab.page.keyboard.press("Enter")
        _wait_state(tab, "connecting", 5)
        _wait_state(tab, "listening", 30)
        asked = tab.page.evaluate("() => window.__omni.gumAsked")
        assert asked and asked[-1] == {"audio": True, "video": camera}, asked
        assert tab.wait_session()["session_id"]
        assert "Stop" in tab.text("[data-testid='start']")
        assert tab.page.is_visible("[data-testid='mute']")
        tab.screenshot_viewport(artifacts / f"ux_{size}_listening.png")
        if size == "desktop":  # mute and volume (Chromium's fake mic beeps: the meter moves)
            meter = "() => Number(document.getElementById('omni-mic-meter').getAttribute('aria-valuenow'))"
            wait_until(lambda: tab.page.evaluate(meter) > 0, 10, every_s=0.05, what="the mic meter to move")
            tab.page.click("[data-testid='mute']")
            assert tab.page.get_attribute("[data-testid='mute']", "aria-pressed") == "true"
            tab.page.wait_for_timeout(300)
            quiet = []
            for _ in range(15):  # 1.5 s: the fake mic beeps once a second
                tab.page.wait_for_timeout(100)
                quiet.append(tab.page.evaluate(meter))
            assert max(quiet) == 0, quiet
            assert tab.state()["session_id"]  # muting did not stop the call
            tab.page.click("[data-testid='mute']")
            tab.open_settings()
            tab.page.locator("[data-testid='volume']").fill("0.3")
            vols = tab.page.evaluate("() => [...document.querySelectorAll('#webrtc-av video, #webrtc-av audio')]"
                                     ".map((e) => e.volume)")
            assert vols and all(abs(v - 0.3) < 1e-6 for v in vols), vols
        tab.page.focus("[data-testid='start']")
        tab.page.keyboard.press("Space")
        wait_until(lambda: tab.call_state() == "idle", 10, what="Stop")
        wait_until(lambda: active_sessions(idle_server.base_url) == 0, 10, what="the slot to be freed")
        assert tab.external == [] and not tab.console_errors, (tab.external, tab.console_errors)
    finally:
        browser.close()


def test_every_state_and_the_transcript_after_a_barge_in(idle_server, pw, clips, artifacts):
    """A scripted conversation: listening -> thinking -> speaking -> (the user talks over it)
    interrupted -> thinking -> speaking, then the interrupt control; the transcript shows both
    questions, the cut reply marked interrupted with what was heard, and each reply's latency.
    At every change of the state pill or the status line the two agree (pill "Speaking" =>
    status "Speaking…", never "Thinking…" still)."""
    browser = launch(pw)
    try:
        tab = OmniPage(browser, idle_server.base_url, scripted_mic=True)
        tab.page.add_init_script(PAIRS_JS)
        tab.open()
        tab.page.evaluate("""() => { window.__maxMeter = {mic: 0, out: 0}; setInterval(() => {
            const v = (id) => Number(document.getElementById(id).getAttribute('aria-valuenow'));
            window.__maxMeter.mic = Math.max(window.__maxMeter.mic, v('omni-mic-meter'));
            window.__maxMeter.out = Math.max(window.__maxMeter.out, v('omni-out-meter')); }, 50); }""")
        tab.start(camera=False)
        _wait_state(tab, "connecting", 5)
        tab.screenshot_viewport(artifacts / "ux_state_connecting.png")
        _wait_state(tab, "listening", 30)
        tab.screenshot_viewport(artifacts / "ux_state_listening.png")
        tab.sleep_until(tab.now_ms() + 1000)
        start, _ = tab.say(clips["long"])
        _wait_state(tab, "thinking", 30)
        tab.screenshot_viewport(artifacts / "ux_state_thinking.png")
        _wait_state(tab, "speaking", 60)
        assert tab.page.is_visible("[data-testid='interrupt']"), "no interrupt control while speaking"
        tab.screenshot_viewport(artifacts / "ux_state_speaking.png")
        rise = wait_until(lambda: first_rise(tab.rms(), start), 30, what="the answer's audio")
        tab.sleep_until(rise + 800)
        tab.say(clips["interrupt"])
        _wait_state(tab, "interrupted", 10)
        tab.screenshot_viewport(artifacts / "ux_state_interrupted.png")
        answer = tab.wait_caption("assistant", lambda c: "4" in c or "four" in c.lower(), 60)

        def answered_aloud() -> list[str] | None:
            seq = tab.phases()
            return seq if "speaking" in seq[seq.index("interrupted"):] else None
        try:
            seq = wait_until(answered_aloud, 90, what="speaking after the interruption")
        except TimeoutError:
            print(json.dumps(tab.page.evaluate("() => window.__omni.phases"), indent=0), tab.captions())
            raise
        i = seq.index("interrupted")
        assert [s for s in STATES if s not in seq] == [], seq
        # the order of the first turn, as the session's events came
        first = [s for s in seq[:i + 1] if s in STATES]
        assert first[:2] == ["connecting", "listening"] and first.index("thinking") < first.index("speaking"), seq
        # the interrupt control stops the second answer if it is still speaking
        if tab.call_state() == "speaking":
            tab.page.click("[data-testid='interrupt']")
            wait_until(lambda: tab.call_state() in ("interrupted", "listening"), 5, what="the interrupt control")
        wait_until(lambda: tab.call_state() == "listening", 60, what="listening after the answer")
        tab.screenshot(artifacts / "ux_transcript_after_barge_in.png")
        # the transcript: both questions (user), the cut reply marked with what was heard, latencies
        users = tab.captions("user")
        assert len(users) >= 2, users
        cut = tab.page.query_selector_all("[data-testid='caption-assistant']:has([data-testid='turn-interrupted'])")
        assert cut, tab.captions()
        cut_text = cut[0].query_selector(".cap-text").inner_text()
        assert cut_text.endswith("…"), cut_text  # truncated to what was heard
        lat = tab.page.query_selector_all("[data-testid='turn-latency']")
        assert len(lat) >= 2 and all(x.inner_text().endswith(" ms") for x in lat)
        assert answer
        meters = tab.page.evaluate("() => window.__maxMeter")
        assert meters["mic"] > 20 and meters["out"] > 20, meters
        tab.stop()
        wait_until(lambda: tab.call_state() == "idle", 10, what="Stop")
        # the pill and the status line, at every change of either, across the whole conversation
        pairs = tab.page.evaluate("() => window.__pairs")
        seen = [(p["state"], p["status"]) for p in pairs]
        assert not _disagreements(pairs), (_disagreements(pairs), seen)
        assert {"idle", *STATES} <= {p["state"] for p in pairs}, seen
        assert ("speaking", "Speaking… (talk to interrupt)") in seen and seen[-1][0] == "idle", seen
        # the line is hidden while it says only what the pill says, shown when it says more
        shown = {(p["state"], p["status"]): p["shown"] for p in pairs}
        assert shown[("speaking", "Speaking… (talk to interrupt)")] is False, shown
        assert shown[("listening", "Connected. Listening…")] is True, shown
        assert tab.external == [], tab.external
    finally:
        browser.close()


def test_connection_lost_reconnects_and_says_a_new_conversation_began(idle_server, pw, silent_mic, artifacts):
    """The server drops the peer connection: the page reconnects by itself and says plainly that a
    new conversation began (sessions are not resumed: ``supports_session_resume`` is false)."""
    import asyncio

    from fastrtc import WebRTC

    browser = launch(pw, audio=silent_mic)
    try:
        tab = OmniPage(browser, idle_server.base_url).open()
        tab.start(camera=False)
        first = tab.wait_session()["session_id"]
        _wait_state(tab, "listening", 10)
        wid = tab.webrtc_id()
        blocks = idle_server.app.state.ui["blocks"]
        pc = next(b.pcs[wid] for b in blocks.blocks.values() if isinstance(b, WebRTC) and wid in b.pcs)
        handler = idle_server.app.state.ui["registry"].get(wid)
        asyncio.run_coroutine_threadsafe(pc.close(), handler._pump_task.get_loop()).result(10)
        try:
            msg = wait_until(lambda: (t := tab.text("#omni-alert")) and "new conversation" in t and t, 40,
                             what="the reconnect message")
        except TimeoutError:
            print(json.dumps(tab.page.evaluate("""() => [window.__omni.phases.map(p => p.phase), window.__omni.alerts,
                window.__omni.ignoredClicks, [...document.querySelectorAll('#webrtc-audio button')].map(
                b => (b.getAttribute('aria-label') || '') + ':' + b.innerHTML.slice(0, 120))]""")))
            raise
        second = tab.wait_session()["session_id"]
        assert second != first and tab.webrtc_id() != wid
        assert tab.page.evaluate("() => window.__omni.reconnects") >= 1
        assert "Reconnected" in msg
        _wait_state(tab, "listening", 10)
        tab.screenshot_viewport(artifacts / "ux_error_reconnected.png")
        tab.stop()
    finally:
        browser.close()


def test_key_required_shows_a_key_field_and_sends_the_key(idle_server, pw, silent_mic, artifacts):
    """A 401 from the server's offer route (a server with an access key; the route's answer is
    given here by the test) -> a plain sentence and a key field; the key goes out as a bearer."""
    browser = launch(pw, audio=silent_mic)
    seen: list[str | None] = []
    try:
        tab = OmniPage(browser, idle_server.base_url)

        def gate(route: Any) -> None:
            body = route.request.post_data or ""
            if '"sdp"' not in body:
                route.fallback()
                return
            auth = route.request.headers.get("authorization")
            seen.append(auth)
            if auth != "Bearer sekrit":
                route.fulfill(status=401, content_type="application/json",
                              body=json.dumps({"error": {"message": "key", "code": "invalid_api_key"}}))
            else:
                route.fallback()

        tab.page.route("**/*", gate)
        tab.open()
        tab.start(camera=False)
        wait_until(lambda: tab.page.is_visible("[data-testid='key-form']"), 20, what="the key field")
        assert "access key" in tab.text("#omni-alert") and tab.call_state() == "error"
        tab.screenshot_viewport(artifacts / "ux_error_key_required.png")
        tab.page.fill("[data-testid='key-input']", "sekrit")
        tab.page.click("[data-testid='key-save']")
        assert not tab.page.is_visible("[data-testid='key-form']")
        wait_until(lambda: tab.page.is_visible("[data-testid='start'][data-mode='start']"), 15, what="Start again")
        tab.start(camera=False)
        _wait_state(tab, "listening", 30)
        assert seen[0] is None and seen[-1] == "Bearer sekrit", seen
        tab.stop()
    finally:
        browser.close()


def test_mic_denied_is_a_plain_sentence_and_the_state_says_error(idle_server, pw, artifacts):
    browser = launch(pw, fake_ui=False)  # no auto-grant: the permission request is refused headless
    try:
        tab = OmniPage(browser, idle_server.base_url).open()
        tab.start(camera=True)
        msg = wait_until(lambda: tab.text("#omni-alert"), 15, what="the denied message")
        assert "denied" in msg and "press Start again" in msg and "Camera off" in msg
        wait_until(lambda: tab.call_state() == "error", 5, what="the error state")
        assert tab.page.is_visible("[data-testid='start'][data-mode='start']")  # the way out
        tab.screenshot_viewport(artifacts / "ux_error_mic_denied.png")
    finally:
        browser.close()


def test_page_is_offline_fast_and_accessible(idle_server, pw, artifacts):
    """No request leaves the server's origin (load, a call with the camera, Stop), the page is
    interactive within 3 s (the page aims at 2 s; this bound catches a blocking asset or script,
    not a busy machine: 2272 ms came once on 2 slow cores mid-suite; the test prints the figure),
    and axe-core finds no critical or serious violation, idle and live."""
    browser = launch(pw)
    try:
        tab = OmniPage(browser, idle_server.base_url, context_kwargs={"viewport": SIZES["desktop"]})
        tab.open()  # (warms the server's caches)
        tab.page.reload(wait_until="load")
        tab.page.wait_for_function("() => window.__omni && window.__omni.ready", timeout=30_000)
        ready_ms = tab.page.evaluate("() => window.__omni.ready")  # since navigation start
        print(f"page interactive {ready_ms:.0f} ms after navigation start")
        assert ready_ms <= 3000 * TIMEOUT_SCALE, ready_ms
        tab.page.wait_for_load_state("networkidle")
        idle = _axe(tab)
        assert idle == [], json.dumps(idle, indent=1)
        tab.start(camera=True)
        _wait_state(tab, "listening", 30)
        # the preview shows the frame the model was given with the last unit (served by this server)
        wait_until(lambda: tab.page.evaluate(
            "() => { const i = document.querySelector(\"[data-testid='unit-base']\"); return i && i.naturalWidth > 0; }"),
            15, what="the unit preview")
        assert tab.page.is_visible("[data-testid='unit-preview']")
        tab.open_settings()
        live = _axe(tab)
        tab.screenshot(artifacts / "ux_settings_open.png")
        assert live == [], json.dumps(live, indent=1)
        tab.stop()
        assert tab.external == [], tab.external
        assert not [e for e in tab.console_errors if "net::" in e or "Failed to load" in e], tab.console_errors
    finally:
        browser.close()


def test_chinese_browser_gets_chinese_texts_and_settings_are_remembered(idle_server, pw, artifacts):
    browser = launch(pw)
    try:
        tab = OmniPage(browser, idle_server.base_url, context_kwargs={"locale": "zh-CN"}).open()
        assert tab.text("[data-testid='start']").strip().endswith("开始")
        assert tab.page.evaluate("() => document.documentElement.lang") == "zh-CN"
        assert "English" in tab.text("[data-testid='languages']")  # tiny answers in English only
        tab.open_settings()
        tab.page.click("#overlap label:has-text('Stop only when I take the turn')")
        tab.page.fill("#instructions textarea", "Answer in one short sentence.")
        tab.page.locator("#instructions textarea").blur()
        tab.set_camera(False)
        tab.page.wait_for_timeout(500)
        tab.screenshot_viewport(artifacts / "ux_zh_settings.png")
        tab.page.reload(wait_until="networkidle")
        tab.page.wait_for_function("() => window.__omni && window.__omni.ready", timeout=30_000)
        tab.open_settings()
        wait_until(lambda: tab.page.input_value("#instructions textarea") == "Answer in one short sentence.", 10,
                   what="the remembered instructions")
        assert tab.page.is_checked("#overlap input[value='Stop only when I take the turn (not for mm-hm or yeah)']")
        assert not tab.page.is_checked("[data-testid='camera-toggle']")
    finally:
        browser.close()


class _Outbound:
    """Every destination the server process connects or sends to, or looks up, while on
    (a ``sys.addaudithook`` hook: audit events are raised by the socket module itself, so no
    library's own connect path escapes it; hooks cannot be removed, hence the switch)."""

    def __init__(self) -> None:
        self.on = False
        self.seen: list[tuple[str, Any]] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.on and event in ("socket.connect", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo"):
            self.seen.append((event, args[0] if event == "socket.getaddrinfo" else args[1]))


_OUTBOUND = _Outbound()


def test_server_opens_no_outbound_connection_while_serving_the_page(idle_server, pw, silent_mic):
    """While the page loads and a call (camera + mic) runs, the server process connects, sends
    and resolves only to this machine's own addresses (the browser's ICE candidates are local)."""
    import ipaddress
    import sys

    import ifaddr

    local = {ipaddress.ip_address(ip.ip if isinstance(ip.ip, str) else ip.ip[0]) for a in ifaddr.get_adapters()
             for ip in a.ips}

    def is_local(host: Any) -> bool:
        if host in (None, "", "localhost") or (isinstance(host, bytes) and host in (b"localhost",)):
            return True
        try:
            ip = ipaddress.ip_address(host.decode() if isinstance(host, bytes) else str(host).split("%")[0])
        except ValueError:
            return False
        return ip.is_loopback or ip.is_unspecified or ip in local

    if not getattr(sys, "_omni_outbound_hook", False):
        sys.addaudithook(_OUTBOUND)
        sys._omni_outbound_hook = True  # type: ignore[attr-defined]
    browser = launch(pw, audio=silent_mic)
    try:
        _OUTBOUND.seen.clear()
        _OUTBOUND.on = True
        tab = OmniPage(browser, idle_server.base_url).open()
        tab.start(camera=True)
        tab.wait_session()
        _wait_state(tab, "listening", 30)
        tab.page.wait_for_timeout(2000)
        tab.stop()
        wait_until(lambda: active_sessions(idle_server.base_url) == 0, 10, what="the slot to be freed")
    finally:
        _OUTBOUND.on = False
        browser.close()
    dests = {(ev, d[0] if isinstance(d, tuple) else d) for ev, d in _OUTBOUND.seen}
    assert any(ev == "socket.sendto" for ev, _ in dests), "no media was sent: the hook saw nothing"
    outside = sorted({x for x in dests if not is_local(x[1])}, key=str)
    assert outside == [], outside


def _browser_cpu_s() -> float:
    """CPU seconds used so far by this test process's Chromium processes (``/proc``)."""
    import os

    ticks = os.sysconf("SC_CLK_TCK")
    me, total = os.getpid(), 0.0
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if b"chromium" in cmd and _descends_from(int(pid), me):
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(10):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def test_no_idle_cpu_creep_over_ten_start_stop_cycles(idle_server, pw, silent_mic):
    """Chromium's idle CPU after 10 Start/Stop cycles is what it was after the first (FastRTC's
    visualiser and the page's meters stop with the call)."""
    browser = launch(pw, audio=silent_mic)
    try:
        tab = OmniPage(browser, idle_server.base_url).open()

        def cycle() -> None:
            tab.start(camera=False)
            _wait_state(tab, "listening", 30)
            tab.page.evaluate("() => { window.__omni.phases.length = 0; }")
            tab.stop()
            wait_until(lambda: tab.call_state() == "idle" and active_sessions(idle_server.base_url) == 0, 15,
                       what="Stop")

        def idle_cpu(seconds: float = 3.0) -> float:
            tab.page.wait_for_timeout(500)
            c0 = _browser_cpu_s()
            time.sleep(seconds)
            return (_browser_cpu_s() - c0) / seconds

        cycle()
        first = idle_cpu()
        for _ in range(9):
            cycle()
        tenth = idle_cpu()
        print(f"idle Chromium CPU: {first:.3f} of a core after 1 cycle, {tenth:.3f} after 10")
        assert first > 0, "no Chromium CPU was measured: the probe is broken"
        assert tenth <= first + 0.05, (first, tenth)
    finally:
        browser.close()
