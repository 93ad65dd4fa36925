"""The ONE server-event decoder: realtime wire JSON -> typed :class:`~app.backend.protocol.events.ServerEvent`.

The inverse of :meth:`ServerEvent.to_wire`, used where events arrive over a wire instead of being
made in-process: the remote (vLLM-Omni) backend, which re-emits a remote server's events to our
own clients and the WebRTC handler as the same typed objects our embedded sessions produce.
:func:`decode_event` is the only place in the code base that switches on a *server* event's
``type`` string (:func:`app.backend.protocol.commands.decode_command` is its counterpart for client events).

Accepted names: the GA names our events render, and vLLM-Omni's beta aliases
(``response.audio.delta``, ``response.audio_transcript.delta``, ``response.audio.done``,
``response.audio_transcript.done``, ``response.text.delta|done``). Event types without a typed
class here (``conversation.item.added``, ``overlap.decision``, ``session.heartbeat_ack`` ...)
decode to :class:`RawEvent`, which renders its dict back unchanged.

Round trip: for every typed event ``ev``, ``decode_event(ev.to_wire(), epoch=ev.epoch)`` equals
``ev`` field by field, except that :class:`AudioDelta` audio comes back quantised to PCM16
(the wire carries 16-bit samples) and ``audio_duration_ms`` rounded to 0.1 ms as rendered. An
``epoch`` absent from the wire (some event shapes do not carry one) is taken from the caller.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from app.backend.protocol import events as E
from app.constants import BETA_SERVER_EVENT_ALIASES, OUTPUT_SAMPLE_RATE_HZ
from app.media import MediaError, pcm16_to_float

__all__ = [
    "EventDecodeError",
    "RawEvent",
    "WireAudioDelta",
    "decode_event",
    "decode_event_json",
]

_PCM16_FORMATS = frozenset({"pcm16", "pcm_s16le", "s16le", "audio/pcm", "pcm"})
_F32_FORMATS = frozenset({"pcm_f32le", "f32le", "float32"})
_EMPTY_AUDIO = np.zeros(0, np.float32)


class EventDecodeError(ValueError):
    """A server event that cannot be decoded: not JSON, not an object, no string ``type``,
    or a known type whose fields are malformed (e.g. audio that is not base64 PCM)."""


@dataclass
class RawEvent(E.ServerEvent):
    """A server event with no typed class here, kept as its wire dict.

    Attributes:
        data: the event as received; :meth:`to_wire` renders it back unchanged except for
            ``server_event_seq``, which is the (possibly re-stamped) field of this object.
    """

    TYPE: ClassVar[str] = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def type(self) -> str:
        """The wire ``type`` of the event."""
        value = self.data.get("type")
        return value if isinstance(value, str) else ""

    def to_wire(self) -> dict[str, Any]:
        """The stored dict; ``server_event_seq`` set when it had one or one was stamped."""
        out = dict(self.data)
        if self.server_event_seq or "server_event_seq" in out:
            out["server_event_seq"] = self.server_event_seq
        return out


@dataclass
class WireAudioDelta(E.AudioDelta):
    """An :class:`~app.backend.protocol.events.AudioDelta` decoded from the wire.

    It re-renders the exact base64 PCM16 it arrived with (no float -> PCM16 re-quantisation,
    no re-encoding cost) as long as ``audio`` is still the array the decoder produced; assign a
    new array to ``audio`` and it renders that instead.
    """

    wire_delta: tuple[Any, str] | None = field(default=None, repr=False, compare=False)

    def body(self) -> dict[str, Any]:
        cached = self.wire_delta
        if cached is None or cached[0] is not self.audio:
            return super().body()
        out = E.AudioDelta.body(dataclasses.replace(self, audio=_EMPTY_AUDIO, wire_delta=None))
        out["delta"] = cached[1]
        return out


# ----------------------------------------------------------------------------- field readers


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return default


def _num(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value)


def _wire_epoch(obj: Mapping[str, Any]) -> int | None:
    """Epoch wherever an event shape carries it: top level, ``metadata``, ``response.metadata``,
    ``response``, ``event`` (``input_audio_buffer.committed``), ``session`` (session object)."""
    response = _dict(obj.get("response"))
    for value in (
        obj.get("epoch"),
        _dict(obj.get("metadata")).get("epoch"),
        _dict(response.get("metadata")).get("epoch"),
        response.get("epoch"),
        _dict(obj.get("event")).get("epoch"),
        _dict(obj.get("session")).get("epoch"),
    ):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _response_id(obj: Mapping[str, Any]) -> str:
    rid = obj.get("response_id")
    if isinstance(rid, str) and rid:
        return rid
    rid = _dict(obj.get("response")).get("id")
    if isinstance(rid, str) and rid:
        return rid
    item_id = obj.get("item_id") or _dict(obj.get("item")).get("id")
    if isinstance(item_id, str) and item_id.startswith("item_"):
        return item_id[len("item_"):]
    return ""


def _first_transcript(content: Any) -> str:
    """``transcript`` (or ``text``) of the first content part that has one."""
    if not isinstance(content, list):
        return ""
    for part in content:
        if isinstance(part, dict):
            for key in ("transcript", "text"):
                if isinstance(part.get(key), str):
                    return part[key]
    return ""


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise EventDecodeError(f"{what}: expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EventDecodeError(f"{what}: invalid base64: {exc}") from None


# ----------------------------------------------------------------------------- per-type decoders
# Each takes (wire dict, common kwargs {epoch, server_event_seq}) and returns the typed event.

Decoder = Callable[[dict[str, Any], dict[str, Any]], E.ServerEvent]


def _session(cls: type[E.SessionCreated]) -> Decoder:
    return lambda o, kw: cls(**kw, session=dict(_dict(o.get("session"))))


def _session_end(cls: type[E.SessionClosed]) -> Decoder:
    return lambda o, kw: cls(**kw, session_id=_str(o.get("session_id")), reason=_str(o.get("reason"), "closed"))


def _error(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
    err = o.get("error")
    if isinstance(err, dict):  # nested (session errors; our handshake errors carry both shapes)
        return E.ErrorEvent(
            **kw,
            code=_str(err.get("code"), _str(o.get("code"), "internal_error")),
            message=_str(err.get("message"), _str(o.get("message"))),
            error_type=_str(err.get("type"), "invalid_request_error"),
            event_id=_opt_str(err.get("event_id")),
            param=_opt_str(err.get("param")),
            **_retry(err, o),
        )
    # flat handshake shape: {"type": "error", "error": "<message>", "code": "..."}
    code = _str(o.get("code"), "internal_error")
    return E.ErrorEvent(
        **kw,
        code=code,
        message=_str(err, _str(o.get("message"))),
        error_type=_str(o.get("error_type"), "rate_limit_error" if code == "resource_exhausted" else "invalid_request_error"),
        event_id=_opt_str(o.get("event_id")),
        param=_opt_str(o.get("param")),
        **_retry(o, o),
    )


def _retry(err: dict[str, Any], o: dict[str, Any]) -> dict[str, Any]:
    """``retryable`` / ``retry_after_ms`` of an error (nested, else flat; None where not said)."""
    retryable = err.get("retryable", o.get("retryable"))
    after = err.get("retry_after_ms", o.get("retry_after_ms"))
    return {
        "retryable": retryable if isinstance(retryable, bool) else None,
        "retry_after_ms": int(after) if isinstance(after, int | float) and not isinstance(after, bool) else None,
    }


def _committed(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
    ev = _dict(o.get("event"))
    return E.InputCommitted(**kw, item_id=_str(o.get("item_id")), turn_id=_int(ev.get("turn_id")),
                            history_len=_int(ev.get("history_len")))


def _output_item(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
    done = o.get("type") == "response.output_item.done"
    return E.OutputItemAdded(**kw, response_id=_response_id(o), done=done,
                             transcript=_first_transcript(_dict(o.get("item")).get("content")))


def _content_part(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
    done = o.get("type") == "response.content_part.done"
    return E.ContentPart(**kw, response_id=_response_id(o), done=done,
                         transcript=_first_transcript([_dict(o.get("part"))]))


def _audio_delta(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
    delta = o.get("delta")
    raw = _b64(delta, "response.output_audio.delta.delta")
    fmt = _str(o.get("format"), "pcm16").lower()
    try:
        if fmt in _PCM16_FORMATS:
            audio = pcm16_to_float(raw)
        elif fmt in _F32_FORMATS:
            if len(raw) % 4:
                raise EventDecodeError(f"float32 audio of {len(raw)} bytes is not a whole number of samples")
            audio = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        else:
            raise EventDecodeError(f"unsupported output audio format {fmt!r}")
    except MediaError as exc:
        raise EventDecodeError(str(exc)) from None
    meta = _dict(o.get("metadata"))
    marks = meta.get("audio_text_marks")
    last_mark = _dict(marks[-1]) if isinstance(marks, list) and marks else {}
    ev = WireAudioDelta(
        **kw,
        response_id=_response_id(o),
        audio=audio,
        sample_rate_hz=_int(o.get("sample_rate_hz"), OUTPUT_SAMPLE_RATE_HZ) or OUTPUT_SAMPLE_RATE_HZ,
        audio_duration_ms=_num(meta.get("audio_duration_ms"), _num(last_mark.get("audio_end_ms"))),
        text_chars=_int(last_mark.get("text_chars")),
        end_of_turn=meta.get("end_of_turn") is True,
        session_id=_str(meta.get("session_id"), _str(o.get("session_id"))),
    )
    if fmt in _PCM16_FORMATS:
        ev.wire_delta = (audio, delta)
    return ev


def _text_event(cls: type[Any], attr: str, *keys: str) -> Decoder:
    def decode(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
        value = next((o[k] for k in keys if isinstance(o.get(k), str)), "")
        return cls(**kw, response_id=_response_id(o), **{attr: value})

    return decode


def _response_only(cls: type[Any]) -> Decoder:
    return lambda o, kw: cls(**kw, response_id=_response_id(o))


def _response_done(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
    resp = _dict(o.get("response"))
    details = _dict(resp.get("status_details"))
    output = resp.get("output")
    transcript = ""
    if isinstance(output, list):
        transcript = "".join(_first_transcript(_dict(item).get("content")) for item in output)
    meta = {k: v for k, v in _dict(resp.get("metadata")).items() if k != "epoch"}
    return E.ResponseDone(**kw, response_id=_response_id(o), status=_str(resp.get("status"), "completed"),
                          reason=_opt_str(details.get("reason")), transcript=transcript, metadata=meta)


def _listen(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
    meta = dict(_dict(_dict(o.get("response")).get("metadata")))
    reason = _str(meta.pop("reason", None), "model_listen")
    unit_index = _int(meta.pop("unit_index", None))
    rid = o.get("response_id")
    return E.ResponseListen(**kw, session_id=_str(o.get("session_id")), unit_index=unit_index,
                            response_id=rid if isinstance(rid, str) and rid else None, reason=reason, metadata=meta)


def _playback_ack(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
    ev = _dict(o.get("event"))
    return E.PlaybackAcknowledged(
        **kw,
        response_id=_str(o.get("response_id"), _str(ev.get("response_id"))),
        played_ms=_num(ev.get("played_ms")),
        committed_ms=_num(ev.get("committed_ms")),
        truncate=ev.get("truncate") is True,
        history_committed=_str(ev.get("history_committed")),
        delivered_ms=_num(ev["delivered_ms"]) if ev.get("clamped") is True and "delivered_ms" in ev else None,
    )


def _unit_metrics(o: dict[str, Any], kw: dict[str, Any]) -> E.ServerEvent:
    return E.UnitMetrics(**kw, unit_index=_int(o.get("unit_index")), compute_ms=_num(o.get("compute_ms")),
                         context_tokens=_int(o.get("context_tokens")),
                         max_context_tokens=_int(o.get("max_context_tokens")),
                         decision=_str(o.get("decision"), "listen"), seen_text=_str(o.get("seen_text"), ""),
                         turn_scores=_int(o.get("turn_scores")), turn_score_ms=_num(o.get("turn_score_ms")),
                         far_speech_ignored=_int(o.get("far_speech_ignored")),
                         thinker_steps=_int(o.get("thinker_steps")), thinker_batch=_num(o.get("thinker_batch")),
                         thinker_wait_ms=_num(o.get("thinker_wait_ms")), asr_reads=_int(o.get("asr_reads")),
                         asr_batch=_num(o.get("asr_batch")), asr_wait_ms=_num(o.get("asr_wait_ms")))


_DECODERS: dict[str, Decoder] = {
    E.SessionCreated.TYPE: _session(E.SessionCreated),
    E.SessionUpdated.TYPE: _session(E.SessionUpdated),
    E.SessionClosed.TYPE: _session_end(E.SessionClosed),
    E.SessionExpired.TYPE: _session_end(E.SessionExpired),
    E.ErrorEvent.TYPE: _error,
    E.SpeechStarted.TYPE: lambda o, kw: E.SpeechStarted(**kw, audio_start_ms=_int(o.get("audio_start_ms")),
                                                        item_id=_str(o.get("item_id"))),
    E.SpeechStopped.TYPE: lambda o, kw: E.SpeechStopped(**kw, audio_end_ms=_int(o.get("audio_end_ms")),
                                                        item_id=_str(o.get("item_id"))),
    E.InputCommitted.TYPE: _committed,
    E.InputCleared.TYPE: lambda o, kw: E.InputCleared(**kw),
    E.InputTranscription.TYPE: lambda o, kw: E.InputTranscription(**kw, item_id=_str(o.get("item_id")),
                                                                  transcript=_str(o.get("transcript"))),
    E.ItemDeleted.TYPE: lambda o, kw: E.ItemDeleted(**kw, item_id=_str(o.get("item_id"))),
    E.ResponseCreated.TYPE: _response_only(E.ResponseCreated),
    "response.output_item.added": _output_item,
    "response.output_item.done": _output_item,
    "response.content_part.added": _content_part,
    "response.content_part.done": _content_part,
    E.ResponseSpeak.TYPE: _response_only(E.ResponseSpeak),
    E.AudioDelta.TYPE: _audio_delta,
    E.TranscriptDelta.TYPE: _text_event(E.TranscriptDelta, "delta", "delta"),
    E.TextDelta.TYPE: _text_event(E.TextDelta, "delta", "delta"),
    E.TextDone.TYPE: _text_event(E.TextDone, "text", "text"),
    E.AudioDone.TYPE: _response_only(E.AudioDone),
    E.TranscriptDone.TYPE: _text_event(E.TranscriptDone, "transcript", "transcript"),
    E.ResponseDone.TYPE: _response_done,
    E.RateLimitsUpdated.TYPE: lambda o, kw: E.RateLimitsUpdated(**kw),
    E.ResponseListen.TYPE: _listen,
    E.OutputAudioCleared.TYPE: lambda o, kw: E.OutputAudioCleared(**kw, response_id=_opt_str(o.get("response_id"))),
    E.PlaybackAcknowledged.TYPE: _playback_ack,
    E.UnitMetrics.TYPE: _unit_metrics,
}


def decode_event(obj: Mapping[str, Any], *, epoch: int = 0) -> E.ServerEvent:
    """Decode one server event dict into its typed event.

    Args:
        obj: the event as parsed from a WebSocket text frame (or rendered by ``to_realtime()``).
        epoch: the epoch to give events whose wire shape carries none (callers pass the session's
            current epoch).

    Returns:
        The typed event (``server_event_seq`` copied from the wire, 0 if absent), or a
        :class:`RawEvent` for types without a typed class. Beta names decode like their GA names.

    Raises:
        EventDecodeError: ``obj`` is not a mapping, has no string ``type``, or a known type has
            malformed fields (audio that is not base64 PCM16/float32).
    """
    if not isinstance(obj, Mapping):
        raise EventDecodeError(f"server event must be a JSON object, got {type(obj).__name__}")
    etype = obj.get("type")
    if not isinstance(etype, str) or not etype:
        raise EventDecodeError("server event has no string 'type'")
    o = dict(obj)
    o["type"] = BETA_SERVER_EVENT_ALIASES.get(etype, etype)
    wire_epoch = _wire_epoch(o)
    kw = {"epoch": epoch if wire_epoch is None else wire_epoch, "server_event_seq": _int(o.get("server_event_seq"))}
    decoder = _DECODERS.get(o["type"])
    if decoder is None:
        return RawEvent(**kw, data=dict(obj))
    return decoder(o, kw)


def decode_event_json(raw: str | bytes, *, epoch: int = 0) -> E.ServerEvent:
    """Parse one WebSocket text frame and decode it (see :func:`decode_event`).

    Raises:
        EventDecodeError: invalid JSON (or UTF-8), or as :func:`decode_event`.
    """
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventDecodeError(f"server event is not valid JSON: {exc}") from None
    return decode_event(obj, epoch=epoch)
