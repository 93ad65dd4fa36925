"""The "Chat (no mic)" tab: text + image/audio/video upload -> ``POST /v1/chat/completions``.

The tab calls the app's own chat route in-process through ``httpx.ASGITransport`` (no socket,
no second code path): the request is exactly what an OpenAI client would send, so the page
exercises the same parsing, limits and errors as the public API. The answer text, what the
model heard/read (``x_omni``) and the spoken reply (24 kHz) are shown. Max-tokens and temperature
sliders set the request's sampling; a reference voice upload (resampled to 16 kHz mono, cut to 8 s)
is offered only when the loaded family declares ``supports_voice_cloning`` (tiny does not: the
upload is hidden and a note says so).
"""

from __future__ import annotations

import base64
import logging
import mimetypes
from pathlib import Path
from typing import Any

import gradio as gr
import httpx
import numpy as np

from app.constants import DEFAULT_INSTRUCTIONS, OUTPUT_SAMPLE_RATE_HZ
from app.media import MediaError, decode_audio, float_to_int16, to_data_url

log = logging.getLogger(__name__)

CHAT_TIMEOUT_S = 300.0
"""Longest wait for one chat answer, seconds (tiny on 2 CPU cores can be slow with video)."""

_IMAGE_EXT = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp"}
_AUDIO_EXT = {".wav", ".mp3", ".flac", ".ogg", ".opus", ".m4a", ".webm", ".aac"}
_VIDEO_EXT = {".mp4", ".mov", ".mkv", ".avi", ".m4v"}


def media_part(path: str) -> dict[str, Any]:
    """One OpenAI content part (``image_url``/``audio_url``/``video_url``) with a data URL of ``path``.

    Raises:
        gr.Error: unknown file type.
    """
    p = Path(path)
    ext = p.suffix.lower()
    mime = mimetypes.guess_type(p.name)[0] or "application/octet-stream"
    if ext in _IMAGE_EXT or mime.startswith("image/"):
        kind = "image_url"
    elif ext in _AUDIO_EXT or mime.startswith("audio/"):
        kind = "audio_url"
    elif ext in _VIDEO_EXT or mime.startswith("video/"):
        kind = "video_url"
    else:
        raise gr.Error(f"Unsupported file type: {p.name} (use an image, audio or video file)")
    if ext == ".webm" and kind == "audio_url":
        mime = "audio/webm"
    return {"type": kind, kind: {"url": to_data_url(p.read_bytes(), mime)}}


REF_VOICE_MAX_S = 8.0
"""A reference voice is cut to this long, seconds (after resampling to 16 kHz mono)."""


def reference_voice(path: str) -> str:
    """``path`` (any audio file) resampled to 16 kHz mono, cut to :data:`REF_VOICE_MAX_S`, as a WAV data URL.

    Raises:
        gr.Error: undecodable audio.
    """
    from app.constants import INPUT_SAMPLE_RATE_HZ
    from app.media import encode_wav

    try:
        audio = decode_audio(Path(path).read_bytes(), target_rate=INPUT_SAMPLE_RATE_HZ, max_seconds=600)
    except MediaError as exc:
        raise gr.Error(f"Reference voice: {exc}") from None
    audio = audio[: int(REF_VOICE_MAX_S * INPUT_SAMPLE_RATE_HZ)]
    return to_data_url(encode_wav(audio, INPUT_SAMPLE_RATE_HZ), "audio/wav")


def build_request(text: str, files: list[str], *, speech: bool, instructions: str, model: str,
                  max_tokens: int | None = None, temperature: float | None = None,
                  ref_audio: str | None = None) -> dict[str, Any]:
    """The chat completions body for the tab's inputs (``ref_audio``: a data URL, sent as the
    request's ``ref_audio`` field, for families that clone voices)."""
    parts: list[dict[str, Any]] = []
    if text and text.strip():
        parts.append({"type": "text", "text": text.strip()})
    parts.extend(media_part(f) for f in files)
    messages: list[dict[str, Any]] = []
    if instructions and instructions.strip() and instructions.strip() != DEFAULT_INSTRUCTIONS:
        messages.append({"role": "system", "content": instructions.strip()})
    messages.append({"role": "user", "content": parts})
    body: dict[str, Any] = {"model": model, "messages": messages,
                            "modalities": ["text", "audio"] if speech else ["text"]}
    if speech:
        body["audio"] = {"format": "wav"}
    if max_tokens:
        body["max_tokens"] = int(max_tokens)
    if temperature is not None:
        body["temperature"] = float(temperature)
    if ref_audio:
        body["ref_audio"] = ref_audio
    return body


