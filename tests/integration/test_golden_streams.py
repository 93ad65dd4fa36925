"""Scripted duplex sessions give the recorded (golden) event streams, and the turn detector is
chosen by configuration.

The golden streams in ``tests/golden/`` were recorded before the backend was split into rooms
(``python -m tests.golden.harness`` on the old code); the same scripts must give the same
normalised streams (ids and wall-clock figures normalised; order, epochs, media-clock times,
transcripts and audio lengths kept). See :mod:`tests.golden.harness`.
"""

from __future__ import annotations

import json

import pytest

from app.backend.engine import Engine
from app.config import parse_deploy_config
from tests.golden import harness as H

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _engine_config(deploy_config, **turn_policy):
    data = deploy_config.model_dump(exclude_none=True)
    data["turn_policy"] = {**data["turn_policy"], **turn_policy}
    return parse_deploy_config(data)


@pytest.fixture(scope="module")
def speech_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("golden-speech")


@pytest.fixture(scope="module")
async def engine(deploy_config, tiny_family):
    eng = Engine(H.golden_config(deploy_config), tiny_family)
    await eng.start()
    yield eng
    await eng.stop()


def _diff(want: list[dict], got: list[dict]) -> str:
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        if w != g:
            return f"first difference at event {i}:\n  golden: {json.dumps(w, sort_keys=True)}\n  now:    " \
                   f"{json.dumps(g, sort_keys=True)}"
    return f"lengths differ: golden {len(want)} events, now {len(got)}"


@pytest.mark.parametrize("name", sorted(H.SCRIPT_NAMES))
async def test_scripted_session_gives_the_golden_stream(engine, speech_cache, name):
    events = await H.run_script(engine, H.scripts(speech_cache)[name])
    got = H.across_cpus(H.normalise(events))
    want = H.across_cpus(H.read_golden(name))
    assert got == want, _diff(want, got)


async def test_manual_detector_is_chosen_by_config_and_only_a_commit_ends_the_turn(deploy_config, tiny_family,
                                                                                    speech_cache):
    eng = Engine(_engine_config(deploy_config, detector="manual", resume_window_ms=0), tiny_family)
    await eng.start()
    try:
        question = H.scripts(speech_cache)["question"]  # session.update, speech, then 3 s of silence
        events = await H.run_script(eng, question)
        kinds = [e["type"] for e in events]
        assert "input_audio_buffer.speech_started" in kinds  # onsets are still detected
        assert "input_audio_buffer.speech_stopped" not in kinds and "response.created" not in kinds
        events = await H.run_script(eng, [*question, {"type": "input_audio_buffer.commit"}])
        kinds = [e["type"] for e in events]
        assert kinds.index("input_audio_buffer.committed") < kinds.index("input_audio_buffer.speech_stopped") \
            < kinds.index("response.created")
        done = [e for e in events if e["type"] == "response.done"]
        assert len(done) == 1 and done[0]["response"]["status"] == "completed"
        assert "Paris" in done[0]["response"]["output"][0]["content"][0]["transcript"]
    finally:
        await eng.stop()


@pytest.mark.asyncio(loop_scope="session")
async def test_an_unknown_detector_is_refused_at_load(deploy_config):
    from app.config import ConfigError

    with pytest.raises(ConfigError, match="detector"):
        _engine_config(deploy_config, detector="psychic")


async def test_only_the_final_mark_of_an_input_transcription_is_loosened():
    ev = {"type": H.ASR_EVENT, "item_id": "<item 3>", "transcript": "Wait, stop!"}
    other = {"type": "response.audio_transcript.done", "transcript": "Wait, stop!"}
    assert H.across_cpus([ev, other]) == [{**ev, "transcript": "Wait, stop."}, other]
    assert H.across_cpus([{**ev, "transcript": "Wait, go"}])[0]["transcript"] == "Wait, go"  # words stay exact
