"""Fault injection in a stage (issue 11 part 6): a call that raises, a call that hangs its thread.

The seam is ``StageWorker.fault`` (off by default): a callable the worker thread runs before each
call. The server, the models and the clients are real; the talker's watchdog
(``stages[].stage_timeout_s``) is 6 s here.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from app.client.duplex import DuplexClient
from tests.integration.rt_helpers import wav_pcm16

pytestmark = pytest.mark.asyncio(loop_scope="session")
WATCHDOG_S = 6.0


@pytest.fixture(scope="module")
def fault_server(make_server, deploy_config):
    stages = deploy_config.model_dump(exclude_none=True)["stages"]
    stages[1]["stage_timeout_s"] = WATCHDOG_S
    return make_server(stages=stages)


async def ask(c: DuplexClient, pcm: bytes) -> dict:
    """Ask; the answer's ``response.done``, or the ``error`` of a reply that failed before it opened
    (a response is only created with its first audio, so a failed first segment has no response)."""
    start = len(c.collector.events)
    await c.stream_pcm(pcm, chunk_ms=100, realtime=False)
    await c.commit()
    return await c.wait_for(lambda e: e["type"] == "response.done" or e["type"] == "error", timeout_s=90,
                            after_index=start, raise_on_error=False)


def failed(ev: dict) -> bool:
    return ev["type"] == "error" or ev["response"]["status"] == "failed"


def completed(ev: dict) -> bool:
    return ev["type"] == "response.done" and ev["response"]["status"] == "completed"


async def health(srv) -> dict:
    """``/health``'s body plus its HTTP status as ``code``."""
    async with httpx.AsyncClient() as http:
        r = await http.get(srv.base_url + "/health")
    return {**r.json(), "code": r.status_code}


def errors(c: DuplexClient) -> list[dict]:
    return [e["error"] for e in c.collector.events if e["type"] == "error"]


async def test_a_stage_call_that_raises_fails_that_request_only(fault_server, question_wav):
    pcm = wav_pcm16(question_wav)
    talker = fault_server.engine.pipeline.talker
    async with DuplexClient(fault_server.ws_url) as a, DuplexClient(fault_server.ws_url) as b:
        def fault(ctx, payload):
            if ctx.request_id.startswith(a.session_id):
                raise RuntimeError("injected talker fault")

        talker.fault = fault
        try:
            done_a, done_b = await asyncio.gather(ask(a, pcm), ask(b, pcm))
        finally:
            talker.fault = None
        assert failed(done_a)
        (err,) = errors(a)
        assert err["code"] == "response_error" and err["type"] == "server_error"
        assert "talker stage failed: RuntimeError: injected talker fault" in err["message"]
        assert completed(done_b) and errors(b) == []
        assert completed(await ask(a, pcm))  # the failed request took nothing else with it
    assert (await health(fault_server))["status"] == "ok"


async def test_a_hung_stage_call_is_abandoned_and_the_others_move_to_a_fresh_worker(fault_server, question_wav):
    pcm = wav_pcm16(question_wav)
    talker = fault_server.engine.pipeline.talker
    hanging, release, hung = threading.Event(), threading.Event(), []
    async with DuplexClient(fault_server.ws_url) as a, DuplexClient(fault_server.ws_url) as b:
        def fault(ctx, payload):
            if not hanging.is_set():  # the first talker call of the two answers, whichever it is
                hanging.set()
                hung.append(ctx.request_id)
                release.wait(300)  # blocks the worker thread itself (a lock wait), as a stuck native call would

        talker.fault = fault
        try:
            # both ask at once: the other answer's talker work comes after the hung call (later in its
            # batch or queued in the inbox) and can only be done by a fresh worker
            done = dict(zip("ab", await asyncio.gather(ask(a, pcm), ask(b, pcm)), strict=True))
            during = await health(fault_server)
            assert not release.is_set()  # all of the above happened while the abandoned thread was stuck
        finally:
            talker.fault = None
            release.set()
        stuck = "a" if hung[0].startswith(a.session_id) else "b"
        other = "b" if stuck == "a" else "a"
        clients = {"a": a, "b": b}
        assert completed(done[other]) and errors(clients[other]) == []
        assert failed(done[stuck])
        (err,) = errors(clients[stuck])
        assert err["code"] == "response_error" and f"timed out after {WATCHDOG_S:g} s (watchdog)" in err["message"]
        assert during["code"] == 200 and during["status"] == "degraded"
        assert "talker" in during["degraded"] and during["stages"]["talker"] is True
        # the abandoned thread returns once released; the stage is healthy again and both sessions answer
        deadline = time.monotonic() + 30
        while talker.abandoned_threads and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        h = await health(fault_server)
        assert h["status"] == "ok" and h["degraded"] == {}
        assert talker.timeouts == 1
        assert completed(await ask(clients[stuck], pcm))
