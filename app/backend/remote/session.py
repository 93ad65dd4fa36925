"""RemoteSession: a duplex session served by a remote vLLM-Omni server (admitted by app.backend.duplex.manager).

They have the transport API of :class:`app.backend.duplex.session.DuplexSession` and
:class:`app.backend.duplex.manager.SessionManager`, so ``app/api/realtime.py`` and the WebRTC handler
drive them unchanged: ``submit(cmd)``, ``reject(err)``, ``next_event()``, ``closed``,
``describe()``, ``expire(reason)``, ``id``; ``open()`` / ``detach()`` / ``snapshot()``.

Admission (a pool of backends, :mod:`app.backend.remote.pool`): the session tries the backends of
``admission_order()`` in turn. What it sent before the chosen backend's ``session.created`` is kept
(at most :data:`JOURNAL_MAX` events); when a backend refuses with ``resource_exhausted`` or cannot be
reached, the next one gets the same events. Only when every candidate has refused does the client
see the (last) refusal; when none could be reached, ``remote_unavailable``. Once created, the
session stays on its backend for its whole life.

Per session, one task owns the remote link: it connects (``autostart=0``), then turns every
remote event into the typed event (:func:`app.backend.protocol.decoder.decode_event`), re-stamps
``server_event_seq`` with the local counter, replaces the remote session id with ours, and puts
it on the bounded outbox. A second task sends our client's commands in order as wire JSON; a
third acknowledges the remote's ``server_event_seq`` (coalesced) so its replay journal stays small.

Ending:
    * client ``session.close`` -> forwarded; the remote's ``session.closed`` ends it (or, after
      :data:`CLOSE_TIMEOUT_S` without one, a local ``session.closed{client_close}``).
    * remote refuses the session before ``session.created`` (``resource_exhausted`` with no other
      backend left to try, or any other code) -> the remote's ``error`` (same code) at once, then
      ``session.closed{reason: <code>}``; no backend accepting at all -> ``resource_exhausted``
      (every one full) or ``remote_unavailable`` (none healthy).
    * remote goes away (socket drops, or it ends the session with ``server_shutdown``) ->
      ``error{code: remote_unavailable, type: server_error}`` then
      ``session.closed{reason: remote_disconnected}``; that backend (only) is marked unhealthy.
    * remote unreachable at open -> ``error{remote_unavailable}`` then
      ``session.closed{reason: remote_unavailable}``.
    * idle TTL / transport gone / shutdown -> ``session.expired{reason}`` locally and a
      best-effort ``session.close`` to the remote. A detached session is ended at once: the
      proxy does not support resume, so keeping the remote's GPU slot for a grace period buys
      nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from app.backend.duplex.recorder import NO_RECORDER, WireTap
from app.backend.metrics import EngineMetrics
from app.backend.protocol import commands as C
from app.backend.protocol import events as E
from app.backend.protocol.decoder import EventDecodeError, RawEvent, decode_event
from app.backend.remote.links import Link, LinkUnavailable
from app.backend.remote.wire import AppendEncoder, session_update_wire
from app.media import MediaError

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0
"""How long a forwarded ``session.close`` may wait for the remote's ``session.closed``, seconds."""

GOODBYE_TIMEOUT_S = 3.0
"""How long a locally ended session waits for the remote to confirm its close, seconds."""

REMOTE_GONE_REASONS = frozenset({"server_shutdown", "shutdown", "transport_error"})
"""Remote ``session.closed|expired`` reasons that mean the remote server itself went away."""

REMOTE_UNAVAILABLE = "remote_unavailable"
"""Error code sent to our client when the remote cannot be reached or goes away."""

RESOURCE_EXHAUSTED = "resource_exhausted"
"""Error code of a capacity refusal (retryable; ``rate_limit_error``)."""

JOURNAL_MAX = 256
"""Most events kept from before admission for replay to the next backend; beyond it a refusal
passes through instead of spilling over."""


_CLOSING: set[asyncio.Task[None]] = set()
"""Links of refusing backends still closing (held so the tasks are not collected mid-way)."""


