"""Asynchronous client for the realtime duplex protocol (``WS /v1/realtime?duplex=1``).

The API follows vLLM-Omni's ``vllm_omni.clients.duplex.DuplexClient`` so scripts written for
one work against the other::

    config = SessionConfig(ref_audio=audio_data_url)
    async with DuplexClient("http://127.0.0.1:8000", model="tiny", config=config) as client:
        await client.stream_pcm(pcm16_16k)          # paced like a microphone
        await client.commit()
        done = await client.wait_for("response.done", timeout_s=30)
        pcm24k = client.collector.audio_bytes(done["response"]["id"])

One background reader task owns the socket's receive side. Each server event gets
``_client_received_at_s`` (``time.monotonic()`` seconds), is stored in :attr:`collector`
(an :class:`~app.client.collector.EventCollector`, all events) and is put on a bounded queue
(1024 events; the oldest is dropped when full, so a consumer that stops reading never stalls
the reader) that :meth:`DuplexClient.events` drains. Beta and GA event names are both accepted
(see :mod:`app.client.protocol`).

Units: audio durations and ``audio_end_ms`` are milliseconds of input audio; wall-clock times
are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Self
from uuid import uuid4

import websockets

from app.client.collector import RECEIVED_AT_KEY, EventCollector
from app.client.config import (
    AudioFormat,
    SessionConfig,
    build_realtime_url,
    unit_boundary_ms,
    units_closed_by,
)
from app.client.protocol import (
    DuplexClientError,
    DuplexConnectionError,
    DuplexProtocolError,
    DuplexSessionClosedError,
    canonical_type,
    event_type,
    strip_data_url,
)
from app.client.records import AppendRecord
from app.constants import UNIT_MS

__all__ = [
    "AppendRecord",
    "AudioFormat",
    "DuplexClient",
    "DuplexClientError",
    "DuplexConnectionError",
    "DuplexProtocolError",
    "DuplexSessionClosedError",
    "EventCollector",
    "SessionConfig",
    "build_realtime_url",
    "unit_boundary_ms",
]

MAX_BUFFERED_EVENTS = 1024
"""Capacity of the :meth:`DuplexClient.events` queue; when full the oldest event is dropped."""

MAX_FRAME_BYTES = 64 << 20
"""Largest WebSocket message the client accepts, bytes."""

_EPSILON_MS = 1e-6
_CLOSED = object()

EventMatch = str | Iterable[str] | Callable[[dict[str, Any]], bool]
"""What :meth:`DuplexClient.wait_for` matches: a type, several types, or a predicate."""


def _put_drop_oldest(queue: asyncio.Queue[Any], item: object) -> None:
    """Enqueue without blocking; drop the oldest entry when the queue is full."""
    try:
        queue.put_nowait(item)
    except asyncio.QueueFull:
        with contextlib.suppress(asyncio.QueueEmpty):
            queue.get_nowait()
        queue.put_nowait(item)


def _matcher(match: EventMatch) -> Callable[[dict[str, Any]], bool]:
    if callable(match):
        return match
    names = (
        {canonical_type(match)} if isinstance(match, str) else {canonical_type(m) for m in match}
    )
    return lambda event: event_type(event) in names


class DuplexClient:
    """One duplex session over a WebSocket; use as ``async with``.

    Args:
        url: server base or realtime URL (``http(s)://`` or ``ws(s)://``); the query is forced
            to ``duplex=1&model=<model>&autostart=0`` (see :func:`build_realtime_url`).
        model: served model name (query ``model`` and ``session.model``); ``None`` omits it.
        config: session configuration; default :class:`SessionConfig`.
        handshake_timeout_s: limit for connecting and for ``session.created`` (+ ``session.updated``).
        close_timeout_s: how long exit waits for ``session.closed`` after ``session.close``.
        await_session_updated: also wait for ``session.updated`` during the handshake.
        auto_ack: answer each ``server_event_seq`` with ``session.event_ack`` (as vLLM-Omni does).
        collector: where events are stored; a fresh :class:`EventCollector` by default.

    Attributes:
        url: the final WebSocket URL.
        session: the latest ``session`` object from ``session.created``/``session.updated``.
        session_id: server-allocated session id (``None`` before ``session.created``).
        capabilities: ``session.created.session.capabilities`` (``{}`` if absent).
        audio_end_ms: cumulative input audio appended so far, ms.
        appends: one :class:`AppendRecord` per append sent.
        commit_sent_at_s: monotonic send time of the latest commit, or ``None``.
        closed_reason: why the session ended, once it has.
    """

    def __init__(
        self,
        url: str,
        model: str | None = None,
        config: SessionConfig | None = None,
        *,
        handshake_timeout_s: float = 30.0,
        close_timeout_s: float = 10.0,
        await_session_updated: bool = True,
        auto_ack: bool = True,
        collector: EventCollector | None = None,
        api_key: str | None = None,
    ) -> None:
        self.config = config or SessionConfig()
        self.api_key = api_key
        """Sent as ``Authorization: Bearer`` on the handshake (a keyed server); None = none."""
        self.model = model
        self.url = build_realtime_url(url, model)
        self.handshake_timeout_s = handshake_timeout_s
        self.close_timeout_s = close_timeout_s
        self.await_session_updated = await_session_updated
        self.auto_ack = auto_ack
        self.collector = collector or EventCollector(
            output_sample_rate_hz=self.config.output_audio.sample_rate_hz
        )
        self.session: dict[str, Any] = {}
        self.session_id: str | None = None
        self.capabilities: dict[str, Any] = {}
        self.audio_end_ms = 0.0
        self.appends: list[AppendRecord] = []
        self.commit_sent_at_s: float | None = None
        self.closed_reason: str | None = None
        self._ws: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=MAX_BUFFERED_EVENTS)
        self._closed = asyncio.Event()
        self._closed_expected = False
        self._closing = False
        self._arrival = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.close(wait=exc_type is None)

    @property
    def closed(self) -> bool:
        """Whether the session has ended (closed, expired or the socket is gone)."""
        return self._closed.is_set()

    @property
    def unit_ms(self) -> int:
        """Unit length, ms: ``capabilities.chunk_period_ms``, else ``config.chunk_period_ms``, else ``UNIT_MS``."""
        value = self.capabilities.get("chunk_period_ms")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        return self.config.chunk_period_ms or UNIT_MS

    async def connect(self) -> None:
        """Open the socket, send ``session.update`` and wait for the session to exist.

        Raises:
            DuplexConnectionError: the WebSocket could not be opened.
            DuplexProtocolError: the server answered the handshake with ``error`` (flat or nested).
            DuplexSessionClosedError: the socket closed before ``session.created``.
            TimeoutError: no ``session.created`` (or ``session.updated``) within the timeout.
        """
        try:
            auth = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
            self._ws = await websockets.connect(
                self.url, max_size=MAX_FRAME_BYTES, open_timeout=self.handshake_timeout_s,
                additional_headers=auth,
            )
        except Exception as exc:
            raise DuplexConnectionError(f"connect to {self.url} failed: {exc}") from exc
        self._reader = asyncio.create_task(self._read_loop(), name="duplex-client-reader")
        try:
            start = len(self.collector.events)
            await self.send(
                {
                    "type": "session.update",
                    "session": self.config.to_session_payload(model=self.model),
                }
            )
            deadline = time.monotonic() + self.handshake_timeout_s
            await self.wait_for("session.created", deadline - time.monotonic(), after_index=start)
            if self.await_session_updated:
                await self.wait_for(
                    "session.updated", deadline - time.monotonic(), after_index=start
                )
        except BaseException:
            await self._teardown()
            raise

    async def close(self, *, wait: bool = True) -> None:
        """End the session: send ``session.close``, await ``session.closed``, close the socket.

        Best effort and idempotent: a session that already ended, a failed send or a missing
        ``session.closed`` (after ``close_timeout_s``) are not errors.

        Args:
            wait: wait for ``session.closed``; ``False`` sends the close and tears down at once.
        """
        if self._ws is not None and not self.closed:
            start = len(self.collector.events)
            try:
                await self.send({"type": "session.close"})
                self._closing = True
                if wait:
                    await self.wait_for(
                        "session.closed",
                        self.close_timeout_s,
                        after_index=start,
                        raise_on_error=False,
                    )
            except (DuplexClientError, TimeoutError):
                pass
        await self._teardown()

    async def _teardown(self) -> None:
        self._closing = True
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        self._finalize(self.closed_reason or "client closed", expected=True)

    # -- sending -----------------------------------------------------------------------------

    async def send(self, event: dict[str, Any]) -> str:
        """Send one client event, stamping ``event_id`` (``evt_<hex>``) when it has none.

        Returns:
            The event's ``event_id``.

        Raises:
            DuplexSessionClosedError: the session already ended.
            DuplexConnectionError: not connected, or the socket failed.
        """
        if self._ws is None:
            raise DuplexConnectionError("not connected")
        if self.closed:
            raise DuplexSessionClosedError(self.closed_reason or "closed")
        payload = dict(event)
        payload.setdefault("event_id", f"evt_{uuid4().hex}")
        try:
            await self._ws.send(json.dumps(payload))
        except Exception as exc:
            raise DuplexConnectionError(f"send failed: {exc}") from exc
        return str(payload["event_id"])

    async def append_audio(
        self,
        pcm: bytes,
        video_frames: Sequence[str] | None = None,
        is_speech: bool | None = None,
    ) -> str:
        """Send ``input_audio_buffer.append`` with one chunk of input audio.

        Adds ``duration_ms`` (this chunk) and ``audio_end_ms`` (cumulative, after it), both
        rounded to whole ms, e.g. 3200 bytes of pcm16 @ 16 kHz = 100 ms.

        Args:
            pcm: audio in ``config.input_audio`` format (pcm16 @ 16 kHz by default).
            video_frames: base64 JPEG/PNG strings or data URLs (prefix stripped), for the
                append that closes a unit: ≤1 base frame + an optional composite.
            is_speech: optional client speech hint.

        Returns:
            The append's ``event_id``.

        Raises:
            ValueError: ``pcm`` is not a whole number of samples.
            DuplexSessionClosedError, DuplexConnectionError: see :meth:`send`.
        """
        input_format = self.config.input_audio
        if len(pcm) % input_format.bytes_per_sample:
            raise ValueError(
                f"{len(pcm)} bytes is not a whole number of {input_format.encoding} samples"
            )
        duration_ms = input_format.duration_ms(len(pcm))
        audio_end_ms = self.audio_end_ms + duration_ms
        event: dict[str, Any] = {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(pcm).decode("ascii"),
            "format": input_format.encoding,
            "sample_rate_hz": input_format.sample_rate_hz,
            "duration_ms": round(duration_ms),
            "audio_end_ms": round(audio_end_ms),
        }
        if is_speech is not None:
            event["is_speech"] = is_speech
        frames = [strip_data_url(frame) for frame in video_frames or ()]
        if frames:
            event["video_frames"] = frames
        event_id = await self.send(event)
        self.appends.append(
            AppendRecord(event_id, self.audio_end_ms, audio_end_ms, time.monotonic(), len(frames))
        )
        self.audio_end_ms = audio_end_ms
        return event_id

    async def stream_pcm(
        self,
        pcm: bytes,
        chunk_ms: int = 200,
        realtime: bool = True,
        video_frames: Sequence[str] | None = None,
        stacked_video_frames: Sequence[str | None] | None = None,
        is_speech: bool | None = None,
    ) -> int:
        """Append ``pcm`` in ``chunk_ms`` slices, optionally paced, with frames on unit boundaries.

        Frame ``k`` rides the append whose cumulative ``audio_end_ms`` first reaches the
        boundary of the ``k``-th unit still open when the call starts (for a fresh session:
        unit ``k`` closes at ``FIRST_UNIT_MS + k * unit_ms``, ``unit_ms`` from
        :attr:`unit_ms`). ``stacked_video_frames[k]`` (a composite of the sub-frames inside
        unit ``k``) rides the same append after its base frame: ``[f0, s0]``, ``[f1]``. When
        the audio outlasts the video, the last frame is repeated on every later unit (alone:
        its composite belongs to its own unit only). At most one unit's frames per append.

        Pacing (``realtime=True``) emulates a microphone: the slice covering input audio
        ``[a, b)`` ms of this call is sent at ``t0 + b/1000`` s (``t0`` = call start,
        monotonic), on a fixed schedule so sleeps do not drift.

        Args:
            pcm: input audio in ``config.input_audio`` format.
            chunk_ms: slice length, ms (the last slice may be shorter).
            realtime: pace as above; ``False`` sends as fast as possible.
            video_frames: base frames in capture order, one per unit.
            stacked_video_frames: optional composites, parallel to ``video_frames``; ``None`` entries skip.
            is_speech: optional speech hint copied onto every append.

        Returns:
            Number of appends that carried a frame.
        """
        input_format = self.config.input_audio
        chunk_bytes = max(input_format.byte_count(chunk_ms), input_format.bytes_per_sample)
        frames = list(video_frames or ())
        stacked = list(stacked_video_frames or ())
        unit_ms = self.unit_ms
        first_open_unit = units_closed_by(self.audio_end_ms + _EPSILON_MS, unit_ms)
        started_at = time.monotonic()
        stream_start_ms = self.audio_end_ms
        frames_sent = 0
        for offset in range(0, len(pcm), chunk_bytes):
            chunk = pcm[offset : offset + chunk_bytes]
            chunk_end_ms = self.audio_end_ms + input_format.duration_ms(len(chunk))
            unit_frames: list[str] | None = None
            boundary = unit_boundary_ms(first_open_unit + frames_sent, unit_ms)
            if frames and chunk_end_ms + _EPSILON_MS >= boundary:
                index = min(frames_sent, len(frames) - 1)
                composite = (
                    stacked[frames_sent] if frames_sent < min(len(stacked), len(frames)) else None
                )
                unit_frames = [frames[index]] if composite is None else [frames[index], composite]
                frames_sent += 1
            if realtime:
                due = started_at + (chunk_end_ms - stream_start_ms) / 1000.0
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            await self.append_audio(chunk, video_frames=unit_frames, is_speech=is_speech)
        return frames_sent

    async def commit(
        self,
        final: bool = True,
        create_response: bool | None = None,
        is_speech: bool | None = None,
    ) -> str:
        """Send ``input_audio_buffer.commit`` and record :attr:`commit_sent_at_s`.

        Args:
            final: the commit ends the user's turn.
            create_response: sent as ``response_create`` when not ``None``.
            is_speech: ``False`` asks the server to treat the segment as non-speech (listen).
        """
        event: dict[str, Any] = {"type": "input_audio_buffer.commit", "final": final}
        if create_response is not None:
            event["response_create"] = create_response
        if is_speech is not None:
            event["is_speech"] = is_speech
        event_id = await self.send(event)
        self.commit_sent_at_s = time.monotonic()
        return event_id

    async def cancel_response(self, response_id: str | None = None) -> str:
        """Send ``response.cancel`` for the active response (or ``response_id``)."""
        event: dict[str, Any] = {"type": "response.cancel"}
        if response_id is not None:
            event["response_id"] = response_id
        return await self.send(event)

    async def clear_input(self) -> str:
        """Send ``input_audio_buffer.clear`` (drop uncommitted input audio)."""
        return await self.send({"type": "input_audio_buffer.clear"})

    async def barge_in(self) -> str:
        """Send ``barge_in`` (hard interrupt: new epoch, active response cancelled)."""
        return await self.send({"type": "barge_in"})

    async def ack_playback(
        self,
        response_id: str,
        item_id: str | None = None,
        played_ms: float = 0.0,
        truncate: bool = False,
        committed_ms: float | None = None,
    ) -> str:
        """Send ``playback.ack``: how much of a response's audio the user actually heard.

        Args:
            response_id: the response.
            item_id: its assistant item; default ``item_<response_id>``.
            played_ms: cumulative played output audio, ms (sent as int).
            truncate: ``True`` after a local stop (barge-in): history keeps only ``played_ms``.
            committed_ms: audio to commit to history, ms; default ``played_ms``.
        """
        event: dict[str, Any] = {
            "type": "playback.ack",
            "response_id": response_id,
            "item_id": item_id or f"item_{response_id}",
            "played_ms": int(played_ms),
            "committed_ms": int(played_ms if committed_ms is None else committed_ms),
        }
        if truncate:
            event["truncate"] = True
        return await self.send(event)

    # -- receiving ---------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Yield server events from the bounded queue until the session ends.

        Single consumer. Ends normally after ``session.closed`` or a client-side close.

        Raises:
            DuplexSessionClosedError: the session expired or the socket dropped unexpectedly.
        """
        while True:
            item = await self._queue.get()
            if item is _CLOSED:
                _put_drop_oldest(self._queue, _CLOSED)  # later calls end too
                if self._closed_expected:
                    return
                raise DuplexSessionClosedError(self.closed_reason or "closed")
            yield item

    async def wait_for(
        self,
        match: EventMatch,
        timeout_s: float = 30.0,
        *,
        after_index: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[str, Any]:
        """Wait for the first matching event at or after a position in :attr:`collector`.

        Does not consume from :meth:`events`; any number of waits may run at once.

        Args:
            match: an event type (beta or GA), several types, or a predicate on the event dict.
            timeout_s: seconds to wait.
            after_index: first ``collector.events`` index to examine; default: events arriving
                after the call (pass ``len(client.collector.events)`` taken *before* a send
                to also catch a reply that lands while the send is in flight).
            raise_on_error: raise on a non-matching ``error`` event seen while waiting.

        Returns:
            The matching event dict.

        Raises:
            DuplexProtocolError: an ``error`` event came first (when ``raise_on_error``).
            DuplexSessionClosedError: the session ended first.
            TimeoutError: nothing matched in time.
        """
        matches = _matcher(match)
        cursor = len(self.collector.events) if after_index is None else after_index
        deadline = time.monotonic() + timeout_s
        while True:
            arrival = self._arrival
            events = self.collector.events
            while cursor < len(events):
                event = events[cursor]
                cursor += 1
                if matches(event):
                    return event
                if raise_on_error and event_type(event) == "error":
                    raise DuplexProtocolError.from_event(event)
            if self.closed:
                raise DuplexSessionClosedError(self.closed_reason or "closed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout_s:.3f} s waiting for {match!r}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrival.wait(), remaining)

    async def _read_loop(self) -> None:
        reason = "connection closed"
        try:
            async for raw in self._ws:
                if not isinstance(raw, str):
                    continue
                try:
                    data = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                if isinstance(data, dict):
                    await self._dispatch(data)
                if self.closed:
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any socket failure ends the session below
            reason = f"connection lost: {exc}"
        self._finalize(reason, expected=self._closing)

    async def _dispatch(self, event: dict[str, Any]) -> None:
        event[RECEIVED_AT_KEY] = time.monotonic()
        self.collector.add(event)
        _put_drop_oldest(self._queue, event)
        kind = event_type(event)
        if kind in {"session.created", "session.updated", "session.resumed"}:
            self._adopt_session(event)
        if kind == "session.closed":
            self._finalize(str(event.get("reason") or "closed"), expected=True)
        elif kind == "session.expired":
            self._finalize(f"expired: {event.get('reason') or 'unknown'}", expected=False)
        self._notify()
        seq = event.get("server_event_seq")
        if self.auto_ack and isinstance(seq, int) and not isinstance(seq, bool) and not self.closed:
            with contextlib.suppress(Exception):
                await self._ws.send(
                    json.dumps({"type": "session.event_ack", "server_event_seq": seq})
                )

    def _adopt_session(self, event: dict[str, Any]) -> None:
        session = event.get("session")
        if not isinstance(session, dict):
            return
        self.session = session
        session_id = session.get("id") or session.get("session_id")
        if isinstance(session_id, str) and session_id:
            self.session_id = session_id
        capabilities = session.get("capabilities")
        if isinstance(capabilities, dict):
            self.capabilities = capabilities

    def _notify(self) -> None:
        arrival, self._arrival = self._arrival, asyncio.Event()
        arrival.set()

    def _finalize(self, reason: str, *, expected: bool) -> None:
        if self.closed:
            return
        self.closed_reason = reason
        self._closed_expected = expected
        self._closed.set()
        _put_drop_oldest(self._queue, _CLOSED)
        self._notify()
