"""Server events of the realtime duplex protocol, typed, each rendering its own wire JSON.

The event names and shapes follow vLLM-Omni's realtime duplex protocol (GA names; the
beta aliases are only accepted on input, see :mod:`app.backend.protocol.commands`). The WebSocket
route serialises these with :meth:`ServerEvent.to_wire`; the in-process WebRTC handler
consumes the same objects directly.

Every event carries the ``epoch`` it belongs to; the session stamps ``server_event_seq``
when it emits.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, ClassVar

from app.media.audio import float_to_pcm16


@dataclass
class ServerEvent:
    """Base class: ``TYPE`` is the wire ``type``; ``epoch`` fences stale work."""

    TYPE: ClassVar[str] = ""
    epoch: int = 0
    server_event_seq: int = 0

    def body(self) -> dict[str, Any]:
        """Fields of the event other than ``type``/``server_event_seq`` (override)."""
        return {}

    def to_wire(self) -> dict[str, Any]:
        """Render the JSON object sent on the WebSocket."""
        out: dict[str, Any] = {"type": self.TYPE, "server_event_seq": self.server_event_seq}
        out.update(self.body())
        return out


# ----------------------------------------------------------------------------- session


@dataclass
class SessionCreated(ServerEvent):
    """``session.created``: ``session`` is the full session object (see ``DuplexSession.describe``)."""

    TYPE: ClassVar[str] = "session.created"
    session: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"session": self.session}


@dataclass
class SessionUpdated(SessionCreated):
    """``session.updated``: the session object after a ``session.update``."""

    TYPE: ClassVar[str] = "session.updated"


@dataclass
class SessionClosed(ServerEvent):
    """``session.closed``: the last event of a session; ``reason`` e.g. ``client_close``."""

    TYPE: ClassVar[str] = "session.closed"
    session_id: str = ""
    reason: str = "client_close"

    def body(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "epoch": self.epoch, "reason": self.reason}


@dataclass
class SessionExpired(SessionClosed):
    """``session.expired``: ended by the server (``idle_ttl_expired``, ``disconnect_grace_expired``)."""

    TYPE: ClassVar[str] = "session.expired"


@dataclass
class ErrorEvent(ServerEvent):
    """``error``: ``code`` is one of the reference's stable codes.

    ``error_type`` is ``invalid_request_error``, ``server_error`` or ``rate_limit_error``.
    """

    TYPE: ClassVar[str] = "error"
    code: str = "internal_error"
    message: str = ""
    error_type: str = "invalid_request_error"
    event_id: str | None = None
    param: str | None = None
    retryable: bool | None = None
    """A refusal worth retrying (``resource_exhausted``); sent only when set."""
    retry_after_ms: int | None = None
    """When to retry, ms; sent only when set."""

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {
            "type": self.error_type,
            "code": self.code,
            "message": self.message,
            "event_id": self.event_id,
            "param": self.param,
        }
        if self.retryable is not None:
            err["retryable"] = self.retryable
        if self.retry_after_ms is not None:
            err["retry_after_ms"] = self.retry_after_ms
        return {"error": err}


# ----------------------------------------------------------------------------- input


@dataclass
class SpeechStarted(ServerEvent):
    """``input_audio_buffer.speech_started`` at ``audio_start_ms`` of session input audio."""

    TYPE: ClassVar[str] = "input_audio_buffer.speech_started"
    audio_start_ms: int = 0
    item_id: str = ""

    def body(self) -> dict[str, Any]:
        return {"audio_start_ms": self.audio_start_ms, "item_id": self.item_id}


@dataclass
class SpeechStopped(ServerEvent):
    """``input_audio_buffer.speech_stopped`` at ``audio_end_ms`` of session input audio."""

    TYPE: ClassVar[str] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int = 0
    item_id: str = ""

    def body(self) -> dict[str, Any]:
        return {"audio_end_ms": self.audio_end_ms, "item_id": self.item_id}


@dataclass
class InputCommitted(ServerEvent):
    """``input_audio_buffer.committed`` for user item ``item_id`` (turn ``turn_id``)."""

    TYPE: ClassVar[str] = "input_audio_buffer.committed"
    item_id: str = ""
    turn_id: int = 0
    history_len: int = 0

    def body(self) -> dict[str, Any]:
        return {
            "item_id": self.item_id,
            "event": {
                "type": "input.committed",
                "turn_id": self.turn_id,
                "epoch": self.epoch,
                "history_len": self.history_len,
            },
        }


@dataclass
class InputCleared(ServerEvent):
    """``input_audio_buffer.cleared``."""

    TYPE: ClassVar[str] = "input_audio_buffer.cleared"


@dataclass
class InputTranscription(ServerEvent):
    """``conversation.item.input_audio_transcription.completed``: what the user said."""

    TYPE: ClassVar[str] = "conversation.item.input_audio_transcription.completed"
    item_id: str = ""
    transcript: str = ""

    def body(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "content_index": 0, "transcript": self.transcript}


@dataclass
class ItemDeleted(ServerEvent):
    """``conversation.item.deleted``: an item left the context (eviction or client request)."""

    TYPE: ClassVar[str] = "conversation.item.deleted"
    item_id: str = ""

    def body(self) -> dict[str, Any]:
        return {"item_id": self.item_id}


# ----------------------------------------------------------------------------- response


@dataclass
class _ResponseEvent(ServerEvent):
    response_id: str = ""

    @property
    def item_id(self) -> str:
        """The assistant item of a response is ``item_<response_id>`` (vLLM-Omni)."""
        return f"item_{self.response_id}"

    def part_ids(self) -> dict[str, Any]:
        """The ids every content-part event carries (one item, one content part per response)."""
        return {"response_id": self.response_id, "item_id": self.item_id, "output_index": 0, "content_index": 0}


@dataclass
class ResponseCreated(_ResponseEvent):
    """``response.created``: first event of a visible response."""

    TYPE: ClassVar[str] = "response.created"

    def body(self) -> dict[str, Any]:
        return {
            "response_id": self.response_id,
            "response": {
                "id": self.response_id,
                "object": "realtime.response",
                "status": "in_progress",
                "metadata": {"epoch": self.epoch, "duplex_event": "speak"},
            },
        }


@dataclass
class OutputItemAdded(_ResponseEvent):
    """``response.output_item.added`` (``done=False``) or ``.done`` (``done=True``)."""

    TYPE: ClassVar[str] = "response.output_item.added"
    done: bool = False
    transcript: str = ""

    def to_wire(self) -> dict[str, Any]:
        out = super().to_wire()
        if self.done:
            out["type"] = "response.output_item.done"
        return out

    def body(self) -> dict[str, Any]:
        content = [{"type": "audio", "transcript": self.transcript}] if self.done else []
        return {
            "response_id": self.response_id,
            "output_index": 0,
            "item": {
                "id": self.item_id,
                "object": "realtime.item",
                "type": "message",
                "role": "assistant",
                "status": "completed" if self.done else "in_progress",
                "content": content,
            },
        }


@dataclass
class ContentPart(_ResponseEvent):
    """``response.content_part.added`` / ``.done`` (``done=True``)."""

    TYPE: ClassVar[str] = "response.content_part.added"
    done: bool = False
    transcript: str = ""

    def to_wire(self) -> dict[str, Any]:
        out = super().to_wire()
        if self.done:
            out["type"] = "response.content_part.done"
        return out

    def body(self) -> dict[str, Any]:
        return {
            **self.part_ids(),
            "part": {"type": "audio", "transcript": self.transcript},
        }


@dataclass
class ResponseSpeak(_ResponseEvent):
    """``response.speak``: the model decided to speak (once, before the first audio)."""

    TYPE: ClassVar[str] = "response.speak"

    def body(self) -> dict[str, Any]:
        return {
            "response_id": self.response_id,
            "item_id": self.item_id,
            "metadata": {"epoch": self.epoch, "model_speak": True},
        }


@dataclass
class AudioDelta(_ResponseEvent):
    """``response.output_audio.delta``: about one unit of 24 kHz mono PCM16.

    Attributes:
        audio: float32 mono at ``sample_rate_hz``; rendered as base64 PCM16.
        sample_rate_hz: output rate (24 000).
        audio_duration_ms: cumulative audio of this response after this delta, ms.
        text_chars: cumulative transcript characters after this delta.
        end_of_turn: this is the last delta of the response.
        session_id: owning session.
    """

    TYPE: ClassVar[str] = "response.output_audio.delta"
    audio: Any = None
    sample_rate_hz: int = 24_000
    audio_duration_ms: float = 0.0
    text_chars: int = 0
    end_of_turn: bool = False
    session_id: str = ""

    def body(self) -> dict[str, Any]:
        return {
            **self.part_ids(),
            "delta": base64.b64encode(float_to_pcm16(self.audio)).decode("ascii"),
            "format": "pcm16",
            "sample_rate_hz": self.sample_rate_hz,
            "metadata": {
                "session_id": self.session_id,
                "epoch": self.epoch,
                "model_speak": True,
                "end_of_turn": self.end_of_turn,
                "audio_duration_ms": round(self.audio_duration_ms, 1),
                "audio_text_marks": [
                    {"text_chars": self.text_chars, "audio_end_ms": round(self.audio_duration_ms, 1)}
                ],
            },
        }


@dataclass
class TranscriptDelta(_ResponseEvent):
    """``response.output_audio_transcript.delta``: the text spoken by the paired audio delta."""

    TYPE: ClassVar[str] = "response.output_audio_transcript.delta"
    delta: str = ""

    def body(self) -> dict[str, Any]:
        return {
            **self.part_ids(),
            "delta": self.delta,
        }


@dataclass
class TextDelta(_ResponseEvent):
    """``response.output_text.delta``: reply text when audio output is off."""

    TYPE: ClassVar[str] = "response.output_text.delta"
    delta: str = ""

    def body(self) -> dict[str, Any]:
        return {
            **self.part_ids(),
            "delta": self.delta,
        }


@dataclass
class TextDone(_ResponseEvent):
    """``response.output_text.done`` with the whole text."""

    TYPE: ClassVar[str] = "response.output_text.done"
    text: str = ""

    def body(self) -> dict[str, Any]:
        return {**self.part_ids(), "text": self.text}


@dataclass
class AudioDone(_ResponseEvent):
    """``response.output_audio.done``."""

    TYPE: ClassVar[str] = "response.output_audio.done"

    def body(self) -> dict[str, Any]:
        return self.part_ids()


@dataclass
class TranscriptDone(_ResponseEvent):
    """``response.output_audio_transcript.done`` with the whole transcript."""

    TYPE: ClassVar[str] = "response.output_audio_transcript.done"
    transcript: str = ""

    def body(self) -> dict[str, Any]:
        return {
            **self.part_ids(),
            "transcript": self.transcript,
        }


@dataclass
class ResponseDone(_ResponseEvent):
    """``response.done``: exactly once per response.

    Attributes:
        status: ``completed``, ``cancelled`` or ``failed``.
        reason: ``status_details.reason`` (``barge_in``, ``client_cancelled``, ``user_overlap`` ...).
        transcript: what the response said (before any playback truncation).
        metadata: extra metadata (timings, context tokens).
    """

    TYPE: ClassVar[str] = "response.done"
    status: str = "completed"
    reason: str | None = None
    transcript: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        details = {"type": self.status, "reason": self.reason} if self.reason else None
        return {
            "response_id": self.response_id,
            "response": {
                "id": self.response_id,
                "object": "realtime.response",
                "status": self.status,
                "status_details": details,
                "output": [
                    {
                        "id": self.item_id,
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "audio", "transcript": self.transcript}],
                    }
                ],
                "metadata": {"epoch": self.epoch, **self.metadata},
            },
        }


@dataclass
class RateLimitsUpdated(ServerEvent):
    """``rate_limits.updated``: follows every ``response.done`` (empty list, as vLLM-Omni)."""

    TYPE: ClassVar[str] = "rate_limits.updated"

    def body(self) -> dict[str, Any]:
        return {"rate_limits": []}


@dataclass
class ResponseListen(ServerEvent):
    """``response.listen``: the model listens this unit; clients flush queued playback.

    Attributes:
        session_id: owning session.
        unit_index: the unit this decision is for.
        response_id: set when the listen ends a response (soft interrupt), else None.
        reason: ``model_listen`` or ``user_overlap``.
        metadata: per-unit metrics (compute ms, context tokens).
    """

    TYPE: ClassVar[str] = "response.listen"
    session_id: str = ""
    unit_index: int = 0
    response_id: str | None = None
    reason: str = "model_listen"
    metadata: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "epoch": self.epoch,
            "response_id": self.response_id,
            "response": {
                "status": "listening",
                "metadata": {"reason": self.reason, "unit_index": self.unit_index, **self.metadata},
            },
        }


@dataclass
class OutputAudioCleared(ServerEvent):
    """``output_audio_buffer.cleared``: queued output of ``response_id`` was dropped."""

    TYPE: ClassVar[str] = "output_audio_buffer.cleared"
    response_id: str | None = None

    def body(self) -> dict[str, Any]:
        return {"response_id": self.response_id}


@dataclass
class PlaybackAcknowledged(ServerEvent):
    """``playback.acknowledged``: the history now holds what the user heard.

    ``played_ms`` is what the client said; ``committed_ms`` what counts (capped at the audio
    delivered). When the client's position was beyond the delivered audio, ``event.clamped`` is
    true and ``event.delivered_ms`` says how much audio was delivered (both absent otherwise).
    """

    TYPE: ClassVar[str] = "playback.acknowledged"
    response_id: str = ""
    played_ms: float = 0.0
    committed_ms: float = 0.0
    truncate: bool = False
    history_committed: str = ""
    delivered_ms: float | None = None
    """Audio delivered for the response, ms, when ``played_ms`` was clamped to it (else None)."""

    def body(self) -> dict[str, Any]:
        event: dict[str, Any] = {
            "played_ms": self.played_ms,
            "committed_ms": self.committed_ms,
            "truncate": self.truncate,
            "history_committed": self.history_committed,
        }
        if self.delivered_ms is not None:
            event |= {"clamped": True, "delivered_ms": self.delivered_ms}
        return {"response_id": self.response_id, "event": event}


@dataclass
class UnitMetrics(ServerEvent):
    """``session.unit_metrics`` (extension): per-unit decision compute time and context use.

    ``compute_ms`` is the time the unit's audio spent in the turn detector (VAD + decision);
    ``turn_scores`` / ``turn_score_ms`` the end-of-turn model scores that came back in the unit and
    their time from request to result (queue + batch, off the event loop); the reply's stage work
    runs asynchronously and shows in ``/metrics``, except ``thinker_steps`` / ``thinker_batch`` /
    ``thinker_wait_ms``: where the family writes replies of several sessions in one batch
    (``tiny``), the decode steps that wrote a token of this session's replies in the unit, the mean
    replies written in those steps (1.0: alone; 0.0: no steps), and the wait of the replies that
    began in the unit for their first token, ms; likewise ``asr_reads`` / ``asr_batch`` /
    ``asr_wait_ms``: where the family transcribes several sessions' utterances in one call
    (``tiny``), this session's transcripts run in the unit, the mean utterances (of all sessions)
    in their calls, and their summed queue wait, ms. ``seen_text`` is what the
    Thinker last saw through the camera (``tiny``: a one-line description) (``""`` when nothing). ``far_speech_ignored``: stretches of
    speech in the unit that started no turn because they were far below the user's own level
    (``turn_policy.far_speech_drop_db``: a TV, a distant talker, or a mic much too quiet).

    Clients that do not know the type ignore it (OpenAI Realtime clients ignore unknown events).
    """

    TYPE: ClassVar[str] = "session.unit_metrics"
    unit_index: int = 0
    compute_ms: float = 0.0
    context_tokens: int = 0
    max_context_tokens: int = 0
    decision: str = "listen"
    seen_text: str = ""
    turn_scores: int = 0
    turn_score_ms: float = 0.0
    far_speech_ignored: int = 0
    thinker_steps: int = 0
    thinker_batch: float = 0.0
    thinker_wait_ms: float = 0.0
    asr_reads: int = 0
    asr_batch: float = 0.0
    asr_wait_ms: float = 0.0

    def body(self) -> dict[str, Any]:
        return {
            "unit_index": self.unit_index,
            "epoch": self.epoch,
            "compute_ms": round(self.compute_ms, 1),
            "context_tokens": self.context_tokens,
            "max_context_tokens": self.max_context_tokens,
            "decision": self.decision,
            "seen_text": self.seen_text,
            "turn_scores": self.turn_scores,
            "turn_score_ms": round(self.turn_score_ms, 1),
            "far_speech_ignored": self.far_speech_ignored,
            "thinker_steps": self.thinker_steps,
            "thinker_batch": round(self.thinker_batch, 2),
            "thinker_wait_ms": round(self.thinker_wait_ms, 1),
            "asr_reads": self.asr_reads,
            "asr_batch": round(self.asr_batch, 2),
            "asr_wait_ms": round(self.asr_wait_ms, 1),
        }


TERMINAL_RESPONSE_EVENTS: tuple[type[ServerEvent], ...] = (ResponseDone,)
"""Events after which nothing of that response may follow."""