class Target(Protocol):
    """One backend a session can be placed on (:class:`~app.backend.remote.pool.Backend`, in-process)."""

    name: str
    remote_model: str | None

    async def new_link(self) -> Link:
        """A fresh, unopened link to a session there."""

    def session_opened(self) -> None:
        """A session starts connecting there."""

    def session_closed(self) -> None:
        """That session ended or moved on."""

    def admitted(self, seconds: float, caps: dict[str, Any] | None) -> None:
        """It created the session after ``seconds`` (``caps``: its announced capabilities)."""

    def refused(self) -> None:
        """It refused with ``resource_exhausted``."""

    def lost(self, why: str, *, during_admission: bool = False) -> None:
        """It could not be reached, or went away."""


class RemoteBackend(Protocol):
    """What sessions need from the engine (implemented by :class:`~app.backend.remote.engine.RemoteEngine`)."""

    ref_audio: str | None
    metrics: EngineMetrics

    def admission_order(self) -> list[Target]:
        """The backends a new session should try, best first (empty: none can take it)."""

    def no_backend(self) -> tuple[str, str]:
        """Why ``admission_order()`` was empty: ``(code, message)``."""

    def capabilities(self) -> dict[str, Any]:
        """The wire ``capabilities`` object our clients see."""

    def adopt_capabilities(self, caps: dict[str, Any]) -> None:
        """Remember the capabilities a remote session announced."""



