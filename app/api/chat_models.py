"""Wire models of ``POST /v1/chat/completions``: the pydantic request and the response builders.

The request mirrors OpenAI's chat completions in the shape vLLM-Omni uses for omni models
(``modalities``, ``audio``, ``sampling_params_list``, ``chat_template_kwargs``); the responses
are plain dicts built here so the router stays thin.

Wire choices where vLLM-Omni and OpenAI differ (see also the router's module docstring):

* Non-streaming, default ``omni_layout="openai"``: ONE choice (index 0) carries both
  ``message.content`` (the text) and ``message.audio`` (the whole spoken reply), which is where
  the ``openai`` SDK looks (``choices[0].message.audio``). ``omni_layout="vllm_omni"`` (a request
  extra) returns vLLM-Omni's two choices instead: a text choice, then an audio-only choice
  (we number it ``index: 1``; vLLM-Omni gives both ``index: 0``).
* ``message.audio.transcript`` is the spoken text (vLLM-Omni sends ``""``).
* Streaming audio chunks carry the base64 audio both in ``delta.audio.data`` (OpenAI) and in
  ``delta.content`` (vLLM-Omni); clients that concatenate ``delta.content`` as text must skip
  chunks whose top-level ``modality`` is ``"audio"``. ``audio_metadata`` is a top-level key of
  audio chunks, beside ``modality``.
* ``x_omni`` (ours) on the response / final chunk: ``user_text`` (what the model understood:
  text parts + ASR transcripts), ``seen_text`` (what the model saw in images / video frames), timings.
"""

from __future__ import annotations

import base64
import math
import time
import uuid
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
)

AUDIO_OUTPUT_FORMATS: dict[str, str] = {
    "wav": "wav",
    "pcm16": "pcm16",
    "pcm": "pcm16",
    "flac": "flac",
    "mp3": "mp3",
    "opus": "opus",
}
"""Requested ``audio.format`` -> :func:`app.media.encode_audio` format (``pcm16``/``pcm`` = raw
little-endian int16, no header)."""

OUTPUT_MODALITIES: tuple[str, ...] = ("text", "audio")
"""Output modalities the server produces."""

AUDIO_EXPIRY_S = 24 * 3600
"""``message.audio.expires_at`` is this many seconds after the response (vLLM-Omni: +24 h)."""

ROLES_SYSTEM = ("system", "developer")
ROLES_TURN = ("user", "assistant")


class _Open(BaseModel):
    """Accept (and keep) unknown keys, as vLLM's OpenAI protocol does."""

    model_config = ConfigDict(extra="allow")


# --------------------------------------------------------------------------- request
class AudioOutputOptions(_Open):
    """``audio``: output audio format and voice (the tiny family has one voice; ``voice`` is echoed only)."""

    format: str = "wav"
    voice: str | None = None


class StreamOptions(_Open):
    """``stream_options``."""

    include_usage: StrictBool = False
    continuous_usage_stats: StrictBool = False


class ChatMessage(_Open):
    """One message; ``content`` is validated part by part in :mod:`app.api.media_resolve`."""

    role: str
    content: Any = None
    name: str | None = None


class ChatCompletionRequest(_Open):
    """The request body.

    Sampling precedence (lowest first): the deploy YAML's Stage-0 ``default_sampling_params``,
    then ``sampling_params_list[0]`` (vLLM-Omni's per-stage list; the Talker/Code2Wav entries are
    accepted and ignored), then the top-level fields.
    """

    model: str | None = None
    messages: list[ChatMessage]
    modalities: Any = None
    audio: AudioOutputOptions | None = None
    stream: StrictBool = False  # (JSON true/false only: "yes" or 1 is a 400, as OpenAI's)
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    top_k: StrictInt | None = Field(default=None, ge=-1)  # (JSON integers only: true or "5" is a 400)
    repetition_penalty: float | None = Field(default=None, gt=0, allow_inf_nan=False)  # (JSON NaN / Infinity: 400)
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    seed: StrictInt | None = None
    n: StrictInt | None = 1
    tools: list[Any] | None = None
    tool_choice: Any = None
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = None
    sampling_params_list: list[dict[str, Any] | None] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    omni_layout: Literal["openai", "vllm_omni"] = "openai"
    """Ours: non-streaming choice layout (see the module docstring)."""