def parse_response(data: dict[str, Any]) -> tuple[str, tuple[int, np.ndarray] | None, str]:
    """Answer text, ``(24000, int16 audio)`` or None, and a note on what the model heard/read.

    The audio is PCM16 already (Gradio converts float audio itself, with a UserWarning per answer).

    Accepts both layouts: one choice with ``content`` + ``audio`` (OpenAI) or a text choice
    followed by an audio choice (vLLM-Omni).
    """
    text, audio = "", None
    for choice in data.get("choices") or []:
        msg = choice.get("message") or {}
        if not text and isinstance(msg.get("content"), str):
            text = msg["content"]
        a = msg.get("audio")
        if audio is None and isinstance(a, dict) and a.get("data"):
            try:
                pcm = decode_audio(base64.b64decode(a["data"]), target_rate=OUTPUT_SAMPLE_RATE_HZ)
                audio = (OUTPUT_SAMPLE_RATE_HZ, float_to_int16(pcm))
            except (MediaError, ValueError) as exc:
                log.warning("chat tab: undecodable audio: %s", exc)
    x = data.get("x_omni") or {}
    notes = []
    if x.get("user_text"):
        notes.append(f"Understood: {x['user_text']}")
    seen = x.get("seen_text")
    if seen:
        notes.append("Read: " + (" | ".join(seen) if isinstance(seen, list) else str(seen)))
    return text, audio, "\n".join(notes)


def build_chat_tab(app_ref: dict[str, Any], engine: Any) -> None:
    """Render the tab's components inside the current Blocks context.

    Args:
        app_ref: ``{"app": FastAPI}`` (filled by ``mount_ui``; the tab posts to that app in-process).
        engine: the engine (served model name).
    """
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(label="Message", lines=3, placeholder="Ask something, or upload a picture and ask about it",
                              elem_id="chat-text")
            files = gr.File(label="Image / audio / video", file_count="multiple", type="filepath",
                            elem_id="chat-files")
            sampling = engine.config.stage(0).default_sampling_params  # the route's defaults
            with gr.Row():
                max_tokens = gr.Slider(1, 512, value=sampling.max_tokens or 128, step=1, label="Max tokens",
                                       elem_id="chat-max-tokens")
                temperature = gr.Slider(0.0, 2.0, value=sampling.temperature if sampling.temperature is not None
                                        else 0.7, step=0.05, label="Temperature", elem_id="chat-temperature")
            voice = gr.Audio(label=f"Reference voice (16 kHz mono, first {REF_VOICE_MAX_S:.0f} s used)",
                             sources=["upload"], type="filepath", interactive=False, elem_id="chat-voice-ref")
            voice_note = gr.Markdown("", elem_id="chat-voice-note")
            with gr.Row():
                speech = gr.Checkbox(value=True, label="Spoken answer", elem_id="chat-speech")
                send = gr.Button("Send", variant="primary", elem_id="chat-send")
        with gr.Column(scale=3):
            answer = gr.Textbox(label="Answer", lines=4, interactive=False, elem_id="chat-answer")
            heard = gr.Textbox(label="What the model understood / read", lines=2, interactive=False,
                               elem_id="chat-heard")
            audio = gr.Audio(label="Spoken answer (24 kHz)", type="numpy", interactive=False, elem_id="chat-audio")

    def on_load() -> tuple[Any, str]:  # the family's capabilities (flags, not names); it may load late
        try:
            cloning = bool(engine.capabilities().get("supports_voice_cloning"))
        except Exception:  # noqa: BLE001 - family not loaded yet
            cloning = False
        note = "" if cloning else ("Voice cloning is not supported by the loaded model family: "
                                   "replies use its built-in voice.")
        return gr.update(interactive=cloning, visible=cloning), note

    gr.on(triggers=None, fn=on_load, inputs=None, outputs=[voice, voice_note], queue=False)

    async def on_send(msg: str, paths: list[str] | None, spoken: bool, tokens: float, temp: float,
                      ref: str | None) -> tuple[str, Any, str]:
        paths = [p if isinstance(p, str) else getattr(p, "name", str(p)) for p in (paths or [])]
        if not (msg and msg.strip()) and not paths:  # a hint, not an error: no red badges, no server traceback
            gr.Warning("Type a message or upload a file.")
            return gr.skip(), gr.skip(), gr.skip()
        body = build_request(msg or "", paths, speech=spoken, instructions="",
                             model=engine.config.server.served_model_name, max_tokens=int(tokens),
                             temperature=temp, ref_audio=reference_voice(ref) if ref else None)
        transport = httpx.ASGITransport(app=app_ref["app"])
        keys = engine.config.server.api_keys  # the page itself passed the key check (or is public)
        auth = {"Authorization": f"Bearer {keys[0]}"} if keys else {}
        async with httpx.AsyncClient(transport=transport, base_url="http://ui.local", timeout=CHAT_TIMEOUT_S,
                                     headers=auth) as client:
            r = await client.post("/v1/chat/completions", json=body)
        if r.status_code != 200:
            try:
                err = r.json().get("error", {}).get("message", r.text)
            except ValueError:
                err = r.text
            raise gr.Error(f"{r.status_code}: {err}")
        text_out, audio_out, note = parse_response(r.json())
        return text_out, audio_out, note

    inputs = [text, files, speech, max_tokens, temperature, voice]
    send.click(on_send, inputs=inputs, outputs=[answer, audio, heard], concurrency_limit=2)
    text.submit(on_send, inputs=inputs, outputs=[answer, audio, heard], concurrency_limit=2)


__all__ = ["build_chat_tab", "build_request", "media_part", "parse_response", "reference_voice"]
