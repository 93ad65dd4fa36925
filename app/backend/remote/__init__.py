"""The ``vllm_omni`` backend: sessions and chat served by vLLM-Omni (a remote server, or in-process).

Public API::

    from app.backend.remote import make_engine, RemoteEngine
    engine = make_engine(config, family)      # Engine for tiny, RemoteEngine for vllm_omni
    status, headers, body = await engine.forward_chat(request_json, stream=True)

Modules: :mod:`.engine` (RemoteEngine, make_engine), :mod:`.pool` (BackendPool: the servers of
``remote.url``/``remote.urls``, their health, capacity and admission order), :mod:`.session` (RemoteSession,
the session manager is app.backend.duplex.manager'), :mod:`.links` (WebSocket link), :mod:`.chat` (HTTP forwarding),
:mod:`.wire` (commands -> wire JSON, reference voice), :mod:`.inprocess` (vLLM-Omni in-process).
"""

from app.backend.remote.chat import ForwardedResponse
from app.backend.remote.engine import RemoteEngine, default_capabilities, make_engine
from app.backend.remote.inprocess import (
    InProcessVllmOmni,
    missing_vllm_modules,
    require_vllm_omni,
)
from app.backend.remote.links import LinkUnavailable, WebSocketLink, realtime_url
from app.backend.remote.pool import Backend, BackendPool
from app.backend.remote.session import RemoteSession

__all__ = [
    "Backend",
    "BackendPool",
    "ForwardedResponse",
    "InProcessVllmOmni",
    "LinkUnavailable",
    "RemoteEngine",
    "RemoteSession",
    "WebSocketLink",
    "default_capabilities",
    "make_engine",
    "missing_vllm_modules",
    "realtime_url",
    "require_vllm_omni",
]
