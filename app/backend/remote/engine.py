"""RemoteEngine: the engine of ``model_family: vllm_omni`` — sessions and chat served elsewhere.

Same surface as :class:`app.backend.engine.Engine` for the routes and the WebRTC handler
(``config``, ``metrics``, ``sessions``, ``start()``, ``stop()``, ``capabilities()``,
``health()``, ``started_at``), plus what only a front end has: :meth:`RemoteEngine.forward_chat`,
:meth:`RemoteEngine.list_models` and :meth:`RemoteEngine.serves_model`.

Two transports behind it:
    * a remote vLLM-Omni server (``remote.url``): one WebSocket per session, httpx for chat,
      ``/health`` polled every :data:`HEALTH_TTL_S`;
    * vLLM-Omni in this process (no ``remote:``), see :mod:`app.backend.remote.inprocess`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx

from app.backend.duplex.manager import SessionManager
from app.backend.engine import Engine, FamilyUnavailable
from app.backend.metrics import EngineMetrics
from app.backend.remote.chat import ForwardedResponse, error_response, forward_chat
from app.backend.remote.inprocess import InProcessVllmOmni, require_vllm_omni
from app.backend.remote.links import Link, LinkUnavailable, WebSocketLink, realtime_url
from app.backend.remote.session import GOODBYE_TIMEOUT_S, RemoteSession
from app.backend.remote.wire import RefAudioError, load_ref_audio
from app.constants import (
    FIRST_UNIT_EXTRA_MS,
    INPUT_SAMPLE_RATE_HZ,
    OUTPUT_SAMPLE_RATE_HZ,
    UNIT_MS,
)

log = logging.getLogger(__name__)

HEALTH_TTL_S = 2.0
"""How often the remote's ``/health`` is polled (the cached answer is at most this old), seconds."""

HEALTH_TIMEOUT_S = 2.0
"""Limit for one ``/health`` probe, seconds."""

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
    }


