"""Fast checks of the page's handler logic without a browser or models (a fake session).

Playback pacing and captions, per-unit frames, settings parsing, and the event -> playback /
captions / flush mapping of :class:`app.ui.handler.OmniHandler`.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from app.backend.duplex.manager import CapacityExhausted
from app.backend.protocol import commands as C
from app.backend.protocol import events as E
from app.config import load_deploy_config
from app.ui.frames import UnitFrames
from app.ui.handler import HandlerRegistry, OmniHandler
from app.ui.playback import Playback
from app.ui.settings import UISettings, parse_args
from app.ui.view import (
    HEARING,
    PHASE_STATUS,
    THINKING_GIVE_UP_S,
    ConversationView,
    render_captions,
    render_metrics,
)

RATE = 24_000


# ----------------------------------------------------------------------------- playback
def test_playback_releases_in_real_time_with_captions():
    pb = Playback(RATE, lead_s=0.2, slice_s=0.05)
    pb.push("r1", np.ones(RATE, np.float32))  # 1 s
    assert pb.attach_text("r1", "Hello there.") is None  # held until its audio starts
    first = pb.pop_due(100.0)
    assert first is not None and first.audio.size == int(0.05 * RATE)
    assert first.captions == [("r1", "Hello there.")] and first.first_of == ["r1"]
    released = first.audio.size
    while (rel := pb.pop_due(100.0)) is not None:  # the lead allows ~0.2 s ahead, not more
        released += rel.audio.size
    assert 0.2 * RATE <= released <= 0.3 * RATE
    assert pb.has_audio("r1") and pb.is_playing(100.0)
    assert pb.clear() == ["r1"] and not pb.has_audio()
    assert pb.attach_text("r1", "late") == "late"  # nothing queued: show at once


def test_playback_clear_counts_the_reply_still_playing_from_the_lead():
    pb = Playback(RATE, lead_s=0.5, slice_s=0.1)
    pb.push("r1", np.ones(RATE // 5, np.float32))  # 0.2 s: all of it fits in the lead
    while pb.pop_due(10.0) is not None:
        pass
    assert not pb.has_audio() and pb.is_playing(10.1)
    assert pb.clear("r2", now=10.1) == []  # another response: not this one
    pb.push("r1", np.ones(RATE // 5, np.float32))
    while pb.pop_due(20.0) is not None:
        pass
    assert pb.clear(now=20.1) == ["r1"]  # nothing waits here, but it is still being heard
    pb.push("r1", np.ones(RATE // 5, np.float32))
    while pb.pop_due(30.0) is not None:
        pass
    assert pb.clear(now=31.0) == []  # played out


def test_playback_text_after_release_is_shown_at_once():
    pb = Playback(RATE, lead_s=10, slice_s=1.0)
    pb.push("r1", np.ones(RATE // 2, np.float32))
    assert pb.pop_due(0.0) is not None
    assert pb.attach_text("r1", "x") == "x"


# ----------------------------------------------------------------------------- frames
def test_unit_frames_base_and_composite():
    uf = UnitFrames(1000)
    assert uf.take_unit() == ()
    img = np.full((480, 640, 3), 200, np.uint8)
    uf.add(img, 0.0)
    (base,) = uf.take_unit()
    assert max(base.shape[:2]) <= 448
    uf.set_stack(3)
    for i in range(6):
        uf.add(img, i * 0.2)
    base, comp = uf.take_unit()
    assert comp.shape == base.shape and comp.dtype == np.uint8


# ----------------------------------------------------------------------------- settings / view
def test_parse_args_reads_page_inputs():
    d = UISettings()
    args = ["__webrtc_value__", "abc", "Be brief.", False, 0.5, 32, 3, "Stop only when I take the turn (not for mm-hm or yeah)", None]
    s = parse_args(args, d)
    assert (s.instructions, s.speech, s.temperature, s.max_tokens, s.stack_frames, s.overlap_policy) == (
        "Be brief.", False, 0.5, 32, 3, "listen_only")
    assert s.session_update(voice_cloning=False, first=True)["modalities"] == ["text"]
    assert "instructions" not in s.session_update(voice_cloning=False, first=False)
    assert parse_args(["__webrtc_value__"], d) == d


def test_view_renders_escaped_captions_and_metrics():
    v = ConversationView()
    v.caption("user", "u1", "<b>hi</b>", append=False)
    v.caption("assistant", "r1", "Paris", append=True)
    v.mark_interrupted("r1")
    html = render_captions(v.snapshot())
    assert "&lt;b&gt;hi&lt;/b&gt;" in html and "interrupted" in html and 'data-testid="caption-assistant"' in html
    v.first_audio_ms = 1234.4
    assert ">1234 ms<" in render_metrics(v.snapshot())



def test_a_replys_bubble_shows_the_wait_heard_from_the_end_of_the_speech():
    """The bubble's latency is the metrics panel's "Reply latency" (from the end of the speech), not the
    part after the turn was decided (a tester read 219 ms there for a 752 ms wait)."""
    v = ConversationView()
    v.note_first_audio("r1", 219.0, 752.0)
    v.caption("assistant", "r1", "Paris.", append=True)
    assert ">752 ms<" in render_captions(v.snapshot())
    m = render_metrics(v.snapshot())
    assert ">752 ms<" in m and ">219 ms<" in m
    v.note_first_audio("r2", 300.0, None)  # no speech end known (a commit): from the decision
    v.caption("assistant", "r2", "Rome.", append=True)
    assert ">300 ms<" in render_captions(v.snapshot())
    m = render_metrics(v.snapshot())
    assert ">300 ms<" in m and ">752 ms<" not in m  # the panel says this turn's figures, not the last turn's


# ----------------------------------------------------------------------------- handler
class FakeSession:
    def __init__(self) -> None:
        self.id = "duplex-test"
        self.closed = False
        self.cmds: list[Any] = []
        self.events: asyncio.Queue[Any] = asyncio.Queue()

    def submit(self, cmd: Any) -> None:
        self.cmds.append(cmd)
        if isinstance(cmd, C.CloseSession):
            self.closed = True

    async def next_event(self) -> Any:
        return await self.events.get()


@pytest.fixture()
def engine():
    cfg = load_deploy_config()
    session = FakeSession()
    sessions = SimpleNamespace(open=lambda owner=None, route="realtime": session, session=session)
    return SimpleNamespace(config=cfg, sessions=sessions,
                           capabilities=lambda: {"supports_voice_cloning": False, "supports_vision": True})


def _handler(engine) -> OmniHandler:
    h = OmniHandler(engine, HandlerRegistry(), defaults=UISettings(), page_outputs=True, args_timeout_s=0).copy()
    h.cleared = 0

    def clear():
        h.cleared += 1

    h._clear_queue = clear
    return h


async def test_handler_appends_16k_audio_and_unit_frames(engine):
    h = _handler(engine)
    await h.start_up()
    s = engine.sessions.session
    assert isinstance(s.cmds[0], C.SessionUpdate) and s.cmds[0].session["modalities"] == ["audio", "text"]
    await h.video_receive(np.zeros((480, 640, 3), np.uint8))
    for _ in range(60):  # 1.2 s of 48 kHz mic frames, 20 ms each
        await h.receive((48_000, np.zeros((1, 960), np.int16)))
    appends = [c for c in s.cmds if isinstance(c, C.AppendArrays)]
    total = sum(a.audio.size for a in appends)
    assert 16_000 <= total <= 1.2 * 16_000 and all(a.audio.dtype == np.float32 for a in appends)
    with_frames = [a for a in appends if a.frames]
    assert len(with_frames) == 1 and with_frames[0].frames[0].shape[2] == 3  # the append closing unit 0
    await h.shutdown()
    assert isinstance(s.cmds[-1], C.CloseSession)


async def test_handler_maps_events_to_playback_captions_and_flushes(engine):
    h = _handler(engine)
    await h.start_up()
    s = engine.sessions.session
    sent: list[str] = []
    h.set_channel(SimpleNamespace(readyState="open", send=sent.append))  # FastRTC's data channel to the page
    h.on_event(E.SpeechStopped(audio_end_ms=500))
    h.on_event(E.AudioDelta(response_id="r1", audio=np.full(RATE, 0.1, np.float32), sample_rate_hz=RATE))
    h.on_event(E.TranscriptDelta(response_id="r1", delta="The capital is Paris."))
    assert h.view.first_audio_ms is not None
    out = await h.emit()
    audio = out[0] if isinstance(out[0], tuple) else out
    assert audio[0] == RATE and audio[1].size > 0
    assert any("Paris" in c.text for c in h.view.lines)
    # a completed response keeps playing through a plain listen decision
    h.on_event(E.ResponseDone(response_id="r1", status="completed"))
    h.on_event(E.ResponseListen(response_id=None))
    assert h.playback.has_audio("r1")
    # the user starts talking over it -> silence at once, heard part acknowledged
    h.on_event(E.SpeechStarted(audio_start_ms=900))
    assert not h.playback.has_audio() and h.cleared >= 1
    assert any(isinstance(c, C.PlaybackAck) and c.truncate for c in s.cmds)
    assert h.view.lines[-1].interrupted
    await asyncio.sleep(0)  # (phases go out once the event loop is free)
    msgs = [json.loads(m) for m in sent]
    flushes = [m for m in msgs if m["type"] == "flush"]
    assert flushes == [{"type": "flush", "response_ids": ["r1"]}]  # the page's barge-in
    # the page's state followed the events, each phase sent once, at the event
    assert [m["phase"] for m in msgs if m["type"] == "omni_phase"] == ["listening", "thinking", "speaking",
                                                                             "interrupted"]
    assert msgs.index(flushes[0]) < [m.get("phase") for m in msgs].index("interrupted")
    h.on_event(E.OutputAudioCleared(response_id="r1"))  # nothing left to cut: the page is not told again
    await asyncio.sleep(0)
    assert len(sent) == len(msgs)
    # soft interrupt of a new response
    h.on_event(E.AudioDelta(response_id="r2", audio=np.full(RATE, 0.1, np.float32), sample_rate_hz=RATE))
    h.on_event(E.ResponseListen(response_id="r2", reason="user_overlap"))
    assert not h.playback.has_audio()
    # hard clear
    h.on_event(E.AudioDelta(response_id="r3", audio=np.full(RATE, 0.1, np.float32), sample_rate_hz=RATE))
    h.on_event(E.OutputAudioCleared(response_id="r3"))
    assert not h.playback.has_audio()
    h.on_event(E.UnitMetrics(compute_ms=3.0, context_tokens=10, max_context_tokens=100, seen_text="OPEN 24 HOURS"))
    assert h.view.seen_text == "OPEN 24 HOURS" and h.view.context_tokens == 10
    assert h.force_listen() and isinstance(s.cmds[-1], C.CancelResponse) and s.cmds[-1].type == "barge_in"


async def test_handler_sends_each_phase_with_the_status_that_matches_it(engine):
    """The state pill and the status line come from one message: each phase the page is told
    carries its status (a later Gradio snapshot no longer does), and a notice with no phase
    change goes out at once too, so the page's pair can never disagree."""
    h = _handler(engine)
    await h.start_up()
    sent: list[str] = []
    h.set_channel(SimpleNamespace(readyState="open", send=sent.append))
    page: dict[str, Any] = {}  # what the page shows (assets/page.js applies each message)
    told: list[dict[str, Any]] = []
    read = 0

    async def step(ev: Any = None) -> list[dict[str, Any]]:
        nonlocal read
        if ev is not None:
            h.on_event(ev)
        await asyncio.sleep(0)  # (the page is told once the event loop is free)
        new = [m for m in map(json.loads, sent[read:]) if m["type"] != "flush"]  # (the barge-in's, for barge_in.js)
        read = len(sent)
        for m in new:
            assert m["type"] in ("omni_phase", "omni_status"), m
            if m["type"] == "omni_status":  # a notice: the phase stays
                assert m["phase"] == page["phase"], (m, page)
            page.update(phase=m["phase"], status=m["status"], level=m["level"])
        told.extend(new)
        assert (page["phase"], page["status"], page["level"]) == (h.view.phase, h.view.status, h.view.level)
        return new

    async def play_out(phase: str) -> None:
        for _ in range(100):
            await h.emit()
            if h.view.phase == phase:
                return
        raise AssertionError(f"still {h.view.phase!r}")

    def audio(rid: str, s: float) -> E.AudioDelta:
        return E.AudioDelta(response_id=rid, audio=np.full(int(RATE * s), 0.1, np.float32), sample_rate_hz=RATE)

    await step()
    assert page == {"phase": "listening", "status": "Connected. Listening…", "level": "ok"}
    assert [m["type"] for m in await step(E.SpeechStarted(audio_start_ms=100))] == ["omni_status"]
    assert page["status"] == HEARING
    await step(E.SpeechStopped(audio_end_ms=500))
    assert page["phase"] == "thinking"
    await step(E.SpeechStarted(audio_start_ms=700))  # the user goes on: no longer "Thinking…"
    assert (page["phase"], page["status"]) == ("listening", HEARING)
    await step(E.SpeechStopped(audio_end_ms=900))
    await step(audio("r1", 1.0))
    await h.emit()  # its first slice: speaking
    await step()
    assert page["phase"] == "speaking"
    await step(E.ErrorEvent(code="boom", message="Something broke"))  # a notice, at once
    assert (page["phase"], page["status"], page["level"]) == ("speaking", "Server: Something broke (boom)", "warn")
    await step(E.SpeechStarted(audio_start_ms=1500))  # the barge-in: the reply is cut
    assert (page["phase"], page["status"]) == ("interrupted", HEARING)
    await step(E.ResponseListen(response_id=None))
    assert page["phase"] == "listening"
    await step(E.SpeechStopped(audio_end_ms=2000))
    await step(audio("r2", 0.1))
    await play_out("speaking")
    await step()
    await play_out("listening")  # the reply played out: not "Speaking…" any more
    await step()
    assert page == {"phase": "listening", "status": PHASE_STATUS["listening"][0], "level": "ok"}
    h.on_event(E.ResponseDone(response_id="r2", status="failed"))
    await step(E.SessionClosed(reason="input_stall"))
    assert (page["phase"], page["level"]) == ("ended", "warn") and "input_stall" in page["status"]
    # each phase was told once, with the status that matches it
    phases = [m for m in told if m["type"] == "omni_phase"]
    assert [m["phase"] for m in phases] == ["listening", "thinking", "listening", "thinking", "speaking",
                                            "interrupted", "listening", "thinking", "speaking", "listening", "ended"]
    named = {("listening", "Connected. Listening…"), ("listening", HEARING),
             ("ended", "Conversation ended (input_stall). Press Start to talk again.")}  # a change's own text
    for m in phases:
        assert (m["phase"], m["status"]) in named or (m["status"], m["level"]) == PHASE_STATUS[m["phase"]], m
    assert any(m["type"] == "omni_status" and m["status"].startswith("The reply failed") for m in told)
    snap = h.view.snapshot()
    assert (snap["phase"], snap["status"]) == (page["phase"], page["status"])  # (the state route: the same)


