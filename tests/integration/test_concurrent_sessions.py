"""Several realtime sessions at once on one real server: each gets the answer to its own question,
and their replies are written by the Thinker's cross-session batcher (``omni_thinker_batch_*``)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.client.duplex import DuplexClient
from tests.conftest import espeak_wav
from tests.integration.rt_helpers import assert_invariants, wav_pcm16

pytestmark = pytest.mark.asyncio(loop_scope="session")

QUESTIONS = (
    ("What is the capital of France?", ("paris",)),
    ("Who wrote Romeo and Juliet?", ("shakespeare",)),
    ("What is seven plus five?", ("12", "twelve")),
)


def _batch_counters(base_url: str) -> dict[str, float]:
    text = httpx.get(base_url + "/metrics").text
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name.startswith("omni_thinker_batch_") and not s.labels}


async def _ask(url: str, pcm: bytes, start: asyncio.Event) -> list[dict]:
    async with DuplexClient(url) as c:
        await c.stream_pcm(pcm, chunk_ms=100, realtime=False)
        await start.wait()  # every session commits at once: their replies are written together
        mark = len(c.collector.events)
        await c.commit()
        done = await c.wait_for("response.done", timeout_s=60, after_index=mark)
        await c.wait_for("rate_limits.updated", timeout_s=10, after_index=c.collector.events.index(done))
        return list(c.collector.events)


async def test_three_sessions_at_once_each_get_their_own_answer(make_server, speech_dir):
    srv = make_server()
    pcms = [wav_pcm16(espeak_wav(q, speech_dir / f"concurrent-{i}.wav", lead_s=0.3, tail_s=0.3))
            for i, (q, _) in enumerate(QUESTIONS)]
    before = _batch_counters(srv.base_url)
    start = asyncio.Event()
    tasks = [asyncio.create_task(_ask(srv.ws_url, pcm, start)) for pcm in pcms]
    await asyncio.sleep(1.0)  # (every session has streamed its question)
    start.set()
    results = await asyncio.gather(*tasks)
    for (question, expected), events in zip(QUESTIONS, results, strict=True):
        assert_invariants(events, f"concurrent: {question}")
        answer = "".join(e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta")
        assert any(word in answer.lower() for word in expected), (question, answer)
    after = _batch_counters(srv.base_url)
    assert after["omni_thinker_batch_replies_total"] - before.get("omni_thinker_batch_replies_total", 0) >= 3
    assert after["omni_thinker_batch_tokens_total"] > before.get("omni_thinker_batch_tokens_total", 0)
