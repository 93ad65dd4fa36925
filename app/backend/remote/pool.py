"""BackendPool: the vLLM-Omni servers behind one front — health, capacity, admission order, drain.

One :class:`Backend` per entry of ``remote.urls`` (or the one ``remote.url``). Each is probed on
``GET /health`` every ``remote.health_interval_s``; a backend is *accepting* when its last probe
answered 200, no session has since found it gone, and it is not drained.

Capacity is the backend's own word where it gives one, our count where it does not:

* ``capacity`` = the smallest of ``urls[].max_sessions`` (else ``duplex_session.max_sessions`` of
  this front, the per-backend default), the ``sessions.max_sessions`` its ``/health`` reports
  (this app as a backend does; vLLM-Omni answers an empty 200), and the ``max_sessions`` in the
  ``capabilities`` of a session it created;
* ``used`` = the ``sessions.active`` its last ``/health`` reported plus the sessions we opened
  there since (floored at our own open count) — several fronts may share one pool, so our count
  is only a hint;
* a ``resource_exhausted`` refusal marks it full until a probe shows room or one of our sessions
  there ends.

:meth:`BackendPool.admission_order` ranks accepting backends by free slots times weight
(ties: fewer of our sessions per weight, then config order); ones our estimate calls full (not by our own count) go last,
since their word may have changed. Chat goes to :meth:`BackendPool.pick_for_chat`: the accepting
backend with the lowest (sessions + chats in flight) / capacity / weight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.backend.remote.links import WebSocketLink, realtime_url

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0
"""Limit for one ``/health`` or ``/v1/models`` probe, seconds."""

_ADMISSION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class PoolMetrics:
    """Per-backend Prometheus series (label ``backend`` = :attr:`Backend.name`), on the engine's registry.

    Attributes:
        admissions: session admission attempts by ``outcome`` (``admitted``, ``refused`` =
            ``resource_exhausted`` from the backend, ``unavailable`` = could not connect, or it
            closed the handshake).
        admission_s: link open -> the backend's ``session.created``, seconds.
        lost: sessions ended because their backend went away.
        chats: chat completions forwarded.
        pool_refused: sessions refused because every accepting backend was full (or none accepted).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.up = Gauge("omni_backend_up", "Backend healthy at the last probe (1) or not (0)", ["backend"], registry=r)
        self.draining = Gauge("omni_backend_draining", "Backend drained by the operator (1)", ["backend"], registry=r)
        self.sessions = Gauge("omni_backend_sessions", "Our open sessions on the backend", ["backend"], registry=r)
        self.capacity = Gauge("omni_backend_capacity", "Session slots of the backend (its word or our cap)",
                              ["backend"], registry=r)
        self.free = Gauge("omni_backend_free_slots", "Estimated free session slots", ["backend"], registry=r)
        self.chats_in_flight = Gauge("omni_backend_chats_in_flight", "Chat completions in flight", ["backend"],
                                     registry=r)
        self.admissions = Counter("omni_backend_admissions", "Session admission attempts", ["backend", "outcome"],
                                  registry=r)
        self.admission_s = Histogram("omni_backend_admission_seconds", "Link open to session.created",
                                     ["backend"], buckets=_ADMISSION_BUCKETS, registry=r)
        self.lost = Counter("omni_backend_sessions_lost", "Sessions ended because the backend went away",
                            ["backend"], registry=r)
        self.chats = Counter("omni_backend_chat_requests", "Chat completions forwarded", ["backend"], registry=r)
        self.pool_refused = Counter("omni_pool_sessions_refused", "Sessions refused: every backend full or down",
                                    ["reason"], registry=r)

    def watch(self, b: Backend) -> None:
        """Export ``b``'s live state (read at scrape time)."""
        self.up.labels(b.name).set_function(lambda: float(b.healthy))
        self.draining.labels(b.name).set_function(lambda: float(b.draining))
        self.sessions.labels(b.name).set_function(lambda: float(b.open_sessions))
        self.capacity.labels(b.name).set_function(lambda: float(b.capacity()))
        self.free.labels(b.name).set_function(lambda: float(b.free_slots()))
        self.chats_in_flight.labels(b.name).set_function(lambda: float(b.chats_in_flight))


