"""Protocol behaviours a peer's test suite checks (issue 11 part 3), on the shared loopback server:
``max_tokens`` cuts say ``length`` (chat) / ``max_output_tokens`` (realtime) and their speech ends on
a word boundary; a ``playback.ack`` beyond the delivered audio is clamped and says so; a JSON body
sent as another Content-Type gets 415; ``chat_template_kwargs`` are honoured or refused; a 503
carries ``Retry-After``."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest
from openai import BadRequestError

from app.client.config import SessionConfig
from app.client.duplex import DuplexClient
from app.constants import OUTPUT_SAMPLE_RATE_HZ
from app.server import build_app
from tests.integration.rt_helpers import wav_pcm16

CHAT = "/v1/chat/completions"
SUN = "What do you know about the sun?"
# its whole reply is ~8 tokens ("The ocean is a beautiful place."), so 5 cuts it
OCEAN = "Describe the ocean in a few sentences."


def _ask(client, model, *, max_tokens, **kw):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": OCEAN}],
                                          max_tokens=max_tokens, **kw)


def test_a_reply_cut_by_max_tokens_says_length_and_its_speech_ends_on_a_boundary(client, model):
    cut = _ask(client, model, max_tokens=5, modalities=["text", "audio"], audio={"voice": "default", "format": "wav"})
    choice = cut.choices[0]
    assert choice.finish_reason == "length"
    text = choice.message.content
    assert text.endswith(".") and text.rstrip(".").split()[-1].lower() not in ("the", "of", "in", "a", "is")
    assert choice.message.audio.transcript == text  # what is spoken is the trimmed text
    whole = _ask(client, model, max_tokens=48, modalities=["text"])
    assert whole.choices[0].finish_reason == "stop"
    # streaming: the last chunk carries it too
    chunks = list(_ask(client, model, max_tokens=5, modalities=["text"], stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


@pytest.mark.asyncio(loop_scope="session")
async def test_realtime_max_tokens_cut_and_a_clamped_playback_ack(server, speech_dir):
    from tests.conftest import espeak_wav

    wav = espeak_wav(SUN, speech_dir / "sun.wav", lead_s=0.5, tail_s=1.5)
    async with DuplexClient(server.ws_url, config=SessionConfig()) as c:
        await c.send({"type": "session.update", "session": {"max_tokens": 6}})
        await c.wait_for("session.updated", timeout_s=5)
        await c.stream_pcm(wav_pcm16(wav), chunk_ms=100, realtime=False)
        await c.commit()
        done = await c.wait_for("response.done", timeout_s=40)
        rid = done["response_id"]
        resp = done["response"]
        assert resp["status"] == "completed"
        assert resp["status_details"]["reason"] == "max_output_tokens"
        assert resp["metadata"]["finish_reason"] == "length"
        transcript = resp["output"][0]["content"][0]["transcript"]
        assert transcript.endswith(".")
        audio = [e for e in c.collector.events if e["type"] == "response.output_audio.delta" and e["response_id"] == rid]
        delivered_ms = sum(len(base64.b64decode(e["delta"])) // 2 for e in audio) * 1000 / OUTPUT_SAMPLE_RATE_HZ
        # an ack far beyond the audio delivered: clamped, and said so
        await c.ack_playback(rid, f"item_{rid}", played_ms=delivered_ms + 60_000)
        ack = (await c.wait_for("playback.acknowledged", timeout_s=5))["event"]
        # an ack within it: not clamped
        await c.ack_playback(rid, f"item_{rid}", played_ms=100)
        within = (await c.wait_for(lambda e: e["type"] == "playback.acknowledged" and e["event"]["played_ms"] == 100,
                                   timeout_s=5))["event"]
    assert ack["clamped"] is True
    assert ack["delivered_ms"] == pytest.approx(delivered_ms, abs=1.0)
    assert ack["committed_ms"] == ack["delivered_ms"] and ack["played_ms"] == pytest.approx(delivered_ms + 60_000, abs=1.0)
    assert ack["history_committed"] == transcript
    assert "clamped" not in within and "delivered_ms" not in within and within["committed_ms"] == 100


def test_a_json_body_with_another_content_type_gets_415(server, model):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}]})
    for ctype in ("text/plain", "application/x-www-form-urlencoded"):  # (curl -d without -H sends the latter)
        r = httpx.post(server.base_url + CHAT, content=body, headers={"content-type": ctype}, timeout=30)
        assert r.status_code == 415, ctype
        err = r.json()["error"]
        assert err["code"] == "unsupported_media_type" and "application/json" in err["message"]
    ok = httpx.post(server.base_url + CHAT, content=body, timeout=60,
                    headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


def test_chat_template_kwargs_are_honoured_or_refused(client, model):
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    text_only = client.chat.completions.create(model=model, messages=msgs,
                                               extra_body={"chat_template_kwargs": {"use_tts_template": False}})
    assert text_only.choices[0].message.audio is None and "paris" in text_only.choices[0].message.content.lower()
    for kwargs, param in (({"enable_thinking": True}, "chat_template_kwargs.enable_thinking"),
                          ({"add_generation_prompt": False}, "chat_template_kwargs.add_generation_prompt")):
        with pytest.raises(BadRequestError) as e:
            client.chat.completions.create(model=model, messages=msgs, extra_body={"chat_template_kwargs": kwargs})
        assert e.value.body["param"] == param and e.value.body["code"] == "unsupported_parameter"


def test_a_503_says_when_to_retry(deploy_config, tiny_family):
    app = build_app(deploy_config, family=tiny_family, with_ui=False)  # not started: the engine is not ready

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as h:
            return await h.post(CHAT, json={"messages": [{"role": "user", "content": "Hi"}]})

    r = asyncio.run(post())
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    err = r.json()["error"]
    assert err["code"] == "engine_not_ready" and err["retryable"] is True and err["retry_after_ms"] == 5000
