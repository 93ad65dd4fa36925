"""Turn a chat request's messages into a :class:`app.backend.chat.ChatInput`.

Media sources: ``data:`` URLs; bare base64 (``input_audio.data``); ``file://`` URLs or absolute
paths only inside ``limits.allowed_local_media_path``; ``http(s)://`` only when
``limits.allow_remote_media`` (fetched with httpx under a byte cap and
``limits.remote_media_timeout_s``). Everything else is an HTTP 400 whose ``param`` is the JSON
path of the offending field (``messages[0].content[1].input_audio.data``).

Decoding uses :mod:`app.media` in a worker thread: audio to float32 mono at 16 kHz, images to
RGB, videos to frames at :data:`VIDEO_SAMPLE_FPS` (at most :data:`MAX_VIDEO_FRAMES_TO_THINKER`
of them, evenly spread, go to the Thinker) plus the sound track as one more audio input.

Message rules: ``system``/``developer`` text -> instructions (joined with newlines; media parts in
a system message, vLLM-Omni's voice-clone prompt, are validated and ignored: no family here takes
a reference voice through chat); the LAST ``user`` message is the current turn (all its parts are
decoded); earlier ``user``/``assistant`` messages become text history (their media parts are
validated, not decoded); ``assistant`` messages after the last user message are ignored.
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from app.api.chat_models import (
    PART_MODELS,
    ROLES_SYSTEM,
    ROLES_TURN,
    AudioURLPart,
    ChatMessage,
    ImagePart,
    InputAudioPart,
    TextPart,
    VideoURLPart,
    json_path,
)
from app.api.errors import APIError, bad_request
from app.backend.chat import ChatInput
from app.backend.pipeline.stages import Turn
from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import (
    MediaError,
    decode_audio,
    decode_base64,
    decode_image,
    demux_video,
    guess_audio_format,
    parse_data_url,
)
from app.media.errors import (
    BAD_AUDIO,
    BAD_BASE64,
    BAD_IMAGE,
    BAD_VIDEO,
    TOO_LARGE,
    UNSUPPORTED_FORMAT,
)

VIDEO_SAMPLE_FPS = 1.0
"""Frames per second sampled from a ``video_url`` (one per 1 s unit, as in duplex sessions)."""

MAX_VIDEO_FRAMES_TO_THINKER = 4
"""At most this many sampled video frames (evenly spread) are read by the Thinker."""

RAW_AUDIO_FORMATS = frozenset({"pcm16", "pcm_f32le"})

_API_CODES = {
    BAD_AUDIO: "invalid_audio",
    BAD_IMAGE: "invalid_image",
    BAD_VIDEO: "invalid_video",
    BAD_BASE64: "invalid_base64",
    TOO_LARGE: "payload_too_large",
    UNSUPPORTED_FORMAT: "unsupported_format",
}
_KIND_MESSAGES = {
    "audio": "Invalid or unsupported audio file",
    "image": "Invalid or unsupported image file",
    "video": "Invalid or unsupported video file",
}


def media_error(exc: MediaError, param: str, kind: str) -> APIError:
    """Map a :class:`MediaError` to an HTTP 400 (``payload_too_large`` for limits)."""
    code = _API_CODES.get(exc.code, "invalid_media")
    if exc.code == TOO_LARGE:
        msg = f"{kind.capitalize()} exceeds a server limit: {exc.message}"
    elif exc.code == BAD_BASE64:
        msg = f"Invalid base64 {kind} data: {exc.message}"
    else:
        msg = f"{_KIND_MESSAGES.get(kind, 'Invalid media')}: {exc.message}"
    return bad_request(msg, code=code, param=param)


@dataclass
class DecodedRequest:
    """The decoded messages plus the sizes ``usage`` is estimated from.

    Attributes:
        chat_input: what :func:`app.backend.chat.run_chat` takes.
        audio_seconds: total seconds of input audio (parts + video sound tracks).
        image_count: images the Thinker will read (parts + sampled video frames).
    """

    chat_input: ChatInput
    audio_seconds: float = 0.0
    image_count: int = 0


@dataclass(frozen=True)
class MediaLimits:
    """The ``limits`` section fields this module needs (a view of ``config.limits``)."""

    max_request_bytes: int
    max_audio_seconds: float
    max_image_pixels: int
    max_image_bytes: int
    max_video_seconds: float
    max_video_frames: int
    max_messages: int
    max_text_chars: int
    allowed_local_media_path: str | None
    allow_remote_media: bool
    remote_media_timeout_s: float

    @classmethod
    def from_config(cls, limits: Any) -> MediaLimits:
        """Copy the fields from ``config.limits``."""
        return cls(**{name: getattr(limits, name) for name in cls.__dataclass_fields__})


# --------------------------------------------------------------------------- sources
async def load_source(url: str, *, param: str, limits: MediaLimits, max_bytes: int, kind: str) -> tuple[bytes, str | None]:
    """Fetch the bytes a media URL names.

    Returns:
        ``(data, hint)``: ``hint`` is a MIME type or a file name (format guessing), or None.

    Raises:
        APIError: 400 for a URL scheme/location that is not allowed, a missing file, a failed
            fetch, bad base64, or more than ``max_bytes``.
    """
    if not isinstance(url, str) or not url.strip():
        raise bad_request("Media URL is empty", code="invalid_media_url", param=param)
    url = url.strip()
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        try:
            mime, data = parse_data_url(url, max_bytes=max_bytes)
        except MediaError as exc:
            raise media_error(exc, param, kind) from exc
        return data, mime
    if scheme == "file" or url.startswith("/"):
        return await _load_local(url, param=param, limits=limits, max_bytes=max_bytes)
    if scheme in ("http", "https"):
        if not limits.allow_remote_media:
            raise bad_request(
                "Remote media URLs are disabled on this server (limits.allow_remote_media is false); "
                "send the media inline as a data: URL", code="remote_media_disabled", param=param)
        return await _fetch_remote(url, param=param, limits=limits, max_bytes=max_bytes)
    raise bad_request(f"Unsupported media URL scheme {scheme + ':' if scheme else '(none)'}; "
                      "use a data: URL (or file:// / http(s):// where the server allows them)",
                      code="invalid_media_url", param=param)


async def _load_local(url: str, *, param: str, limits: MediaLimits, max_bytes: int) -> tuple[bytes, str | None]:
    if url.lower().startswith("file:"):
        parts = urllib.parse.urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise bad_request("file:// URLs must not name a host", code="invalid_media_url", param=param)
        raw_path = urllib.parse.unquote(parts.path)
    else:
        raw_path = url
    root = limits.allowed_local_media_path
    if not root:
        raise bad_request("Local media paths are not allowed on this server (limits.allowed_local_media_path "
                          "is not set)", code="local_media_disabled", param=param)
    root_real = os.path.realpath(root)
    path = os.path.realpath(raw_path)
    if not os.path.isabs(raw_path) or os.path.commonpath([root_real, path]) != root_real:
        raise bad_request(f"Local media path is outside the allowed directory {root}",
                          code="media_path_not_allowed", param=param)
    p = Path(path)
    if not p.is_file():
        raise bad_request(f"Local media file not found: {raw_path}", code="media_not_found", param=param)
    size = p.stat().st_size
    if size > max_bytes:
        raise bad_request(f"Local media file is {size} bytes, limit {max_bytes}", code="payload_too_large",
                          param=param)
    return await asyncio.to_thread(p.read_bytes), p.name


async def _fetch_remote(url: str, *, param: str, limits: MediaLimits, max_bytes: int) -> tuple[bytes, str | None]:
    import httpx

    async def get() -> tuple[bytes, str | None]:
        async with (httpx.AsyncClient(timeout=limits.remote_media_timeout_s, follow_redirects=True,
                                      max_redirects=3) as client,
                    client.stream("GET", url) as resp):
            if resp.status_code != 200:
                raise bad_request(f"Fetching the media URL failed: HTTP {resp.status_code}",
                                  code="media_fetch_failed", param=param)
            declared = resp.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise bad_request(f"Remote media is {declared} bytes, limit {max_bytes}",
                                  code="payload_too_large", param=param)
            buf = bytearray()
            async for piece in resp.aiter_bytes():
                buf += piece
                if len(buf) > max_bytes:
                    raise bad_request(f"Remote media exceeds {max_bytes} bytes", code="payload_too_large",
                                      param=param)
            mime = resp.headers.get("content-type")
            name = urllib.parse.urlsplit(str(resp.url)).path.rsplit("/", 1)[-1] or None
            return bytes(buf), (mime if mime and guess_audio_format(mime) else name or mime)

    try:
        return await asyncio.wait_for(get(), timeout=limits.remote_media_timeout_s)
    except APIError:
        raise
    except TimeoutError as exc:
        raise bad_request(f"Fetching the media URL timed out after {limits.remote_media_timeout_s:g} s",
                          code="media_fetch_failed", param=param) from exc
    except httpx.HTTPError as exc:
        raise bad_request(f"Fetching the media URL failed: {type(exc).__name__}: {exc}",
                          code="media_fetch_failed", param=param) from exc


# --------------------------------------------------------------------------- decoders
def _audio_fmt(hint: str | None, *, param: str, explicit: bool) -> str | None:
    """A :func:`decode_audio` ``fmt`` from a hint; raw formats must be explicit, containers auto-detect."""
    if not hint:
        return None
    canon = guess_audio_format(hint)
    if canon is None:
        if explicit:
            raise bad_request(f"Unsupported input audio format {hint!r}", code="unsupported_format", param=param)
        return None
    return canon if canon in RAW_AUDIO_FORMATS else None


async def _decode_audio(data: bytes, fmt: str | None, rate: int | None, *, param: str,
                        limits: MediaLimits) -> np.ndarray:
    if not data:
        raise bad_request("Invalid or unsupported audio file: audio data is empty", code="invalid_audio", param=param)
    try:
        return await asyncio.to_thread(
            decode_audio, data, target_rate=INPUT_SAMPLE_RATE_HZ, fmt=fmt,
            input_rate=(rate or INPUT_SAMPLE_RATE_HZ) if fmt in RAW_AUDIO_FORMATS else None,
            max_seconds=limits.max_audio_seconds)
    except MediaError as exc:
        raise media_error(exc, param, "audio") from exc


async def _decode_image(data: bytes, *, param: str, limits: MediaLimits) -> np.ndarray:
    try:
        return await asyncio.to_thread(decode_image, data, max_bytes=limits.max_image_bytes,
                                       max_pixels=limits.max_image_pixels)
    except MediaError as exc:
        raise media_error(exc, param, "image") from exc


async def _decode_video(data: bytes, *, param: str, limits: MediaLimits) -> tuple[list[np.ndarray], np.ndarray]:
    try:
        video = await asyncio.to_thread(demux_video, data, fps=VIDEO_SAMPLE_FPS, audio_rate=INPUT_SAMPLE_RATE_HZ,
                                        max_seconds=limits.max_video_seconds, max_frames=limits.max_video_frames)
    except MediaError as exc:
        raise media_error(exc, param, "video") from exc
    frames = video.frames
    if len(frames) > MAX_VIDEO_FRAMES_TO_THINKER:
        idx = np.unique(np.linspace(0, len(frames) - 1, MAX_VIDEO_FRAMES_TO_THINKER).round().astype(int))
        frames = [frames[i] for i in idx]
    return frames, video.audio


# --------------------------------------------------------------------------- messages
def _parse_parts(content: Any, where: str) -> list[BaseModel]:
    """Validate a message ``content`` (string, list of parts or null) into part models."""
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(type="text", text=content)]
    if not isinstance(content, list):
        raise bad_request(f"{where}.content: must be a string or a list of content parts",
                          code="invalid_request", param=f"{where}.content")
    parts: list[BaseModel] = []
    for j, raw in enumerate(content):
        pw = f"{where}.content[{j}]"
        if not isinstance(raw, dict):
            raise bad_request(f"{pw}: a content part must be an object", code="invalid_request", param=pw)
        ptype = raw.get("type")
        model = PART_MODELS.get(ptype) if isinstance(ptype, str) else None
        if model is None:
            raise bad_request(f"Unsupported content part type {ptype!r} (supported: {', '.join(PART_MODELS)})",
                              code="unsupported_content_part", param=f"{pw}.type")
        try:
            parts.append(model.model_validate(raw))
        except ValidationError as exc:
            err = exc.errors()[0]
            param = json_path(err.get("loc", ()), pw)
            raise bad_request(f"{param}: {err.get('msg', 'invalid')}", code="invalid_request", param=param) from exc
    return parts


async def build_chat_input(messages: list[ChatMessage], *, limits: MediaLimits, vision: bool) -> DecodedRequest:
    """Validate every message and decode the current user turn's media.

    Args:
        messages: the request's messages (already shape-checked by pydantic).
        limits: media limits.
        vision: whether the model family reads images (``FamilyCapabilities.vision``).

    Raises:
        APIError: 400 for empty/too many messages, unknown roles or part types, bad or
            disallowed media (``param`` names the field).
    """
    if not messages:
        raise bad_request("messages must contain at least one message", code="invalid_request", param="messages")
    if len(messages) > limits.max_messages:
        raise bad_request(f"Too many messages ({len(messages)}), limit {limits.max_messages}",
                          code="too_many_messages", param="messages")
    parsed: list[tuple[str, list[BaseModel]]] = []
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if msg.role in ("tool", "function"):
            raise bad_request("Tool messages are not supported (this model makes no tool calls)",
                              code="unsupported_role", param=f"{where}.role")
        if msg.role not in ROLES_SYSTEM + ROLES_TURN:
            raise bad_request(f"Unknown message role {msg.role!r} (expected system, user or assistant)",
                              code="invalid_request", param=f"{where}.role")
        parsed.append((msg.role, _parse_parts(msg.content, where)))
    last_user = max((i for i, (role, _) in enumerate(parsed) if role == "user"), default=None)
    if last_user is None:
        raise bad_request("No text prompt found in messages (no user message)", code="empty_prompt",
                          param="messages")

    text_chars = sum(len(p.text) for _, parts in parsed for p in parts if isinstance(p, TextPart))
    if text_chars > limits.max_text_chars:
        raise bad_request(f"The messages hold {text_chars} characters of text, limit {limits.max_text_chars} "
                          "(the Thinker's context is small)", code="context_length_exceeded", param="messages")
    inp = ChatInput()
    system_texts = [p.text for role, parts in parsed if role in ROLES_SYSTEM for p in parts if isinstance(p, TextPart)]
    if any(t.strip() for t in system_texts):
        inp.instructions = "\n".join(t.strip() for t in system_texts if t.strip())
    for role, parts in parsed[:last_user]:
        if role in ROLES_TURN:
            text = " ".join(p.text.strip() for p in parts if isinstance(p, TextPart) and p.text.strip())
            if text:
                inp.history.append(Turn(role, text))  # type: ignore[arg-type]

    out = DecodedRequest(inp)
    for j, part in enumerate(parsed[last_user][1]):
        pw = f"messages[{last_user}].content[{j}]"
        await _decode_part(part, pw, limits=limits, vision=vision, out=out)
    if out.audio_seconds > limits.max_audio_seconds:
        raise bad_request(f"Input audio totals {out.audio_seconds:.1f} s, limit {limits.max_audio_seconds:g} s",
                          code="payload_too_large", param=f"messages[{last_user}].content")
    return out


async def _decode_part(part: BaseModel, pw: str, *, limits: MediaLimits, vision: bool, out: DecodedRequest) -> None:
    inp = out.chat_input
    if isinstance(part, TextPart):
        if part.text.strip():
            inp.texts.append(part.text.strip())
        return
    if isinstance(part, InputAudioPart):
        param = f"{pw}.input_audio.data"
        fmt = _audio_fmt(part.input_audio.format, param=f"{pw}.input_audio.format", explicit=True)
        try:
            data = decode_base64(part.input_audio.data, max_bytes=limits.max_request_bytes)
        except MediaError as exc:
            raise media_error(exc, param, "audio") from exc
        audio = await _decode_audio(data, fmt, part.input_audio.sample_rate, param=param, limits=limits)
    elif isinstance(part, AudioURLPart):
        param = f"{pw}.audio_url.url"
        data, hint = await load_source(part.audio_url.url, param=param, limits=limits,
                                       max_bytes=limits.max_request_bytes, kind="audio")
        audio = await _decode_audio(data, _audio_fmt(hint, param=param, explicit=False), None, param=param,
                                    limits=limits)
    elif isinstance(part, ImagePart):
        param = f"{pw}.image_url.url"
        _need_vision(vision, param)
        data, _ = await load_source(part.image_url.url, param=param, limits=limits,
                                    max_bytes=limits.max_image_bytes, kind="image")
        inp.images.append(await _decode_image(data, param=param, limits=limits))
        out.image_count += 1
        return
    elif isinstance(part, VideoURLPart):
        param = f"{pw}.video_url.url"
        _need_vision(vision, param)
        data, _ = await load_source(part.video_url.url, param=param, limits=limits,
                                    max_bytes=limits.max_request_bytes, kind="video")
        frames, audio = await _decode_video(data, param=param, limits=limits)
        inp.images.extend(frames)
        out.image_count += len(frames)
        if audio.size == 0:
            return
    else:  # pragma: no cover - PART_MODELS and this function list the same types
        raise bad_request("Unsupported content part", code="unsupported_content_part", param=pw)
    inp.audios.append(audio)
    out.audio_seconds += audio.size / INPUT_SAMPLE_RATE_HZ


def _need_vision(vision: bool, param: str) -> None:
    if not vision:
        raise bad_request("This model does not accept images or video", code="unsupported_modality", param=param)