class RemoteSession:
    """One duplex session proxied to a remote server.

    Args:
        session_id: our id (``duplex-<uuid>``); the remote's id is :attr:`remote_session_id`.
        backend: the engine (links, reference voice, capabilities, health).
        config: the deploy config (``duplex_session.inbox_size`` / ``output_buffer_events``).
        on_closed: called once with the session when it has closed (releases its slot).

    Attributes:
        epoch: latest epoch seen from the remote.
        remote_session_id: the remote's session id once ``session.created`` arrived.
        close_reason: why it ended, once closed.
        last_activity: ``time.monotonic()`` of the last client command.
        detached_at: set by the manager when our client's transport went away.
    """

    def __init__(self, session_id: str, backend: RemoteBackend, config: Any, on_closed: Any = None,
                 recorder: Callable[[str], Any] | None = None) -> None:
        dcfg = config.duplex_session
        self._rec = WireTap(recorder(session_id), config.limits) if recorder else NO_RECORDER  # --record-dir
        self.id = session_id
        self._backend = backend
        self._on_closed = on_closed
        self._out: asyncio.Queue[Any] = asyncio.Queue(maxsize=dcfg.inbox_size)
        self._outbox: asyncio.Queue[E.ServerEvent] = asyncio.Queue(maxsize=dcfg.output_buffer_events)
        self.closed = False
        self.close_reason: str | None = None
        self.epoch = 0
        self._seq = 0
        self.remote_session_id: str | None = None
        self._remote_session: dict[str, Any] = {}
        self._handshake_error: E.ErrorEvent | None = None
        self._close_requested = False
        self._close_forwarded = False
        self._remote_ended = False
        self._link: Link | None = None
        self.target: Target | None = None
        self._admitted = False
        self._journal: list[dict[str, Any]] | None = []
        self._send_lock = asyncio.Lock()
        self._link_ready = asyncio.Event()
        self._opened_at = 0.0
        self._appends = AppendEncoder()
        self._remote_seq = 0
        self._acked_seq = 0
        self._ack_wanted = asyncio.Event()
        self._done = asyncio.Event()
        self._run_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.last_activity = time.monotonic()
        self.detached_at: float | None = None

    # ------------------------------------------------------------------ transport API
    def start(self) -> None:
        """Start connecting to the remote (commands submitted meanwhile are queued)."""
        self._run_task = self._spawn(self._run(), f"remote-session-{self.id}")

    def submit(self, cmd: Any) -> None:
        """Queue one client command for the remote (never blocks).

        ``session.event_ack`` is dropped (it acknowledges *our* sequence numbers; the remote's are
        acknowledged by this session itself); ``session.resume`` is answered locally with
        ``unsupported_session_resume``. A full queue answers ``input_backpressure``.
        """
        self.last_activity = time.monotonic()
        if self.closed or isinstance(cmd, C.EventAck):
            return
        if isinstance(cmd, C.SessionResume):
            self._error("unsupported_session_resume", "session resume is not supported through this server",
                        event_id=cmd.event_id)
            return
        if isinstance(cmd, C.CloseSession):
            self._close_requested = True
        try:
            self._out.put_nowait(cmd)
        except asyncio.QueueFull:
            self._error("input_backpressure", "session inbox is full; slow down", event_id=cmd.event_id)
            return
        self._rec.command(cmd)

    def reject(self, err: C.ProtocolError) -> None:
        """Report a frame the transport could not decode (the session keeps going)."""
        self._error(err.code, err.message, event_id=err.event_id, param=err.param, error_type=err.error_type)

    def expire(self, reason: str) -> None:
        """End the session locally with ``session.expired{reason}`` and close it on the remote."""
        if self.closed:
            return
        self._close_requested = True
        self._finish(E.SessionExpired(epoch=self.epoch, session_id=self.id, reason=reason))

    async def next_event(self) -> E.ServerEvent:
        """The next outgoing event (``SessionClosed``/``SessionExpired`` is the last)."""
        return await self._outbox.get()

    async def wait_closed(self) -> None:
        """Wait until the session has ended and its remote link is closed."""
        await self._done.wait()

    def describe(self) -> dict[str, Any]:
        """The wire session object: the remote's, with our id (remote id in ``remote_session_id``)."""
        if self._remote_session:
            out = dict(self._remote_session)
        else:
            out = {"id": self.id, "object": "realtime.session", "turn_id": 0}
        out["state"] = "closed" if self.closed else out.get("state", "connecting")
        out["epoch"] = self.epoch
        out["capabilities"] = self._backend.capabilities()
        return out

    # ------------------------------------------------------------------ emission
    def _emit(self, ev: E.ServerEvent) -> None:
        if self.closed:
            return
        self._seq += 1
        ev.server_event_seq = self._seq
        self._rec.event(ev)
        try:
            self._outbox.put_nowait(ev)
        except asyncio.QueueFull:
            log.warning("remote session %s: output buffer overflow, closing", self.id)
            self._finish(E.SessionExpired(epoch=self.epoch, session_id=self.id, reason="output_overflow"), force=True)

    def _error(self, code: str, message: str, *, event_id: str | None = None, param: str | None = None,
               error_type: str = "invalid_request_error") -> None:
        self._emit(E.ErrorEvent(epoch=self.epoch, code=code, message=message, event_id=event_id, param=param,
                                error_type=error_type))

    def _finish(self, ev: E.SessionClosed, *, force: bool = False) -> None:
        """Emit the terminal event, mark closed, release the slot, wind the remote link down."""
        if self.closed:
            return
        self._seq += 1
        ev.server_event_seq = self._seq
        if force:
            while not self._outbox.empty():
                self._outbox.get_nowait()
        if not self._outbox.full():
            self._outbox.put_nowait(ev)
        self.closed = True
        self._rec.close(ev, self.describe())
        self.close_reason = ev.reason
        self._release_target()
        for t in list(self._tasks):
            if t is not self._run_task and t is not asyncio.current_task():
                t.cancel()
        if not self._remote_ended:
            self._spawn(self._goodbye(), f"remote-goodbye-{self.id}")
        if self._on_closed is not None:
            self._on_closed(self)

    def _release_target(self) -> None:
        if self.target is not None:
            self.target.session_closed()
            self.target = None

    def _remote_gone(self, why: str) -> None:
        if self.target is not None:
            self.target.lost(why)
        self._error(REMOTE_UNAVAILABLE, f"the remote model server went away: {why}", error_type="server_error")
        self._finish(E.SessionClosed(epoch=self.epoch, session_id=self.id, reason="remote_disconnected"))

    async def _close_watchdog(self) -> None:
        await asyncio.sleep(CLOSE_TIMEOUT_S)
        if not self.closed:
            log.warning("remote session %s: no session.closed from the remote after %.0f s", self.id, CLOSE_TIMEOUT_S)
            self._finish(E.SessionClosed(epoch=self.epoch, session_id=self.id, reason="client_close"))

    # ------------------------------------------------------------------ tasks
    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        t = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    async def _run(self) -> None:
        """Own the link: place the session on a backend, then receive until it ends."""
        try:
            link = await self._place()
            if link is None or self.closed:
                return
            while True:
                obj = await link.recv()
                if obj is None:
                    break
                self._on_remote(obj)
                if self.closed and self._remote_ended:
                    break  # the remote ended the session; do not wait for its socket to close
            self._remote_ended = True
            self._on_link_end(link.close_info)
        except Exception as exc:  # a bug here must not leave the client hanging
            log.exception("remote session %s: internal error", self.id)
            self._error("internal_error", f"{type(exc).__name__}: {exc}", error_type="server_error")
            self._finish(E.SessionClosed(epoch=self.epoch, session_id=self.id, reason="internal_error"))
        finally:
            if self._link is not None:
                await self._link.close()
            self._done.set()

    async def _place(self) -> Link | None:
        """Try the backends in admission order until one creates the session (see the module doc).

        Returns the admitted link, or the last candidate's link with its handshake still
        undecided (the receive loop handles it as a single backend would); ``None`` when the
        session has ended (refused everywhere, unreachable, closed locally).
        """
        order = self._backend.admission_order()
        if not order:
            code, message = self._backend.no_backend()
            self._remote_ended = True
            if code == RESOURCE_EXHAUSTED:  # retryable: a probe (every health_interval_s) may show room
                probe_s = getattr(self._backend.config.remote, "health_interval_s", 2.0)
                self._emit(E.ErrorEvent(epoch=self.epoch, code=code, message=message, error_type="rate_limit_error",
                                        retryable=True, retry_after_ms=int(probe_s * 1000)))
                self._backend.metrics.sessions_refused.labels("remote_capacity").inc()
            else:
                self._error(code, message, error_type="server_error")
            self._finish(E.SessionClosed(epoch=self.epoch, session_id=self.id, reason=code))
            return None
        refusal: E.ErrorEvent | None = None
        unreachable = "no backend could be reached"
        started = False
        for i, target in enumerate(order):
            last = i == len(order) - 1
            self.target = target
            target.session_opened()
            self._opened_at = time.perf_counter()
            try:
                link = await target.new_link()
                await link.open()
            except LinkUnavailable as exc:
                target.lost(str(exc), during_admission=True)
                self._release_target()
                unreachable = str(exc)
                if self._journal is None:
                    break
                continue
            if self.closed:  # ended locally while connecting: nothing was configured remotely
                self._link = link
                return None
            async with self._send_lock:
                self._link, self._remote_seq, self._acked_seq = link, 0, 0
                self._handshake_error = None
                try:
                    for wire in self._journal or ():
                        await link.send(self._retarget(wire))
                except LinkUnavailable:
                    pass  # the receive below sees the end
            self._link_ready.set()
            if not started:
                started = True
                self._spawn(self._send_loop(), f"remote-send-{self.id}")
                self._spawn(self._ack_loop(), f"remote-ack-{self.id}")
            if last or self._journal is None:
                return link
            outcome = await self._handshake(link)
            if outcome == "admitted":
                return link
            if self.closed:
                return None
            if outcome == "ended" and self._handshake_error is not None:  # refused for another reason
                self._remote_ended = True
                self._on_link_end(link.close_info)
                return None
            if outcome == "refused":
                target.refused()
                refusal = self._handshake_error
            else:
                target.lost(f"handshake ended ({link.close_info or 'no close frame'})", during_admission=True)
                unreachable = link.close_info or "the handshake ended"
            self._release_target()
            closing = asyncio.get_running_loop().create_task(link.close())  # not worth waiting for
            _CLOSING.add(closing)
            closing.add_done_callback(_CLOSING.discard)
        # every candidate refused or was unreachable
        self._remote_ended = True
        if refusal is not None:
            self._emit(refusal)
            self._backend.metrics.sessions_refused.labels(
                "remote_capacity" if refusal.code == RESOURCE_EXHAUSTED else refusal.code).inc()
            self._finish(E.SessionClosed(epoch=self.epoch, session_id=self.id, reason=refusal.code))
        else:
            self._error(REMOTE_UNAVAILABLE, f"the remote model server is unavailable: {unreachable}",
                        error_type="server_error")
            self._finish(E.SessionClosed(epoch=self.epoch, session_id=self.id, reason=REMOTE_UNAVAILABLE))
        return None

    async def _handshake(self, link: Link) -> str:
        """Receive until the backend decides: ``admitted`` | ``refused`` (``resource_exhausted``) | ``ended``.

        Events before the decision are handled as usual (other errors reach the client).
        """
        while not self._admitted:
            obj = await link.recv()
            if obj is None:
                return "ended"
            if obj.get("type") == "error" and self._error_code(obj) == RESOURCE_EXHAUSTED:
                try:
                    ev = decode_event(obj, epoch=self.epoch)
                except EventDecodeError:
                    ev = None
                if not isinstance(ev, E.ErrorEvent):
                    ev = E.ErrorEvent(epoch=self.epoch, code=RESOURCE_EXHAUSTED, message=str(obj)[:200],
                                      error_type="rate_limit_error")
                self._handshake_error = ev
                return "refused"
            self._on_remote(obj)
            if self.closed:
                return "ended"
        return "admitted"

    @staticmethod
    def _error_code(obj: dict[str, Any]) -> Any:
        err = obj.get("error")
        return err.get("code") if isinstance(err, dict) else obj.get("code")

    def _retarget(self, wire: dict[str, Any]) -> dict[str, Any]:
        """A journaled event for the current target (``session.update`` names its model)."""
        if wire.get("type") != "session.update" or self.target is None:
            return wire
        session = dict(wire.get("session") or {})
        if self.target.remote_model:
            session["model"] = self.target.remote_model
        else:
            session.pop("model", None)
        return {**wire, "session": session}

    def _on_link_end(self, info: str) -> None:
        if self.closed:
            return
        if self._close_requested:
            self._finish(E.SessionClosed(epoch=self.epoch, session_id=self.id, reason="client_close"))
        elif self.remote_session_id is None and self._handshake_error is not None:
            code = self._handshake_error.code
            if code == RESOURCE_EXHAUSTED:
                self._backend.metrics.sessions_refused.labels("remote_capacity").inc()
                if self.target is not None:
                    self.target.refused()
            self._finish(E.SessionClosed(epoch=self.epoch, session_id=self.id, reason=code))
        else:
            self._remote_gone(f"connection closed ({info or 'no close frame'})")

    async def _send_loop(self) -> None:
        await self._link_ready.wait()
        while True:
            cmd = await self._out.get()
            try:
                wire = self._to_wire(cmd)
            except MediaError as exc:
                self._error(exc.code, str(exc), event_id=getattr(cmd, "event_id", None))
                continue
            async with self._send_lock:
                if not self._admitted and self._journal is not None:
                    self._journal.append(wire)
                    if len(self._journal) > JOURNAL_MAX:
                        self._journal = None  # too much to replay: no spill-over for this session
                link = self._link
                assert link is not None
                try:
                    await link.send(wire)
                except LinkUnavailable:
                    if self._admitted:
                        return  # the receive side sees the end and reports it
                    continue  # before admission: the placer moves on and replays the journal
            if wire.get("type") == "session.close" and not self._close_forwarded:
                self._close_forwarded = True
                self._spawn(self._close_watchdog(), f"remote-close-{self.id}")

    def _to_wire(self, cmd: Any) -> dict[str, Any]:
        if isinstance(cmd, C.SessionUpdate):
            model = self.target.remote_model if self.target is not None else None
            return session_update_wire(cmd, ref_audio=self._backend.ref_audio, model=model)
        if isinstance(cmd, C.AppendArrays):
            return self._appends.encode(cmd)
        if isinstance(cmd, C.AudioAppend):
            self._appends.note_wire_append(cmd)
        return cmd.model_dump(exclude_none=True)

    async def _ack_loop(self) -> None:
        """Acknowledge the remote's events; bursts collapse into one ack of the latest seq."""
        while True:
            await self._ack_wanted.wait()
            self._ack_wanted.clear()
            seq, link = self._remote_seq, self._link
            if seq > self._acked_seq and link is not None:
                try:
                    await link.send({"type": "session.event_ack", "server_event_seq": seq})
                except LinkUnavailable:
                    if self._admitted:
                        return
                    continue
                self._acked_seq = seq

    async def _goodbye(self) -> None:
        """After a local end: tell the remote (``session.close``), give it a moment, close the link."""
        run = self._run_task
        link = self._link
        try:
            if link is not None and not self._close_forwarded and self.remote_session_id is not None:
                try:
                    await link.send({"type": "session.close"})
                except LinkUnavailable:
                    pass
            if run is not None and not run.done():
                try:
                    await asyncio.wait_for(asyncio.shield(run), GOODBYE_TIMEOUT_S)
                except (TimeoutError, asyncio.CancelledError):
                    pass
        finally:
            if link is not None:
                await link.close()
            if run is None:
                self._done.set()

    # ------------------------------------------------------------------ remote events
    def _on_remote(self, obj: dict[str, Any]) -> None:
        try:
            ev = decode_event(obj, epoch=self.epoch)
        except EventDecodeError as exc:
            log.warning("remote session %s: undecodable %r event passed through: %s", self.id, obj.get("type"), exc)
            seq = obj.get("server_event_seq")
            ev = RawEvent(epoch=self.epoch, server_event_seq=seq if isinstance(seq, int) else 0, data=obj)
        if ev.server_event_seq > self._remote_seq:
            self._remote_seq = ev.server_event_seq
            self._ack_wanted.set()
        if self.closed:
            return
        self.epoch = max(self.epoch, ev.epoch)
        if isinstance(ev, E.SessionClosed):  # SessionExpired too
            self._remote_ended = True
            if ev.reason in REMOTE_GONE_REASONS and not self._close_requested:
                self._remote_gone(f"remote ended the session ({ev.reason})")
            else:
                ev.session_id = self.id
                self._finish(ev)
            return
        if isinstance(ev, E.SessionCreated):  # SessionUpdated too
            self._adopt_session(ev)
        elif isinstance(ev, E.ErrorEvent) and self.remote_session_id is None:
            self._handshake_error = ev
            if ev.code == "resource_exhausted" and ev.retryable is None:
                ev.retryable = True  # vLLM-Omni marks capacity refusals retryable
        elif isinstance(ev, (E.AudioDelta, E.ResponseListen)) and ev.session_id:
            ev.session_id = self.id
        elif isinstance(ev, RawEvent) and self.remote_session_id and ev.data.get("session_id") == self.remote_session_id:
            ev.data = {**ev.data, "session_id": self.id}
        self._emit(ev)

    def _adopt_session(self, ev: E.SessionCreated) -> None:
        session = dict(ev.session)
        rid = session.get("id")
        if isinstance(rid, str) and rid and self.remote_session_id is None:
            self.remote_session_id = rid
        elif self.remote_session_id is None:
            self.remote_session_id = ""
        caps = session.get("capabilities")
        if isinstance(caps, dict):
            self._backend.adopt_capabilities(caps)
        if not self._admitted:
            self._admitted = True
            self._journal = None
            if self.target is not None:
                self.target.admitted(time.perf_counter() - self._opened_at, caps if isinstance(caps, dict) else None)
        session["id"] = self.id
        session["remote_session_id"] = self.remote_session_id
        session["capabilities"] = self._backend.capabilities()
        self._remote_session = session
        ev.session = session