class Backend:
    """One server of the pool and what this front knows of it.

    Args:
        cfg: its ``remote.urls`` entry (:class:`app.config.RemoteBackendConfig`).
        remote: the ``remote`` section (defaults for ``api_key``, ``model``, ``timeout_s``).
        default_max_sessions: the per-backend cap when ``cfg.max_sessions`` is unset.
        metrics: the pool's series.

    Attributes:
        name: label (``cfg.name`` or ``host:port``).
        remote_model: the name it serves its model under (configured, else the first id on its
            ``/v1/models``; ``None`` until known).
        healthy: its last probe answered 200 and no session has since found it gone.
        draining: drained by the operator (no new sessions or chats; open ones keep going).
        open_sessions: our sessions holding (or connecting to) a session there.
        chats_in_flight: our chat completions streaming from it.
    """

    def __init__(self, cfg: Any, remote: Any, default_max_sessions: int, metrics: PoolMetrics) -> None:
        self.cfg = cfg
        self.url: str = cfg.url
        self.name: str = cfg.name or urlsplit(cfg.url).netloc
        self.weight: float = float(cfg.weight)
        self.api_key: str | None = cfg.api_key or remote.api_key
        self.configured_model: str | None = cfg.model or remote.model
        self.remote_model: str | None = self.configured_model
        self.remote_models: list[str] = []
        self.timeout_s: float = float(remote.timeout_s)
        self.max_sessions: int = int(cfg.max_sessions or default_max_sessions)
        self.draining: bool = bool(cfg.drain)
        self.healthy = False
        self.error: str | None = "not checked yet"
        self.status_code: int | None = None
        self.detail: Any = None
        self.checked_at: float | None = None
        self.open_sessions = 0
        self.chats_in_flight = 0
        self.reported_active: int | None = None
        self.reported_max: int | None = None
        self.caps_max: int | None = None
        self.full = False
        self._opened_since_probe = 0
        self._metrics = metrics
        self.http: httpx.AsyncClient | None = None

    # ------------------------------------------------------------------ capacity
    def capacity(self) -> int:
        """Session slots: the smallest of our cap and what the backend said (see the module doc)."""
        return min(v for v in (self.max_sessions, self.reported_max, self.caps_max) if v is not None)

    def used(self) -> int:
        """Estimated sessions there (its report plus what we opened since; at least our own)."""
        if self.reported_active is None:
            return self.open_sessions
        return max(self.open_sessions, self.reported_active + self._opened_since_probe)

    def free_slots(self) -> int:
        """Estimated free slots (0 after a ``resource_exhausted`` refusal until it shows room)."""
        return 0 if self.full else max(0, self.capacity() - self.used())

    @property
    def accepting(self) -> bool:
        """Healthy and not drained: may get new sessions and chats."""
        return self.healthy and not self.draining

    @property
    def state(self) -> str:
        """``draining`` | ``healthy`` | ``unhealthy`` (drain wins: an operator's word)."""
        if self.draining:
            return "draining"
        return "healthy" if self.healthy else "unhealthy"

    # ------------------------------------------------------------------ sessions' hooks (the Target API)
    def headers(self) -> dict[str, str]:
        """Request headers for this backend (``Authorization`` when it has a key)."""
        h = {"accept-encoding": "identity"}
        if self.api_key:
            h["authorization"] = f"Bearer {self.api_key}"
        return h

    async def new_link(self) -> WebSocketLink:
        """An unopened WebSocket link to this backend's ``/v1/realtime?duplex=1``."""
        if self.remote_model is None:
            await self.resolve_model()
        auth = {"authorization": f"Bearer {self.api_key}"} if self.api_key else None
        return WebSocketLink(realtime_url(self.url, self.remote_model), headers=auth,
                             open_timeout_s=min(self.timeout_s, 10.0))

    def session_opened(self) -> None:
        """One of our sessions starts connecting here."""
        self.open_sessions += 1
        self._opened_since_probe += 1

    def session_closed(self) -> None:
        """One of our sessions here ended (or moved on before admission): its slot is free again."""
        self.open_sessions = max(0, self.open_sessions - 1)
        self._opened_since_probe -= 1
        self.full = False

    def admitted(self, seconds: float, caps: dict[str, Any] | None) -> None:
        """The backend created our session after ``seconds``; ``caps`` = its announced capabilities."""
        self._metrics.admissions.labels(self.name, "admitted").inc()
        self._metrics.admission_s.labels(self.name).observe(seconds)
        if caps and isinstance(caps.get("max_sessions"), int) and caps["max_sessions"] > 0:
            self.caps_max = caps["max_sessions"]

    def refused(self) -> None:
        """The backend answered ``resource_exhausted``: count it full until it shows room."""
        self.full = True
        self._metrics.admissions.labels(self.name, "refused").inc()

    def lost(self, why: str, *, during_admission: bool = False) -> None:
        """A session found the backend gone: unhealthy now (the next good probe brings it back)."""
        if self.healthy:
            log.warning("backend %s (%s) lost: %s", self.name, self.url, why)
        self.healthy = False
        self.error = why
        self.checked_at = time.monotonic()
        if during_admission:
            self._metrics.admissions.labels(self.name, "unavailable").inc()
        else:
            self._metrics.lost.labels(self.name).inc()

    # ------------------------------------------------------------------ probes
    async def probe(self) -> None:
        """``GET /health`` now: healthy iff 200; reads ``sessions.{active,max_sessions}`` when given."""
        assert self.http is not None
        was = self.healthy
        try:
            r = await self.http.get(self.url + "/health", timeout=PROBE_TIMEOUT_S)
            try:
                detail = r.json() if r.content else None
            except ValueError:
                detail = r.text[:200]
            self.healthy, self.status_code, self.error, self.detail = r.status_code == 200, r.status_code, None, detail
            sessions = detail.get("sessions") if isinstance(detail, dict) else None
            if isinstance(sessions, dict):
                active, cap = sessions.get("active"), sessions.get("max_sessions")
                self.reported_active = active if isinstance(active, int) and active >= 0 else None
                self.reported_max = cap if isinstance(cap, int) and cap > 0 else None
                self._opened_since_probe = 0
                if self.reported_active is not None and self.reported_max is not None \
                        and self.reported_active < self.reported_max:
                    self.full = False
            else:
                self.reported_active = self.reported_max = None
                if self.healthy:
                    self.full = False  # no word on sessions: let the next admission ask
        except httpx.HTTPError as exc:
            self.healthy, self.status_code, self.error = False, None, f"{type(exc).__name__}: {exc}"
        self.checked_at = time.monotonic()
        if was != self.healthy:
            log.log(logging.INFO if self.healthy else logging.WARNING, "backend %s (%s) is now %s",
                    self.name, self.url, self.state)
        if self.healthy and self.remote_model is None:
            await self.resolve_model()

    async def list_models(self) -> dict[str, Any] | None:
        """Its ``GET /v1/models`` body (OpenAI ``list``), or ``None`` when unreachable or malformed."""
        if self.http is None:
            return None
        try:
            r = await self.http.get(self.url + "/v1/models", timeout=PROBE_TIMEOUT_S)
            body = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            return None
        self.remote_models = [m["id"] for m in body["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        return body

    async def resolve_model(self) -> None:
        """Learn its model name from ``/v1/models`` when none is configured."""
        if await self.list_models() is not None and self.configured_model is None and self.remote_models:
            self.remote_model = self.remote_models[0]

    def snapshot(self) -> dict[str, Any]:
        """This backend for ``/health`` and the admin routes."""
        return {
            "name": self.name, "url": self.url, "state": self.state, "healthy": self.healthy,
            "draining": self.draining, "weight": self.weight, "model": self.remote_model,
            "sessions": {"ours": self.open_sessions, "reported_active": self.reported_active,
                         "capacity": self.capacity(), "free": self.free_slots(), "full": self.full},
            "chats_in_flight": self.chats_in_flight, "status_code": self.status_code, "error": self.error,
            "age_s": None if self.checked_at is None else round(time.monotonic() - self.checked_at, 2),
        }


class BackendPool:
    """The backends of ``remote`` and the probe task.

    Args:
        remote: the ``remote`` config section.
        default_max_sessions: per-backend cap when ``urls[].max_sessions`` is unset.
        registry: where the per-backend series go (the engine's).
    """

    def __init__(self, remote: Any, default_max_sessions: int, registry: CollectorRegistry) -> None:
        self.remote = remote
        self.metrics = PoolMetrics(registry)
        self.backends = [Backend(cfg, remote, default_max_sessions, self.metrics) for cfg in remote.backends()]
        for b in self.backends:
            self.metrics.watch(b)
        self._poller: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self.backends)

    async def start(self) -> None:
        """Open each backend's HTTP client, probe all at once, then keep probing in the background."""
        for b in self.backends:
            b.http = httpx.AsyncClient(timeout=httpx.Timeout(b.timeout_s, connect=10.0), headers=b.headers(),
                                       trust_env=False)
        await self.probe_all()
        self._poller = asyncio.get_running_loop().create_task(self._poll(), name="pool-health")

    async def stop(self) -> None:
        """Stop probing and close the HTTP clients."""
        if self._poller is not None:
            self._poller.cancel()
        for b in self.backends:
            if b.http is not None:
                await b.http.aclose()

    async def probe_all(self) -> None:
        """Probe every backend concurrently."""
        await asyncio.gather(*(b.probe() for b in self.backends), return_exceptions=True)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.remote.health_interval_s)
            try:
                await self.probe_all()
            except Exception:  # the poller must survive anything
                log.exception("backend health probe failed")

    # ------------------------------------------------------------------ choice
    def get(self, name: str) -> Backend:
        """The backend called ``name`` (or with that URL).

        Raises:
            KeyError: no such backend.
        """
        for b in self.backends:
            if name in (b.name, b.url):
                return b
        raise KeyError(name)

    def admission_order(self) -> list[Backend]:
        """Accepting backends in the order a new session should try them (see the module doc).

        Skipped: unhealthy, drained, full by our own count (our cap), and refused since their
        last sign of room.
        """
        ranked = []
        for i, b in enumerate(self.backends):
            if not b.accepting or b.full or b.open_sessions >= b.capacity():
                continue
            free = b.free_slots()
            ranked.append((free <= 0, -free * b.weight, b.open_sessions / b.weight, i, b))
        ranked.sort(key=lambda t: t[:4])
        return [t[-1] for t in ranked]

    def pick_for_chat(self, exclude: set[str] | frozenset[str] = frozenset()) -> Backend | None:
        """The accepting backend with the least load per slot and weight, not named in ``exclude``
        (``None``: none left)."""
        live = [b for b in self.backends if b.accepting and b.name not in exclude]
        if not live:
            return None
        return min(live, key=lambda b: ((b.open_sessions + b.chats_in_flight) / max(b.capacity(), 1) / b.weight,
                                        self.backends.index(b)))

    def any_accepting(self) -> bool:
        """Whether any backend is healthy and not drained."""
        return any(b.accepting for b in self.backends)

    def total_capacity(self) -> int:
        """Sum of the accepting backends' slots (all backends' when none accepts)."""
        live = [b for b in self.backends if b.accepting] or self.backends
        return sum(b.capacity() for b in live)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every backend's :meth:`Backend.snapshot`."""
        return [b.snapshot() for b in self.backends]
