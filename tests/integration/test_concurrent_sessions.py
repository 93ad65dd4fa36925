"""Several realtime sessions at once on one real server: each gets the answer to its own question,
their replies are written by the Thinker's cross-session batcher (``omni_thinker_batch_*``) and their
utterances transcribed together by the ASR stage (``omni_stage_batch_size{stage="asr"}``), which
each session's ``session.unit_metrics`` shows (``thinker_steps``, ``thinker_batch``, ``asr_reads``,
``asr_batch``)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.client.duplex import DuplexClient
from tests.conftest import espeak_wav
from tests.integration.rt_helpers import assert_invariants, wav_pcm16

pytestmark = pytest.mark.asyncio(loop_scope="session")

QUESTIONS = (  # (question, words of its answer's topic: the answer itself, or the question's subject)
    ("What is the capital of France?", ("paris", "france")),
    ("Who wrote Romeo and Juliet?", ("shakespeare", "romeo", "juliet")),
    ("What is seven plus five?", ("12", "twelve", "seven", "five")),
)
"""Whether the 270M base model's answer is right depends on the CPU's float rounding (on an Intel Xeon
it answers "Hello, Juliet." to Shakespeare's question, alone or batched); what this test checks is
that each session's answer is about its own question and no other's."""


def _batch_counters(base_url: str) -> dict[str, float]:
    text = httpx.get(base_url + "/metrics").text
    out = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
           if s.name.startswith("omni_thinker_batch_") and not s.labels}
    for fam in text_string_to_metric_families(text):  # the ASR stage's batches: their count and summed size
        for s in fam.samples:
            if s.name in ("omni_stage_batch_size_count", "omni_stage_batch_size_sum") and s.labels == {"stage": "asr"}:
                out["asr_" + s.name.rsplit("_", 1)[1]] = s.value
    return out


async def _ask(url: str, pcm: bytes, start: asyncio.Event) -> list[dict]:
    async with DuplexClient(url) as c:
        await c.stream_pcm(pcm, chunk_ms=100, realtime=False)
        await start.wait()  # every session commits at once: their replies are written together
        mark = len(c.collector.events)
        await c.commit()
        done = await c.wait_for("response.done", timeout_s=60, after_index=mark)
        await c.wait_for("rate_limits.updated", timeout_s=10, after_index=c.collector.events.index(done))
        mark = len(c.collector.events)
        await c.stream_pcm(bytes(2 * 16_000 * 2), chunk_ms=100, realtime=False)  # 2 s of silence: units close
        await c.wait_for("session.unit_metrics", timeout_s=10, after_index=mark)
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
        words = answer.lower()
        assert any(w in words for w in expected), (question, answer)
        assert not any(w in words for q, others in QUESTIONS if q != question for w in others), (question, answer)
    after = _batch_counters(srv.base_url)
    assert after["omni_thinker_batch_replies_total"] - before.get("omni_thinker_batch_replies_total", 0) >= 2
    tokens = after["omni_thinker_batch_tokens_total"] - before.get("omni_thinker_batch_tokens_total", 0)
    units = [[e for e in events if e["type"] == "session.unit_metrics"] for events in results]
    steps = [sum(u["thinker_steps"] for u in su) for su in units]
    # the two replies the Thinker wrote were written by the batcher (the sum is 7 plus 5 is answered by
    # the family's arithmetic, without the language model) ...
    assert steps[0] >= 1 and steps[1] >= 1 and steps[2] == 0, steps
    assert sum(steps) <= tokens  # ... one count per token, for the session whose reply it is
    assert max(u["thinker_batch"] for su in units for u in su) > 1.0  # some steps wrote two or three at once
    assert all(u["thinker_wait_ms"] >= 0 for su in units for u in su)
    # the three committed utterances were ready at once: the ASR stage transcribed them together
    reads = [sum(u["asr_reads"] for u in su) for su in units]
    assert all(n >= 1 for n in reads), reads
    assert max(u["asr_batch"] for su in units for u in su) > 1.0
    calls = after["asr_count"] - before.get("asr_count", 0)
    transcripts = after["asr_sum"] - before.get("asr_sum", 0)
    assert transcripts >= sum(reads) - 0.5 and calls < transcripts, (calls, transcripts, reads)
