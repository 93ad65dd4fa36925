"""``POST /v1/chat/completions`` (non-streaming) on a real loopback server with the real openai SDK.

Every request runs the real tiny models, so prompts are short and most requests ask for text only.
"""

from __future__ import annotations

import base64
import io
import re
import time

import av
import numpy as np
import pytest
import soundfile as sf
from PIL import Image, ImageDraw, ImageFont

from app.constants import OUTPUT_SAMPLE_RATE_HZ
from app.media import to_data_url
from tests.conftest import espeak_wav
from tests.integration.rt_helpers import transcribe_24k

pytestmark = pytest.mark.slow


def wav_b64(path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def sign_png(text: str = "OPEN 24 HOURS") -> bytes:
    img = Image.new("RGB", (640, 160), "white")
    draw = ImageDraw.Draw(img)
    draw.text((30, 50), text, fill="black", font=ImageFont.load_default(size=48))
    bio = io.BytesIO()
    img.save(bio, format="PNG")
    return bio.getvalue()


def test_models_lists_served_model(client, model) -> None:
    ids = [m.id for m in client.models.list().data]
    assert model in ids


def test_spoken_question_non_streaming(client, model, question_wav, tiny_family) -> None:
    t0 = time.time()
    resp = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": wav_b64(question_wav), "format": "wav"}}]}],
        modalities=["text", "audio"],
        audio={"voice": "default", "format": "wav"},
    )
    assert resp.object == "chat.completion" and resp.id.startswith("chatcmpl-")
    choice = resp.choices[0]
    assert choice.finish_reason == "stop"
    text = choice.message.content
    extra = resp.model_extra["x_omni"]
    assert "paris" in text.lower(), f"reply {text!r} (heard {extra['user_text']!r})"
    audio = choice.message.audio
    assert audio is not None and re.fullmatch(r"audio-[0-9a-f]{16}", audio.id)
    assert audio.transcript == text
    assert abs(audio.expires_at - (t0 + 24 * 3600)) < 120
    pcm, rate = sf.read(io.BytesIO(base64.b64decode(audio.data)), dtype="float32")
    assert rate == OUTPUT_SAMPLE_RATE_HZ and pcm.ndim == 1 and pcm.size / rate > 0.5
    assert "paris" in transcribe_24k(tiny_family, pcm).lower()
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert extra["audio_duration_s"] == pytest.approx(pcm.size / rate, abs=1e-3)


def test_text_only_modality_returns_no_audio(client, model) -> None:
    resp = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What is the capital of France?"}],
        modalities=["text"], max_tokens=16)
    msg = resp.choices[0].message
    assert msg.audio is None
    assert "paris" in msg.content.lower()
    assert len(resp.choices) == 1


def test_system_history_and_vllm_extras_are_accepted(client, model) -> None:
    resp = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "My name is Tom."},
            {"role": "assistant", "content": "Nice to meet you, Tom."},
            {"role": "user", "content": [{"type": "text", "text": "Say hello."}]},
        ],
        modalities=["text"],
        temperature=0.0, top_p=1.0, seed=7, max_completion_tokens=12,
        extra_body={"sampling_params_list": [{"max_tokens": 12}, {}, {}],
                    "chat_template_kwargs": {"use_tts_template": True, "enable_thinking": False}},
    )
    assert resp.choices[0].message.content
    assert resp.model_extra["x_omni"]["user_text"] == "Say hello."


@pytest.mark.parametrize("fmt", ["flac", "pcm16", "mp3"])
def test_audio_formats(client, model, fmt) -> None:
    resp = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}],
        modalities=["text", "audio"], audio={"voice": "default", "format": fmt}, max_tokens=12)
    data = base64.b64decode(resp.choices[0].message.audio.data)
    if fmt == "pcm16":
        pcm = np.frombuffer(data, "<i2")
        rate = OUTPUT_SAMPLE_RATE_HZ
    else:
        with av.open(io.BytesIO(data)) as c:
            rate = c.streams.audio[0].rate
            pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in c.decode(audio=0)])
    assert rate == OUTPUT_SAMPLE_RATE_HZ
    assert pcm.size / rate > 0.3


def test_vllm_omni_choice_layout(client, model) -> None:
    """``omni_layout: vllm_omni`` returns vLLM-Omni's text choice + audio-only choice."""
    resp = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}],
        modalities=["text", "audio"], audio={"voice": "default", "format": "wav"}, max_tokens=12,
        extra_body={"omni_layout": "vllm_omni"})
    assert len(resp.choices) == 2
    assert resp.choices[0].message.content and resp.choices[0].message.audio is None
    assert resp.choices[1].message.audio is not None and resp.choices[1].message.content is None
    pcm, rate = sf.read(io.BytesIO(base64.b64decode(resp.choices[1].message.audio.data)))
    assert rate == OUTPUT_SAMPLE_RATE_HZ and pcm.size > 0


def test_image_with_printed_text(client, model) -> None:
    url = to_data_url(sign_png(), "image/png")
    resp = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "What does the sign say?"}]}],
        modalities=["text"], max_tokens=24)
    seen = " ".join(resp.model_extra["x_omni"]["seen_text"]).upper()
    assert "OPEN" in seen and "24" in seen, seen
    reply = resp.choices[0].message.content.lower()
    assert "open" in reply or "24" in reply, reply


def make_mp4_with_speech(wav_path, text: str, seconds: float) -> bytes:
    """A small MP4 (64x48 @ 10 fps video showing ``text`` large, AAC sound track from ``wav_path``)."""
    speech, rate = sf.read(str(wav_path), dtype="int16")
    fps = 10
    n_frames = int(seconds * fps)
    img = Image.new("RGB", (320, 96), "white")
    ImageDraw.Draw(img).text((20, 20), text, fill="black", font=ImageFont.load_default(size=48))
    rgb = np.asarray(img)
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    bio = io.BytesIO()
    with av.open(bio, mode="w", format="mp4") as out:
        vs = out.add_stream(codec, rate=fps)
        vs.width, vs.height, vs.pix_fmt = rgb.shape[1], rgb.shape[0], "yuv420p"
        astream = out.add_stream("aac", rate=rate, layout="mono")
        for i in range(n_frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = i
            for packet in vs.encode(frame):
                out.mux(packet)
        for packet in vs.encode(None):
            out.mux(packet)
        aframe = av.AudioFrame.from_ndarray(speech.reshape(1, -1), format="s16", layout="mono")
        aframe.sample_rate, aframe.pts = rate, 0
        for packet in astream.encode(aframe):
            out.mux(packet)
        for packet in astream.encode(None):
            out.mux(packet)
    return bio.getvalue()


def test_video_url_with_spoken_track(client, model, speech_dir) -> None:
    wav = espeak_wav("What is the capital of France?", speech_dir / "video_q.wav",
                     lead_s=0.3, tail_s=0.5)
    seconds = sf.info(str(wav)).duration
    mp4 = make_mp4_with_speech(wav, "EXIT", seconds)
    resp = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [{"type": "video_url", "video_url": {"url": to_data_url(mp4, "video/mp4")}}]}],
        modalities=["text"], max_tokens=24)
    extra = resp.model_extra["x_omni"]
    assert "capital" in extra["user_text"].lower(), extra
    assert any("EXIT" in s.upper() for s in extra["seen_text"]), extra
    assert resp.choices[0].message.content
