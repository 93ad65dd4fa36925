"""RemoteEngine: the engine of ``model_family: vllm_omni`` — sessions and chat served elsewhere.

Same surface as :class:`app.backend.engine.Engine` for the routes and the WebRTC handler
(``config``, ``metrics``, ``sessions``, ``start()``, ``stop()``, ``capabilities()``,
``health()``, ``started_at``), plus what only a front end has: :meth:`RemoteEngine.forward_chat`,
:meth:`RemoteEngine.list_models` and :meth:`RemoteEngine.serves_model`.

Two transports behind it:
    * remote vLLM-Omni servers (``remote.url``, or a pool in ``remote.urls``): one WebSocket per
      session, placed by :class:`~app.backend.remote.pool.BackendPool` (capacity-aware, sticky,
      spill-over on ``resource_exhausted``), httpx for chat (least-loaded backend), each
      backend's ``/health`` probed every ``remote.health_interval_s``;
    * vLLM-Omni in this process (no ``remote:``), see :mod:`app.backend.remote.inprocess`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from app.backend.duplex.manager import SessionManager
from app.backend.duplex.recorder import recorder_factory
from app.backend.engine import Engine, FamilyUnavailable
from app.backend.metrics import EngineMetrics
from app.backend.remote.chat import ForwardedResponse, error_response, forward_chat
from app.backend.remote.inprocess import (
    InProcessTarget,
    InProcessVllmOmni,
    require_vllm_omni,
)
from app.backend.remote.pool import Backend, BackendPool
from app.backend.remote.session import (
    GOODBYE_TIMEOUT_S,
    REMOTE_UNAVAILABLE,
    RESOURCE_EXHAUSTED,
    RemoteSession,
)
from app.backend.remote.wire import RefAudioError, load_ref_audio
from app.constants import (
    FIRST_UNIT_EXTRA_MS,
    INPUT_SAMPLE_RATE_HZ,
    OUTPUT_SAMPLE_RATE_HZ,
    UNIT_MS,
)

log = logging.getLogger(__name__)

LOCAL_CAPABILITY_OVERRIDES = ("supports_session_resume", "supports_session_lease")
"""Capabilities this front end does not proxy, forced to ``False`` whatever the remote says."""


def default_capabilities(max_sessions: int) -> dict[str, Any]:
    """Conservative capabilities before any remote session has announced its own (MiniCPM-o-like)."""
    return {
        "implementation_level": "model_native_duplex",
        "chunk_period_ms": UNIT_MS,
        "first_chunk_ms": UNIT_MS + FIRST_UNIT_EXTRA_MS,
        "supports_input_append": True,
        "supports_barge_in": True,
        "supports_session_resume": False,
        "supports_session_lease": False,
        "supports_multi_session": max_sessions > 1,
        "supports_audio_truncate": True,
        "supports_playback_ack": True,
        "supports_voice_cloning": True,
        "supports_vision": True,
        "requires_ref_audio": True,
        "input_modes": ["append_audio_chunk"],
        "signal_sources": ["model", "client"],
        "session_admission_mode": "engine_managed",
        "max_sessions": max_sessions,
        "input_sample_rate_hz": INPUT_SAMPLE_RATE_HZ,
        "output_sample_rate_hz": OUTPUT_SAMPLE_RATE_HZ,
        "languages": {"understands": ["zh", "en"], "speaks": ["zh", "en"], "voices": ["the reference voice"]},
    }


class RemoteEngine:
    """Everything behind the routes when the model runs in vLLM-Omni.

    Args:
        config: the deploy config (``model_family: vllm_omni``; ``remote`` set for remote
            server(s), unset for in-process vLLM-Omni).
        in_process: the in-process transport; built from ``config`` when ``remote`` is unset.

    Attributes:
        family: always ``None`` (no in-process model family).
        sessions: the :class:`SessionManager` of :class:`RemoteSession` once started; its slot
            count is the sum of the backends' caps (``urls[].max_sessions``, else
            ``duplex_session.max_sessions`` each).
        pool: the :class:`BackendPool` (``None`` in-process).
        ref_audio: ``remote.ref_audio`` as sent in ``session.update`` (data URL or http URL).

    Raises:
        FamilyUnavailable: from :meth:`start`, when ``remote.ref_audio`` cannot be read, or when
            the in-process path lacks vLLM / vLLM-Omni.
    """

    def __init__(self, config: Any, *, in_process: InProcessVllmOmni | None = None) -> None:
        self.config = config
        self.remote = config.remote
        self.family = None
        self.metrics = EngineMetrics()
        self.sessions: SessionManager | None = None
        self.started_at: float | None = None
        self.load_s: float | None = None
        self.in_process = in_process if in_process is not None or config.remote is not None else InProcessVllmOmni(config)
        self.pool: BackendPool | None = None
        self._local: InProcessTarget | None = None
        if self.remote is not None:
            self.pool = BackendPool(self.remote, config.duplex_session.max_sessions, self.metrics.registry)
        else:
            assert self.in_process is not None
            self._local = InProcessTarget(self.in_process)
        self.ref_audio: str | None = None
        self._caps: dict[str, Any] | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def base_url(self) -> str | None:
        """The first backend's http(s) base URL (``None`` in-process)."""
        return self.pool.backends[0].url if self.pool else None

    @property
    def remote_model(self) -> str | None:
        """The first backend's model name (``None`` until known, and in-process)."""
        return self.pool.backends[0].remote_model if self.pool else None

    async def start(self) -> None:
        """Load the reference voice, probe the backends (or start in-process vLLM-Omni), start sessions.

        Unreachable backends do not fail start-up: the server comes up reporting ``/health``
        unhealthy and recovers when a backend does.
        """
        t0 = time.perf_counter()
        slots = self.config.duplex_session.max_sessions
        if self.pool is not None:
            try:
                self.ref_audio = await asyncio.to_thread(load_ref_audio, self.remote.ref_audio)
            except RefAudioError as exc:
                raise FamilyUnavailable(str(exc)) from exc
            await self.pool.start()
            slots = sum(b.max_sessions for b in self.pool.backends)
        else:
            assert self.in_process is not None
            await self.in_process.start()
        dcfg = self.config.duplex_session.model_copy(update={"max_sessions": slots})
        recorder = recorder_factory(self.config)  # None unless recording.dir (serve --record-dir)
        self.sessions = SessionManager(
            self.config.model_copy(update={"duplex_session": dcfg}), self.metrics,
            lambda sid, on_closed: RemoteSession(sid, self, self.config, on_closed=on_closed, recorder=recorder),
            keep_detached=False,  # resume is not proxied: a dropped client ends its remote session
        )
        self.sessions.start()
        self.started_at = time.time()
        self.load_s = time.perf_counter() - t0
        log.info("remote engine ready: %s", "in-process" if self.pool is None else
                 ", ".join(f"{b.name}={b.state}" for b in self.pool.backends))

    async def stop(self) -> None:
        """Close every session (their remote ends too), stop probing, close the HTTP clients."""
        if self.sessions is not None:
            await self.sessions.stop(timeout_s=GOODBYE_TIMEOUT_S + 1.0)
        if self.pool is not None:
            await self.pool.stop()
        if self.in_process is not None:
            await self.in_process.stop()

    # ------------------------------------------------------------------ sessions' backend
    def admission_order(self) -> list[Any]:
        """Where a new session should go, best first (see :meth:`BackendPool.admission_order`)."""
        if self.pool is None:
            return [self._local] if self._local is not None else []
        return self.pool.admission_order()

    def no_backend(self) -> tuple[str, str]:
        """Why :meth:`admission_order` is empty: every backend full (``resource_exhausted``,
        retryable) or none healthy (``remote_unavailable``)."""
        if self.pool is None:
            return REMOTE_UNAVAILABLE, "the in-process vLLM-Omni engine is not available"
        if self.pool.any_accepting():
            self.pool.metrics.pool_refused.labels("full").inc()
            return RESOURCE_EXHAUSTED, (f"duplex_session_capacity_exhausted: every backend is full "
                                        f"(limit={self.pool.total_capacity()})")
        self.pool.metrics.pool_refused.labels("unavailable").inc()
        why = "; ".join(f"{b.name}: {'drained' if b.draining else b.error or 'unhealthy'}" for b in self.pool.backends)
        return REMOTE_UNAVAILABLE, f"the remote model server is unavailable: no backend accepts sessions ({why})"

    def capabilities(self) -> dict[str, Any]:
        """The wire ``capabilities``: the remote sessions' (resume/lease forced off; ``max_sessions``
        = the pool's slots, capped by one backend's own word) once one has been seen, else
        :func:`default_capabilities`."""
        local_max = self.pool.total_capacity() if self.pool else self.config.duplex_session.max_sessions
        if self._caps is None:
            return default_capabilities(local_max)
        caps = dict(self._caps)
        for key in LOCAL_CAPABILITY_OVERRIDES:
            caps[key] = False
        remote_max = caps.get("max_sessions")
        one = self.pool is None or len(self.pool) == 1
        caps["max_sessions"] = min(local_max, remote_max) if one and isinstance(remote_max, int) else local_max
        caps["supports_multi_session"] = bool(caps.get("supports_multi_session", True)) and caps["max_sessions"] > 1
        return caps

    def adopt_capabilities(self, caps: dict[str, Any]) -> None:
        """Remember what a remote session announced (used for later sessions and ``capabilities()``)."""
        self._caps = dict(caps)

    # ------------------------------------------------------------------ operator
    def set_draining(self, name: str, draining: bool) -> dict[str, Any]:
        """Drain a backend (no new sessions or chats; open sessions keep going) or undrain it.

        Returns:
            The backend's snapshot after the change.

        Raises:
            KeyError: no backend has that name or URL (or in-process: no pool).
        """
        if self.pool is None:
            raise KeyError(name)
        b = self.pool.get(name)
        if b.draining != draining:
            log.warning("backend %s (%s) %s by the operator", b.name, b.url, "drained" if draining else "undrained")
        b.draining = draining
        return b.snapshot()

    # ------------------------------------------------------------------ health and models
    async def refresh_health(self) -> None:
        """Probe every backend's ``/health`` now."""
        if self.pool is not None:
            await self.pool.probe_all()

    def health(self) -> dict[str, Any]:
        """Health for ``GET /health``: ``status`` ``ok`` iff some backend accepts sessions (healthy at
        its last probe, not found gone since, not drained); ``backends`` lists each one's state
        and sessions; ``remote`` describes the one backend (or counts the pool)."""
        out: dict[str, Any] = {"model_family": self.config.model_family}
        if self.pool is None:
            ok = self.in_process is not None and self.in_process.healthy()
            out["remote"] = {"transport": "in_process", "model": getattr(self.in_process, "model", None)}
        else:
            ok = self.pool.any_accepting()
            backends = self.pool.snapshot()
            if len(self.pool) == 1:
                b, snap = self.pool.backends[0], backends[0]
                out["remote"] = {"transport": "websocket", "url": b.url, "model": b.remote_model,
                                 "status_code": b.status_code, "error": b.error, "age_s": snap["age_s"],
                                 "detail": b.detail}
            else:
                out["remote"] = {"transport": "websocket", "backends": len(self.pool),
                                 "accepting": sum(b.accepting for b in self.pool.backends)}
            out["backends"] = backends
        out["sessions"] = self.sessions.snapshot() if self.sessions else None
        return {"status": "ok" if ok else "unhealthy", **out}

    async def models(self) -> dict[str, Any]:
        """What ``GET /v1/models`` answers: the accepting backends' lists merged (first seen first)
        when any answers, else our served name."""
        if self.pool is not None:
            bodies = await asyncio.gather(*(b.list_models() for b in self.pool.backends if b.accepting))
            seen: dict[str, Any] = {}
            for body in bodies:
                for m in (body or {}).get("data", []):
                    if isinstance(m, dict) and isinstance(m.get("id"), str):
                        seen.setdefault(m["id"], m)
            if seen:
                return {"object": "list", "data": list(seen.values())}
        return {"object": "list", "data": [{"id": self.config.server.served_model_name, "object": "model",
                                            "created": int(self.started_at or 0), "owned_by": "omni-duplex",
                                            "root": self.config.model_family}]}

    forwards_chat = True
    """Chat completions go to a backend (``forward_chat``)."""

    def _our_names(self) -> set[str | None]:
        srv = self.config.server
        names: set[str | None] = {None, "", srv.served_model_name, *srv.served_model_aliases, self.config.model_family}
        for b in self.pool.backends if self.pool else ():
            names.update({b.remote_model, b.configured_model, *b.remote_models})
        return names

    def serves_model(self, name: str | None) -> bool:
        """Whether a client's ``model`` names what this server serves: ours (aliases too), or any
        backend's name (each backend gets its own name for it, see :meth:`forward_chat`)."""
        return not name or name in self._our_names()

    # ------------------------------------------------------------------ chat
    async def forward_chat(self, body: dict[str, Any], stream: bool) -> ForwardedResponse:
        """Forward a chat completion to the least-loaded accepting backend (see :mod:`.chat`).

        ``model`` is replaced by that backend's name when the client named one we serve (or
        none). A backend that refuses the connection is marked unhealthy and the next one is
        tried; once a request has reached a backend it is not retried.

        Returns:
            ``(status, headers, body iterator)``: the backend's answer passed through, or a
            502 ``remote_unavailable`` / 504 ``remote_timeout`` OpenAI-style error; 501
            ``chat_unsupported`` for in-process vLLM-Omni (duplex only here).
        """
        if self.pool is None:
            return error_response(501, "chat completions are not available with in-process vLLM-Omni; "
                                       "use /v1/realtime or a remote server", "chat_unsupported",
                                  error_type="invalid_request_error")
        ours = self._our_names()
        tried: set[str] = set()
        last_error = "no backend accepts requests"
        while (b := self.pool.pick_for_chat(exclude=tried)) is not None:
            tried.add(b.name)
            payload = dict(body)
            if payload.get("model") in ours:
                if b.remote_model is None:
                    await b.resolve_model()
                if b.remote_model is not None:
                    payload["model"] = b.remote_model
            assert b.http is not None
            b.chats_in_flight += 1
            try:
                resp = await forward_chat(b.http, b.url + "/v1/chat/completions", payload, stream=stream,
                                          raise_connect_errors=True)
            except httpx.HTTPError as exc:
                b.chats_in_flight -= 1
                b.lost(f"{type(exc).__name__}: {exc}", during_admission=True)
                last_error = f"{b.name}: {type(exc).__name__}: {exc}"
                continue
            self.metrics.requests.labels(outcome="forwarded").inc()
            self.pool.metrics.chats.labels(b.name).inc()
            return ForwardedResponse(resp.status, resp.headers, _counted(resp.body, b))
        return error_response(502, f"the remote model server is unavailable: {last_error}", REMOTE_UNAVAILABLE)


async def _counted(body: AsyncIterator[bytes], backend: Backend) -> AsyncIterator[bytes]:
    """``body`` passed through; the backend's chats-in-flight count drops when it ends."""
    try:
        async for chunk in body:
            yield chunk
    finally:
        backend.chats_in_flight -= 1
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            await aclose()


def make_engine(config: Any, family: Any = None) -> Engine | RemoteEngine:
    """The engine for a deploy config.

    ``model_family: vllm_omni`` -> :class:`RemoteEngine` (remote server(s) when ``remote`` is set,
    else in-process vLLM-Omni, checked here so a missing install fails before the port opens);
    anything else -> :class:`app.backend.engine.Engine` with ``family``.

    Raises:
        FamilyUnavailable: ``vllm_omni`` without ``remote`` and vLLM / vLLM-Omni not importable
            (the message names the missing modules).
    """
    if config.model_family != "vllm_omni":
        return Engine(config, family)
    if config.remote is None:
        require_vllm_omni()
        return RemoteEngine(config, in_process=InProcessVllmOmni(config))
    return RemoteEngine(config)
