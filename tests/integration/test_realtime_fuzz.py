"""Protocol fuzzing (issue 11 part 5) on a real loopback server: >= 1,000 hypothesis-made client events.

The rules checked per batch are in :func:`tests.fuzz_protocol.check_batch`; here: no slot leaks,
a healthy server afterwards, and an honest session asking a question while the fuzzer runs gets
the same answer (transcript and audio length) as it did alone. ``benchmarks/bench_fuzz.py`` is the
10,000-event run.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
from websockets.sync.client import connect

from tests import fuzz_protocol as F
from tests.integration.rt_helpers import silence, wav_pcm16


@pytest.fixture(scope="module")
def fuzz_server(make_server):
    # dropped sockets give their slot back after 1 s, so fast reconnects are refused only briefly
    return make_server(duplex_session={"disconnect_grace_s": 1, "reaper_interval_s": 0.2})


def test_session_errors_answer_the_event_that_caused_them(fuzz_server):
    # found by the fuzzer: errors raised below the session's command router (session.update after
    # audio started -> instructions_update_unsupported) went out with event_id null
    with connect(f"{fuzz_server.ws_url}/v1/realtime?duplex=1") as ws:
        while json.loads(ws.recv(timeout=10))["type"] != "session.updated":
            pass
        import base64

        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(silence(0.1)).decode()}))
        ws.send(json.dumps({"type": "session.update", "event_id": "upd-1", "session": {"instructions": "Be brief."}}))
        while (ev := json.loads(ws.recv(timeout=10)))["type"] != "error":
            pass
    assert ev["error"]["code"] == "instructions_update_unsupported"
    assert ev["error"]["event_id"] == "upd-1"


def test_fuzzed_events_never_break_the_server_or_an_honest_session(fuzz_server, question_wav):
    pcm = wav_pcm16(question_wav)
    alone = asyncio.run(F.honest_question(fuzz_server.ws_url, pcm))
    assert alone.status == "completed" and alone.audio_ms > 500 and not alone.errors

    honest: dict[str, F.HonestRun] = {}
    admitted, fuzz_done = threading.Event(), threading.Event()

    def ask_while_fuzzing() -> None:  # holds its slot first, asks once the fuzzer is under way
        honest["run"] = asyncio.run(F.honest_question(fuzz_server.ws_url, pcm, admitted=admitted, delay_s=1.0))
        fuzz_done.wait(120)

    t = threading.Thread(target=ask_while_fuzzing)
    t.start()
    assert admitted.wait(30)
    try:
        stats = F.fuzz(fuzz_server.ws_url, examples=30, min_frames=30, max_frames=50, seed=11, shrink=False,
                       speech_pcm16=pcm, live_every=3)  # (6 once drew no live batch in 30)
    finally:
        fuzz_done.set()
        t.join(180)
    assert stats.frames >= 1000, stats.frames
    assert stats.violations == []
    assert {"valid", "bad", "mutated", "raw", "huge", "live"} <= set(stats.by_kind)
    assert stats.live_responses >= 2  # acks, cancels and interrupts also met a response that existed
    run = honest["run"]
    assert run.errors == []
    assert (run.transcript, round(run.audio_ms)) == (alone.transcript, round(alone.audio_ms))
    # every slot comes back (dropped sockets after disconnect_grace_s), and the server is healthy
    deadline = time.monotonic() + 10
    while fuzz_server.engine.sessions.active and time.monotonic() < deadline:
        time.sleep(0.1)
    assert fuzz_server.engine.sessions.active == 0
    assert httpx.get(fuzz_server.base_url + "/health").json()["status"] == "ok"
