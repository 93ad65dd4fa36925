"""Turn-taking with the learned end-of-turn detector on a real loopback server, real models, real
client: a question with a pause inside gets one reply, after the whole question; turns do not
depend on the pacing; a wrong end of turn is taken back and the whole utterance answered."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.client.duplex import DuplexClient
from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import float_to_pcm16, resample
from tests.integration.rt_helpers import assert_invariants, silence, types, wav_pcm16

pytestmark = pytest.mark.asyncio(loop_scope="session")


def ssml_pcm(ssml: str, path: Path, *, lead_s: float = 0.4, tail_s: float = 2.5) -> bytes:
    """espeak-ng SSML (a ``<break>`` inside one utterance) as 16 kHz PCM16, no dither."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["espeak-ng", "-m", "-v", "en", "-s", "160", "-w", str(path), f"<speak>{ssml}</speak>"],
                       check=True)
    audio, rate = sf.read(str(path), dtype="float32")
    speech = float_to_pcm16(resample(audio, rate, INPUT_SAMPLE_RATE_HZ))
    return silence(lead_s) + speech + silence(tail_s)


async def _session(url: str, pcm: bytes, *, realtime: bool, settle_s: float = 30.0) -> list[dict]:
    """Stream ``pcm``, then silence until the server has judged all of it (the unit it closes last
    has its ``session.unit_metrics``: a detector waiting for a score holds the input) and every
    reply to the last turn is done."""
    async with DuplexClient(url) as c:
        await c.stream_pcm(pcm, chunk_ms=100, realtime=realtime)
        last_unit = int((c.audio_end_ms - c.unit_ms - 30) // c.unit_ms)
        for _ in range(int(settle_s * 10)):
            ev = c.collector.events
            judged = any(e["type"] == "session.unit_metrics" and e["unit_index"] >= last_unit for e in ev)
            stops = [i for i, e in enumerate(ev) if e["type"] == "input_audio_buffer.speech_stopped"]
            created = {e["response_id"] for e in ev if e["type"] == "response.created"}
            done = {e["response_id"] for e in ev if e["type"] == "response.done"}
            answered = stops and any(e["type"] == "response.created" for e in ev[stops[-1]:])
            if judged and answered and created == done:
                break
            await c.stream_pcm(silence(0.1), chunk_ms=100, realtime=True)
        await c.close()
    return c.collector.events


def _turns(events: list[dict]) -> list[tuple[str, int]]:
    return [(e["type"], e.get("audio_start_ms", e.get("audio_end_ms")))
            for e in events if e["type"] in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped")]


@pytest.fixture(scope="module")
def smart(make_server):
    return make_server(turn_policy={"detector": "smart_turn", "resume_window_ms": 1500})


async def test_a_question_with_a_filler_pause_gets_one_reply_after_the_whole_question(smart, speech_dir):
    pcm = ssml_pcm('I want to know, um, <break time="1000ms"/> what is the capital of France?',
                   speech_dir / "paused_france.wav")
    ev = await _session(smart.ws_url, pcm, realtime=False)
    assert_invariants(ev, "smart_turn_paused_question")
    assert [k for k, _ in _turns(ev)].count("input_audio_buffer.speech_stopped") == 1, _turns(ev)
    created = [e for e in ev if e["type"] == "response.created"]
    assert len(created) == 1, types(ev)
    said = [e["transcript"] for e in ev if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert len(said) == 1 and "France" in said[0] and "know" in said[0].lower(), said
    metrics = [e for e in ev if e["type"] == "session.unit_metrics"]
    assert sum(m["turn_scores"] for m in metrics) >= 2  # the filler pause and the end were both scored


async def test_far_speech_starts_no_turn_and_the_unit_metrics_say_so(smart, speech_dir):
    """A question 26 dB below the normal level (a TV across the room) starts no turn; the same
    question at the normal level right after is answered (one turn, one reply)."""
    normal = ssml_pcm("What is the capital of France?", speech_dir / "far_capital.wav", lead_s=0.3, tail_s=0.0)
    quiet = float_to_pcm16(np.frombuffer(normal, np.int16).astype(np.float32) / 32768.0 * 10 ** (-26 / 20))
    pcm = quiet + silence(1.5) + normal + silence(2.0)
    ev = await _session(smart.ws_url, pcm, realtime=False)
    assert_invariants(ev, "far_speech")
    starts = [ms for kind, ms in _turns(ev) if kind == "input_audio_buffer.speech_started"]
    quiet_ms = len(quiet) / 2 / INPUT_SAMPLE_RATE_HZ * 1000
    assert len(starts) == 1 and starts[0] > quiet_ms, (starts, quiet_ms)
    metrics = [e for e in ev if e["type"] == "session.unit_metrics"]
    assert sum(m["far_speech_ignored"] for m in metrics) == 1
    assert len([e for e in ev if e["type"] == "response.created"]) == 1


async def test_turns_are_the_same_at_real_time_and_as_fast_as_possible(smart, speech_dir):
    pcm = ssml_pcm('What is the capital <break time="700ms"/> of France?', speech_dir / "paused_capital.wav",
                   tail_s=1.5)
    fast = _turns(await _session(smart.ws_url, pcm, realtime=False))
    real = _turns(await _session(smart.ws_url, pcm, realtime=True))
    assert fast == real and fast, (fast, real)


async def test_a_wrong_end_of_turn_is_taken_back_and_the_whole_utterance_answered(make_server, speech_dir):
    # thresholds this low, and no text model (it holds "What is the capital"), end every pause at its
    # first check: the break inside the question is taken for the end of the turn (a forced wrong
    # release); the user goes on within resume_window_ms
    srv = make_server(turn_policy={"detector": "smart_turn", "resume_window_ms": 2500,
                                   "smart_turn_thresholds": [0.001, 0.001, 0.001, 0.001, 0.001],
                                   "smart_turn_completion_threshold": 0.0})
    pcm = ssml_pcm('What is the capital <break time="1500ms"/> of France?', speech_dir / "wrong_release.wav")
    ev = await _session(srv.ws_url, pcm, realtime=True)
    assert_invariants(ev, "smart_turn_wrong_release")
    stopped = [e for e in ev if e["type"] == "input_audio_buffer.speech_stopped"]
    assert len(stopped) == 2 and stopped[0]["item_id"] == stopped[1]["item_id"]  # the fragment ended, then went on
    done = [e for e in ev if e["type"] == "response.done"]
    # the reply to the fragment never played (dropped, or cancelled: user_resumed), or it had started
    # playing and ran on as any reply the user talks over; the last reply answers the whole question
    for d in done[:-1]:
        details = d["response"].get("status_details") or {}
        assert d["response"]["status"] == "completed" or details.get("reason") == "user_resumed", d["response"]
    last = done[-1]
    assert last["response"]["status"] == "completed", last["response"]
    said = [e for e in ev if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert said[-1]["item_id"] == stopped[0]["item_id"]
    assert "France" in said[-1]["transcript"] and "capital" in said[-1]["transcript"], said  # never the rest alone
    answer = "".join(e["delta"] for e in ev if e["type"] == "response.output_audio_transcript.delta"
                     and e["response_id"] == last["response"]["id"])
    assert "Paris" in answer, answer


async def test_the_text_model_holds_a_turn_whose_words_go_on_though_the_acoustic_thresholds_would_end_it(
        make_server, speech_dir):
    srv = make_server(turn_policy={"detector": "smart_turn", "resume_window_ms": 2500,
                                   "smart_turn_thresholds": [0.001, 0.001, 0.001, 0.001, 0.001]})
    pcm = ssml_pcm('What is the capital <break time="1500ms"/> of France?', speech_dir / "wrong_release.wav")
    text_model = srv.engine.family.text_turn_scorer()  # (shared by every server of the test run)
    calls_before = text_model.stats().calls
    ev = await _session(srv.ws_url, pcm, realtime=False)
    assert_invariants(ev, "smart_turn_text_model_hold")
    # the checks of one pause read the same words: the text model scores them once (fragment, whole)
    assert text_model.stats().calls - calls_before <= 2
    assert [e["type"] for e in ev].count("input_audio_buffer.speech_stopped") == 1, _turns(ev)
    assert [e["type"] for e in ev].count("response.created") == 1, types(ev)
    said = [e["transcript"] for e in ev if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert len(said) == 1 and "capital" in said[0] and "France" in said[0], said


async def test_an_unknown_detector_for_the_family_stops_start_up(deploy_config, tiny_family):
    from app.backend.engine import Engine, FamilyUnavailable
    from app.config import parse_deploy_config

    data = deploy_config.model_dump(exclude_none=True)
    data["turn_policy"]["detector"] = "smart_turn"
    caps = tiny_family.capabilities
    tiny_family.capabilities = type(caps)(**{**caps.__dict__, "turn_detectors": ("silence",)})
    try:
        with pytest.raises(FamilyUnavailable, match="smart_turn"):
            await Engine(parse_deploy_config(data), tiny_family).start()
    finally:
        tiny_family.capabilities = caps
    assert np.array_equal(np.zeros(1), np.zeros(1))


async def test_playback_acks_of_a_response_still_playing_are_answered(server, question_wav):
    """Clients (vLLM-Omni's evaluation runner among them) ack playback while a response streams."""
    async with DuplexClient(server.ws_url) as c:
        pcm = silence(0.3) + wav_pcm16(question_wav) + silence(4.0)
        streaming = asyncio.create_task(c.stream_pcm(pcm, chunk_ms=100, realtime=True))
        delta = await c.wait_for("response.output_audio.delta", timeout_s=30, after_index=0)
        rid = delta["response_id"]
        mark = len(c.collector.events)
        await c.ack_playback(rid, played_ms=100)  # its first audio just arrived: it is still playing
        ack = await c.wait_for(lambda e: e["type"] in ("playback.acknowledged", "error"), timeout_s=10,
                               after_index=mark, raise_on_error=False)
        streaming.cancel()
        assert ack["type"] == "playback.acknowledged" and ack["response_id"] == rid, ack
        assert not any(e["type"] == "response.done" and e["response_id"] == rid for e in c.collector.events[:mark])
        await c.close()
