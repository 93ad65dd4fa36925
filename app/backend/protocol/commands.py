"""Client commands of the realtime duplex protocol and the ONE decoder from wire JSON.

:func:`decode_command` is the only place in the code base that looks at a client event's
``type`` string. It maps beta aliases to GA names, validates fields with pydantic and
returns a typed command, or raises :class:`ProtocolError` carrying a stable error code
(``invalid_json``, ``unknown_event``, ``bad_event``, ``event_too_large``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from app.backend.protocol.json_text import LoneSurrogateError, loads_text
from app.constants import MAX_INPUT_RATE_HZ, MIN_INPUT_RATE_HZ


class ProtocolError(Exception):
    """A client event that cannot be accepted.

    Attributes:
        code: stable error code from the vLLM-Omni reference (e.g. ``bad_event``).
        message: human-readable explanation.
        event_id: the client's ``event_id`` when known.
        param: the offending field when known.
        error_type: ``invalid_request_error`` | ``server_error`` | ``rate_limit_error``.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        event_id: str | None = None,
        param: str | None = None,
        error_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.event_id = event_id
        self.param = param
        self.error_type = error_type


class _Cmd(BaseModel):
    # NaN/Infinity (Python's json reads them) are refused: echoed back (e.g. ``played_ms``) they
    # would make our own events invalid JSON
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    event_id: str | None = None


def is_client_command(msg: object) -> bool:
    """Whether ``msg`` came from the client (a decoded wire command or an in-process append)."""
    return isinstance(msg, (_Cmd, AppendArrays))


class AudioFormatSpec(BaseModel):
    """``{"type": "audio/pcm", "rate": 16000}`` or a bare format name."""

    model_config = ConfigDict(extra="allow")
    type: str | None = None
    rate: int | None = None
    format: str | None = None
    sample_rate_hz: int | None = None


class SessionUpdate(_Cmd):
    """``session.update``: the session object fields a client may set."""

    type: Literal["session.update"]
    session: dict[str, Any] = Field(default_factory=dict)


class AudioAppend(_Cmd):
    """``input_audio_buffer.append``: base64 audio (+ optional base64 JPEG/PNG frames)."""

    type: Literal["input_audio_buffer.append"]
    audio: str
    format: str | None = None
    input_audio_format: str | None = None
    sample_rate_hz: int | None = Field(default=None, ge=MIN_INPUT_RATE_HZ, le=MAX_INPUT_RATE_HZ)
    duration_ms: float | None = None
    audio_end_ms: float | None = None
    is_speech: bool | None = None
    video_frames: list[str] | None = None


class Commit(_Cmd):
    """``input_audio_buffer.commit`` (alias ``input.commit``)."""

    type: Literal["input_audio_buffer.commit"]
    final: bool = True
    response_create: bool | None = None
    is_speech: bool | None = None


class ClearInput(_Cmd):
    """``input_audio_buffer.clear``."""

    type: Literal["input_audio_buffer.clear"]


class CancelResponse(_Cmd):
    """Hard interrupt: ``response.cancel``, ``barge_in``, ``output_audio_buffer.clear``, ``input.cancel``."""

    type: Literal["response.cancel", "barge_in", "output_audio_buffer.clear", "input.cancel"]
    response_id: str | None = None


class TurnSignal(_Cmd):
    """``turn.signal`` ``{event: "barge_in"}`` (hard interrupt) or other signals (ignored)."""

    type: Literal["turn.signal"]
    event: str
    payload: dict[str, Any] | None = None


class ResponseCreate(_Cmd):
    """``response.create``: answer the committed input now."""

    type: Literal["response.create"]
    response: dict[str, Any] | None = None


class PlaybackAck(_Cmd):
    """``playback.ack``: how much of a response the user heard, ms."""

    type: Literal["playback.ack"]
    response_id: str | None = None
    item_id: str | None = None
    played_ms: float = Field(ge=0)
    committed_ms: float | None = None
    truncate: bool = False


class Heartbeat(_Cmd):
    """``session.heartbeat``."""

    type: Literal["session.heartbeat"]