class RemoteEngine:
    """Everything behind the routes when the model runs in vLLM-Omni.

    Args:
        config: the deploy config (``model_family: vllm_omni``; ``remote`` set for a remote
            server, unset for in-process vLLM-Omni).
        in_process: the in-process transport; built from ``config`` when ``remote`` is unset.

    Attributes:
        family: always ``None`` (no in-process model family).
        sessions: the :class:`SessionManager` of :class:`RemoteSession` once started.
        remote_model: the remote's model name (``remote.model``, else the first id the remote
            lists on ``/v1/models``; ``None`` until known).
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
        self.remote_model: str | None = self.remote.model if self.remote else None
        self.remote_models: list[str] = []
        self.ref_audio: str | None = None
        self._http: httpx.AsyncClient | None = None
        self._caps: dict[str, Any] | None = None
        self._health: dict[str, Any] = {"ok": False, "error": "not checked yet", "checked_at": None}
        self._poller: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def base_url(self) -> str | None:
        """The remote server's http(s) base URL (``None`` in-process)."""
        return self.remote.url if self.remote else None

    def _headers(self) -> dict[str, str]:
        headers = {"accept-encoding": "identity"}
        if self.remote is not None and self.remote.api_key:
            headers["authorization"] = f"Bearer {self.remote.api_key}"
        return headers

    async def start(self) -> None:
        """Load the reference voice, probe the remote (or start in-process vLLM-Omni), start sessions.

        An unreachable remote does not fail start-up: the server comes up reporting
        ``/health`` unhealthy and recovers when the remote does.
        """
        t0 = time.perf_counter()
        if self.remote is not None:
            try:
                self.ref_audio = await asyncio.to_thread(load_ref_audio, self.remote.ref_audio)
            except RefAudioError as exc:
                raise FamilyUnavailable(str(exc)) from exc
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(self.remote.timeout_s, connect=10.0),
                                           headers=self._headers(), trust_env=False)
            await self.refresh_health()
            await self._resolve_model()
            self._poller = asyncio.get_running_loop().create_task(self._poll_health(), name="remote-health")
        else:
            assert self.in_process is not None
            await self.in_process.start()
        self.sessions = SessionManager(
            self.config, self.metrics,
            lambda sid, on_closed: RemoteSession(sid, self, self.config, on_closed=on_closed),
            keep_detached=False,  # resume is not proxied: a dropped client ends its remote session
        )
        self.sessions.start()
        self.started_at = time.time()
        self.load_s = time.perf_counter() - t0
        log.info("remote engine ready: %s model=%s healthy=%s", self.base_url or "in-process", self.remote_model,
                 self._health.get("ok"))

    async def stop(self) -> None:
        """Close every session (their remote ends too), stop polling, close the HTTP client."""
        if self.sessions is not None:
            await self.sessions.stop(timeout_s=GOODBYE_TIMEOUT_S + 1.0)
        if self._poller is not None:
            self._poller.cancel()
        if self._http is not None:
            await self._http.aclose()
        if self.in_process is not None:
            await self.in_process.stop()

    # ------------------------------------------------------------------ sessions' backend
    async def new_link(self) -> Link:
        """A fresh link for one session (WebSocket to the remote, or in-process).

        Raises:
            LinkUnavailable: in-process engine not started.
        """
        if self.remote is None:
            try:
                return self.in_process.new_link()  # type: ignore[union-attr]
            except RuntimeError as exc:
                raise LinkUnavailable(str(exc)) from exc
        if self.remote_model is None:
            await self._resolve_model()
        url = realtime_url(self.remote.url, self.remote_model)
        auth = {k: v for k, v in self._headers().items() if k == "authorization"}
        return WebSocketLink(url, headers=auth, open_timeout_s=min(self.remote.timeout_s, 10.0))

    def capabilities(self) -> dict[str, Any]:
        """The wire ``capabilities``: the remote session's (resume/lease forced off, ``max_sessions``
        capped by ours) once one has been seen, else :func:`default_capabilities`."""
        local_max = self.config.duplex_session.max_sessions
        if self._caps is None:
            return default_capabilities(local_max)
        caps = dict(self._caps)
        for key in LOCAL_CAPABILITY_OVERRIDES:
            caps[key] = False
        remote_max = caps.get("max_sessions")
        caps["max_sessions"] = min(local_max, remote_max) if isinstance(remote_max, int) else local_max
        caps["supports_multi_session"] = bool(caps.get("supports_multi_session", True)) and caps["max_sessions"] > 1
        return caps

    def adopt_capabilities(self, caps: dict[str, Any]) -> None:
        """Remember what a remote session announced (used for later sessions and ``capabilities()``)."""
        self._caps = dict(caps)

    def remote_lost(self, why: str) -> None:
        """A session found the remote gone: report unhealthy now (the poller notices recovery)."""
        if self.remote is not None:
            self._health = {"ok": False, "status_code": None, "error": why, "checked_at": time.monotonic()}

    # ------------------------------------------------------------------ health and models
    async def refresh_health(self) -> dict[str, Any]:
        """Probe the remote's ``/health`` now and cache the result (``ok`` = HTTP 200)."""
        assert self._http is not None and self.remote is not None
        try:
            r = await self._http.get(self.remote.url + "/health", timeout=HEALTH_TIMEOUT_S)
            try:
                detail = r.json() if r.content else None
            except ValueError:
                detail = r.text[:200]
            self._health = {"ok": r.status_code == 200, "status_code": r.status_code, "error": None,
                            "detail": detail, "checked_at": time.monotonic()}
        except httpx.HTTPError as exc:
            self._health = {"ok": False, "status_code": None, "error": f"{type(exc).__name__}: {exc}",
                            "checked_at": time.monotonic()}
        return self._health

    async def _poll_health(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_TTL_S)
            try:
                was_ok = self._health.get("ok")
                h = await self.refresh_health()
                if h["ok"] != was_ok:
                    log.warning("remote %s is now %s", self.remote.url, "healthy" if h["ok"] else "unhealthy")
                if h["ok"] and self.remote_model is None:
                    await self._resolve_model()
            except Exception:  # the poller must survive anything
                log.exception("remote health poll failed")

    def health(self) -> dict[str, Any]:
        """Health for ``GET /health``: ``status`` ``ok`` iff the remote's ``/health`` answered 200
        at the last probe (at most :data:`HEALTH_TTL_S` old) and no session has since found it gone."""
        if self.remote is None:
            ok = self.in_process is not None and self.in_process.healthy()
            remote: dict[str, Any] = {"transport": "in_process", "model": getattr(self.in_process, "model", None)}
        else:
            h = self._health
            ok = bool(h.get("ok"))
            checked = h.get("checked_at")
            remote = {
                "transport": "websocket",
                "url": self.remote.url,
                "model": self.remote_model,
                "status_code": h.get("status_code"),
                "error": h.get("error"),
                "age_s": None if checked is None else round(time.monotonic() - checked, 2),
                "detail": h.get("detail"),
            }
        return {
            "status": "ok" if ok else "unhealthy",
            "model_family": self.config.model_family,
            "remote": remote,
            "sessions": self.sessions.snapshot() if self.sessions else None,
        }

    async def list_models(self) -> dict[str, Any] | None:
        """The remote's ``GET /v1/models`` body (OpenAI ``list``), or ``None`` when unreachable/bad."""
        if self._http is None or self.remote is None:
            return None
        try:
            r = await self._http.get(self.remote.url + "/v1/models", timeout=HEALTH_TIMEOUT_S)
            body = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            return None
        self.remote_models = [m["id"] for m in body["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        return body

    async def models(self) -> dict[str, Any]:
        """What ``GET /v1/models`` answers: the remote's list when reachable, else our served name."""
        body = await self.list_models()
        if body is not None:
            return body
        return {"object": "list", "data": [{"id": self.config.server.served_model_name, "object": "model",
                                            "created": int(self.started_at or 0), "owned_by": "omni-duplex",
                                            "root": self.config.model_family}]}

    async def _resolve_model(self) -> None:
        if self.remote is None:
            return
        if await self.list_models() is not None and self.remote.model is None and self.remote_models:
            self.remote_model = self.remote_models[0]

    forwards_chat = True
    """Chat completions go to the remote (``forward_chat``)."""

    def serves_model(self, name: str | None) -> bool:
        """Whether a client's ``model`` names what this server serves (ours or the remote's names)."""
        if not name:
            return True
        srv = self.config.server
        names = {srv.served_model_name, *srv.served_model_aliases, self.config.model_family, self.remote_model,
                 *self.remote_models}
        return name in names

    # ------------------------------------------------------------------ chat
    async def forward_chat(self, body: dict[str, Any], stream: bool) -> ForwardedResponse:
        """Forward a chat completion to the remote's ``/v1/chat/completions`` (see :mod:`.chat`).

        ``model`` is replaced by the remote's name when the client named ours (or none).

        Returns:
            ``(status, headers, body iterator)``: the remote's answer passed through, or a
            502 ``remote_unavailable`` / 504 ``remote_timeout`` OpenAI-style error; 501
            ``chat_unsupported`` for in-process vLLM-Omni (duplex only here).
        """
        if self.remote is None or self._http is None:
            return error_response(501, "chat completions are not available with in-process vLLM-Omni; "
                                       "use /v1/realtime or a remote server", "chat_unsupported",
                                  error_type="invalid_request_error")
        payload = dict(body)
        ours = {None, "", self.config.server.served_model_name, self.config.model_family}
        if payload.get("model") in ours:
            if self.remote_model is None:
                await self._resolve_model()
            if self.remote_model is not None:
                payload["model"] = self.remote_model
        self.metrics.requests.labels(outcome="forwarded").inc()
        return await forward_chat(self._http, self.remote.url + "/v1/chat/completions", payload, stream=stream)


def make_engine(config: Any, family: Any = None) -> Engine | RemoteEngine:
    """The engine for a deploy config.

    ``model_family: vllm_omni`` -> :class:`RemoteEngine` (remote server when ``remote`` is set,
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
