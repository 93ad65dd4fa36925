"""SessionManager: admission of duplex sessions, slot accounting and the reaper.

Admission is immediate: a session beyond ``duplex_session.max_sessions`` (or beyond
``max_sessions_per_client`` for its owner: an API key, or a client address when no key is
configured) is refused at once with :class:`CapacityExhausted` (code ``resource_exhausted``,
retryable, with a ``retry_after_ms`` hint), never queued. A slot comes back when the session
closes (``session.close``), when its transport has been gone for ``disconnect_grace_s``, when it
has been idle for ``idle_ttl_s``, or when it reaches ``max_session_s`` (``session.expired{reason:
"max_session_length"}``); the reaper checks every ``reaper_interval_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from app.backend.metrics import EngineMetrics

log = logging.getLogger(__name__)


SessionFactory = Callable[[str, Callable[[Any], None]], Any]
"""``factory(session_id, on_closed) -> session`` (DuplexSession or RemoteSession transport API)."""


class CapacityExhausted(Exception):
    """No free session slot. ``code`` is ``resource_exhausted``; ``limit`` the slot count.

    Retryable (as vLLM-Omni marks it): ``retry_after_ms`` is when a retry may find a slot, ms
    (see :meth:`SessionManager._retry_after_ms`). ``scope`` is ``"server"`` (every slot taken) or ``"client"`` (this key's or
    address's ``max_sessions_per_client``).
    """

    code = "resource_exhausted"
    retryable = True

    def __init__(self, limit: int, *, retry_after_ms: int = 5000, scope: str = "server") -> None:
        what = "duplex_session_capacity_exhausted" if scope == "server" else "duplex_session_client_limit"
        super().__init__(f"{what}: limit={limit}")
        self.limit = limit
        self.retry_after_ms = int(retry_after_ms)
        self.scope = scope


class SessionManager:
    """Owns every duplex session of the process (in-process or proxied to a remote).

    Args:
        config: the deploy config (``duplex_session`` limits).
        metrics: engine metrics (active/refused gauges).
        factory: builds a session: ``factory(session_id, on_closed)``; the session calls
            ``on_closed(session)`` once when it has ended (that frees its slot).
        keep_detached: keep a session whose transport dropped for ``disconnect_grace_s``
            (True), or end it at once (False: a proxied session, whose resume is not proxied).
    """

    def __init__(self, config: Any, metrics: EngineMetrics, factory: SessionFactory, *,
                 keep_detached: bool = True) -> None:
        self._cfg = config.duplex_session
        self._metrics = metrics
        self._factory = factory
        self._keep_detached = keep_detached
        self.sessions: dict[str, Any] = {}
        self._owner: dict[str, str | None] = {}
        self._opened_at: dict[str, float] = {}
        self._reaper: asyncio.Task[None] | None = None

    @property
    def max_sessions(self) -> int:
        """Slot count (``duplex_session.max_sessions``)."""
        return int(self._cfg.max_sessions)

    @property
    def active(self) -> int:
        """Sessions holding a slot."""
        return len(self.sessions)

    def open(self, owner: str | None = None, route: str = "realtime") -> Any:
        """Admit and start a new session.

        Args:
            owner: who asks (an API key's id or a client address; never the key itself), counted
                against ``duplex_session.max_sessions_per_client``; None = not counted.
            route: who opens it, ``realtime`` (the WebSocket) or ``page`` (the WebRTC handler); the
                session's ``route`` attribute and the label of its metrics.

        Raises:
            CapacityExhausted: every slot is taken, or ``owner`` holds its share already.
        """
        per_client = self._cfg.max_sessions_per_client
        if len(self.sessions) >= self.max_sessions:
            self._metrics.sessions_refused.labels("capacity").inc()
            raise CapacityExhausted(self.max_sessions, retry_after_ms=self._retry_after_ms())
        if owner is not None and per_client is not None and self.held_by(owner) >= per_client:
            self._metrics.sessions_refused.labels("client_limit").inc()
            raise CapacityExhausted(per_client, retry_after_ms=self._retry_after_ms(owner), scope="client")
        sid = f"duplex-{uuid.uuid4()}"
        s = self._factory(sid, self._release)
        s.route = route
        self.sessions[sid] = s
        self._owner[sid] = owner
        self._opened_at[sid] = time.monotonic()
        self._metrics.sessions_active.set(len(self.sessions))
        self._metrics.sessions_admitted.labels(route).inc()
        log.info("session %s opened (%s; %d of %d slots taken)", sid, route, len(self.sessions), self.max_sessions)
        s.start()
        return s

    def detach(self, session: Any, *, closed_by_client: bool = False) -> None:
        """The transport is gone: keep the slot for ``disconnect_grace_s`` (then reaped), or end now.

        Args:
            session: the session whose transport went.
            closed_by_client: the client closed its socket on purpose (a close frame): the session
                ends at once (``client_socket_closed``), since no session can be resumed here
                (``supports_session_resume`` is false) and the slot would only sit idle. A dropped
                socket, or a proxied session, is handled as before.
        """
        if session.closed:
            return
        session.detached_at = time.monotonic()
        if closed_by_client:
            session.expire("client_socket_closed")
        elif not self._keep_detached:
            session.expire("disconnect")

    def held_by(self, owner: str) -> int:
        """Sessions ``owner`` holds now."""
        return sum(1 for sid in self.sessions if self._owner.get(sid) == owner)

    def _retry_after_ms(self, owner: str | None = None) -> int:
        """When to retry, ms: with ``max_session_s``, when the soonest-ending session (of ``owner``, if
        given) is sure to have been reaped; otherwise one reaper interval (a polite hint only)."""
        tick = self._cfg.reaper_interval_s * 1000.0
        hint = tick
        if self._cfg.max_session_s is not None:
            now = time.monotonic()
            ends = [self._cfg.max_session_s - (now - t) for sid, t in self._opened_at.items()
                    if owner is None or self._owner.get(sid) == owner]
            if ends:
                hint = max(0.0, min(ends)) * 1000.0 + tick
        return max(100, int(hint))

    def _release(self, session: Any) -> None:
        self._owner.pop(session.id, None)
        opened = self._opened_at.pop(session.id, None)
        if self.sessions.pop(session.id, None) is not None:
            reason = getattr(session, "close_reason", None) or "unknown"
            self._metrics.sessions_active.set(len(self.sessions))
            self._metrics.sessions_closed.labels(reason).inc()
            log.info("session %s closed (%s) after %.1f s; %d of %d slots taken", session.id, reason,
                     time.monotonic() - opened if opened is not None else 0.0, len(self.sessions), self.max_sessions)

    def start(self) -> None:
        """Start the reaper."""
        self._reaper = asyncio.get_running_loop().create_task(self._reap_forever(), name="session-reaper")

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Expire every session (``server_shutdown``), wait up to ``timeout_s`` for them, stop the reaper."""
        if self._reaper is not None:
            self._reaper.cancel()
        live = list(self.sessions.values())
        for s in live:
            s.expire("server_shutdown")
        if live:
            await asyncio.wait([asyncio.ensure_future(s.wait_closed()) for s in live], timeout=timeout_s)

    def reap(self, now: float | None = None) -> list[str]:
        """Expire detached-past-grace, idle and too-long sessions; returns the ids expired."""
        now = time.monotonic() if now is None else now
        longest = self._cfg.max_session_s
        out = []
        for s in list(self.sessions.values()):
            if longest is not None and now - self._opened_at.get(s.id, now) >= longest:
                s.expire("max_session_length")
                out.append(s.id)
            elif s.detached_at is not None and now - s.detached_at >= self._cfg.disconnect_grace_s:
                s.expire("disconnect_grace_expired")
                out.append(s.id)
            elif self._cfg.idle_ttl_s is not None and now - s.last_activity >= self._cfg.idle_ttl_s:
                s.expire("idle_ttl_expired")
                out.append(s.id)
        return out

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self._cfg.reaper_interval_s)
            try:
                self.reap()
            except Exception:  # the reaper must survive a bad session
                log.exception("reaper failed")

    def snapshot(self) -> dict[str, Any]:
        """Counts for /health."""
        return {"active": self.active, "max_sessions": self.max_sessions}