class EventAck(_Cmd):
    """``session.event_ack``: client received up to ``server_event_seq`` (accepted, no reply)."""

    type: Literal["session.event_ack"]
    server_event_seq: int | None = None


class CloseSession(_Cmd):
    """``session.close`` (aliases ``close_session``, ``close``)."""

    type: Literal["session.close"]


class TextAppend(_Cmd):
    """``input.text.append``: not supported by model-native duplex."""

    type: Literal["input.text.append"]
    text: str = ""


class SessionResume(_Cmd):
    """``session.resume``: not supported (capabilities say so)."""

    type: Literal["session.resume"]


@dataclass(frozen=True)
class AppendArrays:
    """In-process append (WebRTC handler): audio and frames already decoded, no base64.

    Attributes:
        audio: float32 mono at 16 kHz, shape ``(n,)``.
        frames: uint8 RGB frames ``(h, w, 3)`` for the unit this append closes (base first).
        event_id: always None (no wire event).
    """

    audio: np.ndarray
    frames: tuple[np.ndarray, ...] = ()
    event_id: str | None = None


Command = Annotated[
    (
        SessionUpdate | AudioAppend | Commit | ClearInput | CancelResponse | TurnSignal | ResponseCreate
        | PlaybackAck | Heartbeat | EventAck | CloseSession | TextAppend | SessionResume
    ),
    Field(discriminator="type"),
]

_ADAPTER: TypeAdapter[Any] = TypeAdapter(Command)

ALIASES: dict[str, str] = {
    "input.commit": "input_audio_buffer.commit",
    "audio.playback_ack": "playback.ack",
    "close_session": "session.close",
    "close": "session.close",
    "input_text.append": "input.text.append",
    "push_text": "input.text.append",
    "signal_turn": "turn.signal",
}
"""Beta / older names accepted on input, mapped to the GA name."""

KNOWN_UNSUPPORTED: frozenset[str] = frozenset(
    {
        "conversation.item.create",
        "conversation.item.retrieve",
        "conversation.item.delete",
        "conversation.item.truncate",
    }
)


def decode_command(raw: str | bytes, *, max_bytes: int) -> Any:
    """Decode one WebSocket frame into a typed command.

    Args:
        raw: the frame as received (text; bytes are decoded as UTF-8).
        max_bytes: largest accepted frame, bytes.

    Returns:
        One of the command models above.

    Raises:
        ProtocolError: ``event_too_large``, ``invalid_json`` (also for nesting too deep to parse),
            ``bad_event`` (not an object,
            missing/invalid fields), ``unknown_event``.
    """
    size = len(raw)
    if size > max_bytes:
        raise ProtocolError("event_too_large", f"event of {size} bytes exceeds the limit of {max_bytes} bytes")
    try:
        obj = loads_text(raw)
    except LoneSurrogateError as exc:
        raise ProtocolError("invalid_json", f"frame is not valid text: {exc}", param=exc.path or None) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError("invalid_json", f"frame is not valid JSON: {exc}") from None
    except RecursionError:  # e.g. 100k nested '[': json's C parser gives up on the stack depth
        raise ProtocolError("invalid_json", "frame is not valid JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise ProtocolError("bad_event", "event must be a JSON object")
    event_id = obj.get("event_id") if isinstance(obj.get("event_id"), str) else None
    etype = obj.get("type")
    if not isinstance(etype, str):
        raise ProtocolError("bad_event", "event has no string 'type'", event_id=event_id, param="type")
    etype = ALIASES.get(etype, etype)
    obj["type"] = etype
    if etype in KNOWN_UNSUPPORTED:
        raise ProtocolError("unknown_event", f"event type '{etype}' is not supported by this server", event_id=event_id)
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "union_tag_invalid":
            raise ProtocolError("unknown_event", f"unknown event type '{etype}'", event_id=event_id) from None
        loc = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        raise ProtocolError(
            "bad_event", f"invalid '{etype}': {loc or 'event'}: {first.get('msg', 'invalid')}", event_id=event_id, param=loc
        ) from None