# --------------------------------------------------------------------------- content parts
class TextPart(_Open):
    type: Literal["text"]
    text: str


class ImageURL(_Open):
    url: str
    detail: str | None = None


class ImagePart(_Open):
    type: Literal["image_url"]
    image_url: ImageURL

    @field_validator("image_url", mode="before")
    @classmethod
    def _bare_url(cls, v: Any) -> Any:
        return {"url": v} if isinstance(v, str) else v


class InputAudio(_Open):
    data: str
    format: str | None = None
    sample_rate: int | None = Field(default=None, gt=0)
    """Ours: rate of raw ``pcm16`` data (default 16 kHz); containers carry their own."""


class InputAudioPart(_Open):
    type: Literal["input_audio"]
    input_audio: InputAudio


class MediaURL(_Open):
    url: str


class AudioURLPart(_Open):
    type: Literal["audio_url"]
    audio_url: MediaURL

    @field_validator("audio_url", mode="before")
    @classmethod
    def _bare_url(cls, v: Any) -> Any:
        return {"url": v} if isinstance(v, str) else v


class VideoURLPart(_Open):
    type: Literal["video_url"]
    video_url: MediaURL

    @field_validator("video_url", mode="before")
    @classmethod
    def _bare_url(cls, v: Any) -> Any:
        return {"url": v} if isinstance(v, str) else v


ContentPart = TextPart | ImagePart | InputAudioPart | AudioURLPart | VideoURLPart

PART_MODELS: dict[str, type[BaseModel]] = {
    "text": TextPart,
    "image_url": ImagePart,
    "input_audio": InputAudioPart,
    "audio_url": AudioURLPart,
    "video_url": VideoURLPart,
}
"""Content part ``type`` -> its model."""


def json_path(loc: tuple[Any, ...] | list[Any], prefix: str = "") -> str:
    """``("messages", 0, "content", 1)`` -> ``messages[0].content[1]`` (appended to ``prefix``)."""
    out = prefix
    for p in loc:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


# --------------------------------------------------------------------------- responses
def new_completion_id() -> str:
    """``chatcmpl-<32 hex>``."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def new_audio_id() -> str:
    """``audio-<16 hex>`` (vLLM-Omni's audio id shape)."""
    return f"audio-{uuid.uuid4().hex[:16]}"


def approx_tokens(text: str) -> int:
    """Rough token count of ``text`` (4 characters a token)."""
    return math.ceil(len(text) / 4) if text else 0


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def audio_object(audio_id: str, data: bytes, transcript: str, *, now: float | None = None) -> dict[str, Any]:
    """``message.audio``: ``{id, data (base64), expires_at, transcript}``."""
    now = time.time() if now is None else now
    return {
        "id": audio_id,
        "data": base64.b64encode(data).decode("ascii"),
        "expires_at": int(now) + AUDIO_EXPIRY_S,
        "transcript": transcript,
    }


def completion_response(
    *,
    completion_id: str,
    created: int,
    model: str,
    text: str,
    audio: dict[str, Any] | None,
    usage_obj: dict[str, int],
    layout: str,
    extra: dict[str, Any],
    finish_reason: str = "stop",
) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` body (see the module docstring for ``layout``);
    ``finish_reason`` is ``stop`` or ``length`` (the reply was cut by ``max_tokens``)."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    choices: list[dict[str, Any]] = [{"index": 0, "message": message, "logprobs": None,
                                      "finish_reason": finish_reason}]
    if audio is not None:
        if layout == "vllm_omni":
            choices.append({"index": 1, "message": {"role": "assistant", "content": None, "audio": audio},
                            "logprobs": None, "finish_reason": finish_reason})
        else:
            message["audio"] = audio
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage_obj,
        "x_omni": extra,
    }


def chunk(
    *,
    completion_id: str,
    created: int,
    model: str,
    delta: dict[str, Any] | None,
    modality: str | None,
    finish_reason: str | None = None,
    **top: Any,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` gives ``choices: []`` (the usage chunk)."""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [] if delta is None else [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        ],
    }
    if modality is not None:
        body["modality"] = modality
    body.update(top)
    return body
