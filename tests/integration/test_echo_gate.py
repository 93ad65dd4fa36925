"""The assistant's own voice in the microphone is not the user (issue #10, part 5): a real
loopback server, the real ``tiny`` models, our ``DuplexClient`` with a microphone that hears its
loudspeaker (:class:`tests.integration.echo_helpers.EchoingMic`: the reply's audio comes back
after the client's lead, through a ``sox reverb`` room, at -20 .. -6 dB).

Without the session's echo gate every one of these replies is stopped by its own echo (see
``benchmarks/bench_echo.py``, ``baseline_*``)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from app.client.config import SessionConfig
from app.client.duplex import DuplexClient
from app.client.echo_path import EchoPath
from tests.conftest import espeak_wav
from tests.integration.echo_helpers import EchoingMic
from tests.integration.rt_helpers import assert_invariants, types

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(scope="module")
def server(make_server):
    """A server with the echo gate on (``turn_policy.echo_gate``; off by default)."""
    return make_server(turn_policy={"echo_gate": True})

STORY = "Tell me a story about a cat and a dog."


def _wav(path) -> np.ndarray:
    x, _ = sf.read(str(path), dtype="float32")
    return x


def _first_response(events: list[dict]) -> str | None:
    return next((e["response_id"] for e in events if e["type"] == "response.created"), None)


def _done(events: list[dict], rid: str) -> dict | None:
    return next((e for e in events if e["type"] == "response.done" and e["response_id"] == rid), None)


async def _ask_with_echo(c: DuplexClient, mic: EchoingMic, question: np.ndarray) -> str:
    """Ask, then stream silence (plus echo) until the answer's first audio arrived; its response id."""
    await mic.stream(question)
    ok = await mic.silence_until(lambda ev: "response.output_audio.delta" in types(ev), 45)
    assert ok, f"no spoken answer: {types(c.collector.events)}"
    rid = _first_response(c.collector.events)
    assert rid
    return rid


@pytest.mark.parametrize(("lead_ms", "level_db", "room", "policy"), [
    (0, -6, "wet", "barge_in_on_speech"),
    (1500, -6, "room", "barge_in_on_speech"),
    (700, -20, "dry", "listen_only"),
])
async def test_own_voice_coming_back_keeps_the_reply_going(server, speech_dir, lead_ms, level_db, room, policy):
    story = _wav(espeak_wav(STORY, speech_dir / "story.wav", lead_s=0.3, tail_s=0.0))
    path = EchoPath(gain_db=level_db, lead_ms=lead_ms, room=room)
    async with DuplexClient(server.ws_url, config=SessionConfig(overlap_policy=policy)) as c:
        mic = EchoingMic(c, path)
        rid = await _ask_with_echo(c, mic, story)
        created_at = types(c.collector.events).index("response.created")
        assert await mic.silence_until(lambda ev: _done(ev, rid) is not None, 60), "the reply never ended"
        await mic.silence(3.0)  # the echo of the last words (lead + room) still comes back
        await c.close()
    ev = c.collector.events
    name = f"echo_{room}_{-level_db}db_{lead_ms}ms"
    assert_invariants(ev, name)
    done = _done(ev, rid)
    assert path.started_at, "the simulated loudspeaker never played"
    assert done["response"]["status"] == "completed", done
    assert not done["response"].get("status_details"), done  # not ended for a user overlap
    after = ev[created_at:]
    assert "output_audio_buffer.cleared" not in types(after)
    assert "input_audio_buffer.speech_started" not in types(after), "the echo was taken for speech"
    assert [e["response_id"] for e in ev if e["type"] == "response.created"] == [rid], "the echo was answered"


@pytest.mark.parametrize(("policy", "status", "reason"), [
    ("listen_only", "completed", "user_overlap"),
    ("barge_in_on_speech", "cancelled", "barge_in"),
])
async def test_a_real_barge_in_over_the_echo_still_stops_the_reply(server, speech_dir, policy, status, reason):
    story = _wav(espeak_wav(STORY, speech_dir / "story.wav", lead_s=0.3, tail_s=0.0))
    question = _wav(espeak_wav("What is the capital of France?", speech_dir / "q2.wav", lead_s=0.0, tail_s=0.0))
    path = EchoPath(gain_db=-6, lead_ms=500, room="wet")
    async with DuplexClient(server.ws_url, config=SessionConfig(overlap_policy=policy)) as c:
        mic = EchoingMic(c, path)
        rid = await _ask_with_echo(c, mic, story)
        # the reply is playing (and coming back) when the user cuts in, with more than a unit of it
        # left when the question's first 300 ms are heard (a reply played out by then just completes)
        await mic.silence(0.5)
        assert _done(c.collector.events, rid) is None, "the reply ended before the barge-in"
        await mic.stream(question)
        assert await mic.silence_until(lambda ev: _done(ev, rid) is not None, 10)
        second = lambda ev: [e for e in ev if e["type"] == "response.done" and e["response_id"] != rid]
        assert await mic.silence_until(second, 30), f"the question was not answered: {types(c.collector.events)}"
        await c.close()
    ev = c.collector.events
    assert_invariants(ev, f"echo_barge_in_{policy}")
    done = _done(ev, rid)
    assert done["response"]["status"] == status, done
    assert done["response"]["status_details"]["reason"] == reason, done
    answer = second(ev)[0]["response_id"]
    text = "".join(e["delta"] for e in ev if e["type"] == "response.output_audio_transcript.delta"
                   and e["response_id"] == answer)
    heard = [e.get("transcript", "") for e in ev if e["type"] == "conversation.item.input_audio_transcription.completed"]
    # the question was heard and answered: Paris whenever Whisper heard "France" (over the wet
    # echo it has heard "What is the capital on flat?", answered "Rome")
    assert "capital" in " ".join(heard).lower() and text.strip(), (text, heard)
    assert "paris" in text.lower() or "france" not in " ".join(heard).lower(), (text, heard)