def test_view_sets_status_with_each_phase():
    v = ConversationView()
    seen: list[dict[str, Any]] = []
    v.listener = seen.append
    v.set_phase("thinking")
    v.set_phase("thinking")  # no change: nobody is told
    v.set_status("Server: x (y)", "warn")
    v.set_phase("speaking")
    v.hearing()  # a reply being spoken keeps its status
    assert [(m["type"], m["phase"], m["status"]) for m in seen] == [
        ("omni_phase", "thinking", "Thinking…"), ("omni_status", "thinking", "Server: x (y)"),
        ("omni_phase", "speaking", PHASE_STATUS["speaking"][0])]


async def test_handler_refuses_when_full(engine):
    def full(owner=None, route="realtime"):
        raise CapacityExhausted(1)

    engine.sessions.open = full
    h = _handler(engine)
    await h.start_up()
    assert h.session is None and "Server is full" in h.view.status
    first = await h.emit()
    assert first is not None  # the page update with the message
    h._refused_at -= 10
    from fastrtc import CloseStream

    assert isinstance(await h.emit(), CloseStream)


async def test_a_turn_the_server_lets_go_does_not_leave_the_page_thinking(engine, monkeypatch):
    import app.ui.handler as handler_mod

    h = _handler(engine)
    await h.start_up()
    clock = [100.0]
    monkeypatch.setattr(handler_mod.time, "monotonic", lambda: clock[0])

    def unit(i: int) -> None:
        h.on_event(E.ResponseListen(unit_index=i, reason="model_listen"))

    h.on_event(E.SpeechStopped(audio_end_ms=900))  # "yeah", said as the reply ended: not answered
    assert h.view.phase == "thinking"
    clock[0] += THINKING_GIVE_UP_S - 1.0
    unit(1)
    assert h.view.phase == "thinking"  # a reply may still be on its way
    clock[0] += 2.0
    unit(2)
    assert h.view.phase == "listening"

    h.on_event(E.SpeechStopped(audio_end_ms=5000))  # a question the server answers, slowly
    h.on_event(E.ResponseCreated(response_id="r1"))
    clock[0] += THINKING_GIVE_UP_S + 1.0
    unit(3)
    assert h.view.phase == "thinking"  # it answers: the audio will come
