"""Wire-level vocabulary the client side shares: event-name aliases, field readers, errors.

The realtime duplex protocol (vLLM-Omni ``/v1/realtime?duplex=1``) is one JSON object per
WebSocket text frame, keyed by ``type``. Earlier builds used beta event names
(``response.audio.delta`` ...); the final contract uses GA names (``response.output_audio.delta``
...). Everything on the client side compares event types through :func:`canonical_type`, so
both spellings are accepted while logs keep what was actually on the wire.

Nothing here does I/O; the client (:mod:`app.client.duplex`), the collector
(:mod:`app.client.collector`) and the invariant checker (:mod:`app.client.invariants`) use
these readers so they agree on where a response id or an epoch lives in an event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from app.constants import BETA_SERVER_EVENT_ALIASES

AUDIO_DELTA: Final[str] = "response.output_audio.delta"
AUDIO_DONE: Final[str] = "response.output_audio.done"
TRANSCRIPT_DELTA: Final[str] = "response.output_audio_transcript.delta"
TRANSCRIPT_DONE: Final[str] = "response.output_audio_transcript.done"
TEXT_DELTA: Final[str] = "response.output_text.delta"
TEXT_DELTA_TYPES: Final[frozenset[str]] = frozenset({TRANSCRIPT_DELTA, TEXT_DELTA})
"""GA types whose ``delta`` is visible text (spoken transcript or plain text)."""


def canonical_type(event_type: object) -> str:
    """Return the GA name of an event type (beta names mapped; others unchanged).

    Args:
        event_type: the ``type`` field of a server event (anything; non-strings give ``""``).

    Returns:
        The GA event type string, or ``""`` when ``event_type`` is not a string.
    """
    if not isinstance(event_type, str):
        return ""
    return BETA_SERVER_EVENT_ALIASES.get(event_type, event_type)


def event_type(event: Mapping[str, Any]) -> str:
    """GA type of one event dict (see :func:`canonical_type`)."""
    return canonical_type(event.get("type"))


def event_response_id(event: Mapping[str, Any]) -> str | None:
    """Response identity of one event: ``response_id``, else ``response.id``, else ``None``."""
    value = event.get("response_id")
    if isinstance(value, str) and value:
        return value
    response = event.get("response")
    if isinstance(response, Mapping):
        value = response.get("id")
        if isinstance(value, str) and value:
            return value
    return None


def event_epoch(event: Mapping[str, Any]) -> int | None:
    """Session epoch an event belongs to, wherever the server put it.

    Looked up, in order: top-level ``epoch``, ``metadata.epoch``, ``response.metadata.epoch``,
    ``response.epoch``. ``bool`` values are not epochs.

    Returns:
        The epoch as ``int``, or ``None`` when the event carries none.
    """
    candidates: list[object] = [event.get("epoch")]
    metadata = event.get("metadata")
    if isinstance(metadata, Mapping):
        candidates.append(metadata.get("epoch"))
    response = event.get("response")
    if isinstance(response, Mapping):
        response_metadata = response.get("metadata")
        if isinstance(response_metadata, Mapping):
            candidates.append(response_metadata.get("epoch"))
        candidates.append(response.get("epoch"))
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def strip_data_url(data: str) -> str:
    """Strip a ``data:<mime>;base64,`` prefix; the wire carries bare base64.

    Args:
        data: a bare base64 string or a data URL.

    Returns:
        The base64 payload (``data`` unchanged when it is not a base64 data URL).
    """
    if data.startswith("data:"):
        _, sep, payload = data.partition(";base64,")
        if sep and payload:
            return payload
    return data


class DuplexClientError(Exception):
    """Base class of every error the duplex client raises."""


class DuplexConnectionError(DuplexClientError):
    """The WebSocket could not be opened, or failed while in use."""


class DuplexSessionClosedError(DuplexClientError):
    """The session ended (``session.closed``/``session.expired``/socket gone) before the call could finish.

    Attributes:
        reason: the server's ``reason`` or a short client-side description.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"duplex session closed: {reason}")
        self.reason = reason


class DuplexProtocolError(DuplexClientError):
    """The server answered with an ``error`` event.

    Attributes:
        code: the stable error code (e.g. ``ref_audio_required``), or ``None`` if absent.
        message: the human-readable message.
        event_id: the client ``event_id`` the server echoed, if any.
        raw: the whole ``error`` event as received.
    """

    def __init__(
        self,
        code: str | None,
        message: str,
        *,
        event_id: str | None = None,
        raw: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code
        self.message = message
        self.event_id = event_id
        self.raw = dict(raw or {})

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> DuplexProtocolError:
        """Build the exception from an ``error`` event of either shape.

        Accepts the nested shape ``{"type": "error", "error": {"type", "code", "message",
        "event_id"}}`` and the flat handshake shape ``{"type": "error", "error": "<message>",
        "code": "<code>"}``.
        """
        error = event.get("error")
        code: object = None
        message: object = None
        event_id: object = None
        if isinstance(error, Mapping):
            code = error.get("code")
            message = error.get("message")
            event_id = error.get("event_id")
        elif isinstance(error, str):
            message = error
        if code is None:
            code = event.get("code")
        if message is None:
            message = event.get("message")
        return cls(
            code if isinstance(code, str) else None,
            message if isinstance(message, str) else "server error",
            event_id=event_id if isinstance(event_id, str) else None,
            raw=event,
        )
