"""``POST /v1/chat/completions`` with ``stream: true`` (SSE): wire shape, audio chunks, cancellation."""

from __future__ import annotations

import base64
import io
import json
import re
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ
from app.media import resample

pytestmark = pytest.mark.slow


def sse_events(resp: httpx.Response) -> list[str]:
    """The ``data:`` payloads of an SSE response, in order."""
    return [line[len("data: "):] for line in resp.iter_lines() if line.startswith("data: ")]


def counter(base_url: str, name: str, **labels: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}\{{{want}\}} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def assert_serves(base_url: str) -> None:
    r = httpx.post(base_url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "Hi"}], "modalities": ["text"], "max_tokens": 8})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]


def test_stream_spoken_question(server, model, question_wav, tiny_family) -> None:
    body = {
        "model": model, "stream": True, "stream_options": {"include_usage": True},
        "modalities": ["text", "audio"], "audio": {"format": "wav"},
        "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {
            "data": base64.b64encode(question_wav.read_bytes()).decode(), "format": "wav"}}]}],
    }
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=300) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                   if c.get("modality") == "text" and c["choices"])
    assert "paris" in text.lower(), text
    audio_chunks = [c for c in chunks if c.get("modality") == "audio" and c["choices"]
                    and c["choices"][0]["delta"].get("audio")]
    assert len(audio_chunks) >= 1
    pieces, transcripts = [], []
    for c in audio_chunks:
        delta = c["choices"][0]["delta"]
        assert delta["content"] == delta["audio"]["data"]  # vLLM-Omni clients read delta.content
        assert re.fullmatch(r"audio-[0-9a-f]{16}", delta["audio"]["id"])
        pcm, rate = sf.read(io.BytesIO(base64.b64decode(delta["audio"]["data"])), dtype="float32")
        assert rate == OUTPUT_SAMPLE_RATE_HZ
        meta = c["audio_metadata"]
        assert meta == {"format": "wav", "sample_rate_hz": OUTPUT_SAMPLE_RATE_HZ, "frame_count": pcm.size,
                        "channels": 1}
        pieces.append(pcm)
        transcripts.append(delta["audio"]["transcript"])
    assert "".join(transcripts).strip() == text.strip()
    audio = np.concatenate(pieces)
    assert audio.size / OUTPUT_SAMPLE_RATE_HZ > 0.5
    heard = tiny_family.thinker.transcribe(resample(audio, OUTPUT_SAMPLE_RATE_HZ, INPUT_SAMPLE_RATE_HZ))
    assert "paris" in heard.lower(), heard
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] == "stop"]
    assert len(finals) == 1
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0


def test_stream_with_openai_sdk_matches_non_streaming_audio(client, model) -> None:
    """The SDK parses our chunks; streamed PCM concatenated == the non-streaming reply's PCM."""
    req = {"model": model, "messages": [{"role": "user", "content": "Tell me about the sea."}],
           "modalities": ["text", "audio"], "max_tokens": 24}
    stream = client.chat.completions.create(stream=True, audio={"voice": "default", "format": "pcm16"}, **req)
    text, pcm, n_audio = "", b"", 0
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if chunk.model_extra.get("modality") == "audio" and delta.audio is not None:
            n_audio += 1
            assert delta.audio.data == delta.content
            pcm += base64.b64decode(delta.audio.data)
        elif chunk.model_extra.get("modality") == "text":
            text += delta.content or ""
    whole = client.chat.completions.create(audio={"voice": "default", "format": "pcm16"}, **req)
    assert whole.choices[0].message.content == text
    assert n_audio >= 2, "a reply of several segments streams several audio chunks"
    assert pcm == base64.b64decode(whole.choices[0].message.audio.data)


def test_stream_text_only_has_no_audio_chunks(server, model) -> None:
    body = {"model": model, "stream": True, "modalities": ["text"], "max_tokens": 8,
            "messages": [{"role": "user", "content": "Hi"}]}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=120) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c.get("modality") for c in chunks} == {"text"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_stream_bad_input_is_a_plain_400(server, model) -> None:
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"not audio at all").decode(),
                                                "format": "wav"}}]}]}
    r = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "messages[0].content[0].input_audio.data"
    assert_serves(server.base_url)


@pytest.fixture
def slow_talker(server, monkeypatch):
    """Wrap the live server's Talker so each segment takes >= 0.5 s and calls are counted."""
    worker = server.engine.pipeline.talker
    real = worker._fn
    calls: list[str] = []

    def slow(text):
        calls.append(text)
        time.sleep(0.5)
        return real(text)

    monkeypatch.setattr(worker, "_fn", slow)
    return calls


LONG = "Explain how a car engine works, step by step."
"""Its greedy reply is voiced in three segments ("A car engine is " + two more)."""


def wait_for_cancelled(base_url: str, before: float) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and counter(base_url, "omni_chat_requests_total", outcome="cancelled") <= before:
        time.sleep(0.1)
    assert counter(base_url, "omni_chat_requests_total", outcome="cancelled") == before + 1


def test_stream_client_disconnect_cancels_the_stages(server, model, slow_talker) -> None:
    before = counter(server.base_url, "omni_chat_requests_total", outcome="cancelled")
    body = {"model": model, "stream": True, "modalities": ["text", "audio"],
            "messages": [{"role": "user", "content": LONG}]}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # the response began (its first audio is ready): hang up
    wait_for_cancelled(server.base_url, before)
    time.sleep(1.2)  # long enough for the Talker to have voiced every other segment
    # the first segment, and at most the one the Talker had begun when the client hung up
    assert 1 <= len(slow_talker) <= 2, slow_talker
    assert_serves(server.base_url)


def test_non_streaming_client_disconnect_cancels_the_stages(server, model, slow_talker) -> None:
    before = counter(server.base_url, "omni_chat_requests_total", outcome="cancelled")
    body = {"model": model, "modalities": ["text", "audio"], "messages": [{"role": "user", "content": LONG}]}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(10, read=0.3))
    wait_for_cancelled(server.base_url, before)
    time.sleep(1.2)
    assert len(slow_talker) <= 1, slow_talker
    assert_serves(server.base_url)
