"""Realtime metrics on /metrics (issue 11 part 4), scraped from a real server after real sessions."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.client.duplex import DuplexClient
from app.client.protocol import DuplexProtocolError
from tests.integration.rt_helpers import wav_pcm16

pytestmark = pytest.mark.asyncio(loop_scope="session")


def scrape(base_url: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of the server's /metrics."""
    text = httpx.get(base_url + "/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


async def test_session_lifecycle_latency_and_context_series(make_server, question_wav):
    srv = make_server(duplex_session={"max_sessions": 1})
    async with DuplexClient(srv.ws_url) as c:
        with pytest.raises(DuplexProtocolError, match="resource_exhausted"):
            async with DuplexClient(srv.ws_url):
                pass
        assert scrape(srv.base_url)[("omni_duplex_sessions_active", ())] == 1
        # a question answered, then a second one interrupted by the client once its audio plays
        await c.stream_pcm(wav_pcm16(question_wav), chunk_ms=100, realtime=False)
        await c.commit()
        first = await c.wait_for("response.done", timeout_s=60)
        assert first["response"]["status"] == "completed"
        start = len(c.collector.events)
        await c.stream_pcm(wav_pcm16(question_wav), chunk_ms=100, realtime=False)
        await c.commit()
        await c.wait_for("response.output_audio.delta", timeout_s=60, after_index=start)
        await c.barge_in()
        second = await c.wait_for("response.done", timeout_s=60, after_index=start)
    assert second["response"]["status"] == "cancelled"
    m = scrape(srv.base_url)
    assert m[("omni_duplex_sessions_active", ())] == 0
    assert m[("omni_duplex_sessions_admitted_total", (("route", "realtime"),))] == 1
    assert m[("omni_duplex_sessions_refused_total", (("reason", "capacity"),))] == 1
    assert m[("omni_duplex_sessions_closed_total", (("reason", "client_close"),))] == 1
    # both answers' first audio: from the commit (the learned detector had not ended the turn yet)
    # or from the detected end of speech; seconds on 2 CPU cores, never zero or minutes
    n = m[("omni_duplex_first_audio_seconds_count", (("route", "realtime"),))]
    total = m[("omni_duplex_first_audio_seconds_sum", (("route", "realtime"),))]
    assert n == 2 and 0.05 < total / n < 30
    assert m[("omni_duplex_barge_in_stop_seconds_count", (("kind", "client"),))] == 1
    assert m[("omni_duplex_barge_in_stop_seconds_sum", (("kind", "client"),))] < 5
    units = len([e for e in c.collector.events if e["type"] == "session.unit_metrics"])
    assert units > 4
    for name in ("omni_duplex_unit_decision_seconds", "omni_duplex_context_tokens", "omni_duplex_context_used_ratio",
                 "omni_turn_detector_unit_seconds"):
        assert m[(f"{name}_count", ())] == units, name
    tokens = max(e["context_tokens"] for e in c.collector.events if e["type"] == "session.unit_metrics")
    assert m[("omni_duplex_context_tokens_sum", ())] > tokens  # summed over units
    assert m[("omni_duplex_unit_decision_seconds_sum", ())] / units < 5
    # how the answers' model calls shared the cores: each stage's calls held them for some time
    for priority, work in (("work", "asr"), ("work", "thinker"), ("voice", "talker"), ("voice", "code2wav"),
                           ("turn", "smart-turn")):
        labels = (("priority", priority), ("work", work))
        assert m[("omni_cores_calls_total", labels)] >= 1, work
        assert m[("omni_cores_hold_seconds_total", labels)] > 0, work
        assert m[("omni_cores_wait_seconds_total", labels)] >= 0, work
