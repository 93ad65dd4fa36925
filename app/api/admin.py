"""Operator routes of a front over a pool of backends (``model_family: vllm_omni`` with ``remote``).

* ``GET /admin/backends`` — every backend's state and sessions (as in ``/health``).
* ``POST /admin/backends/{name}/drain`` — no new sessions or chats go there; its open sessions
  keep going until they end.
* ``POST /admin/backends/{name}/undrain`` — it takes new work again (when healthy).

Guarded by ``remote.admin_api_key`` (``Authorization: Bearer <key>``), a key of its own — not the
users' API key. Without one configured the routes answer 404 ``admin_disabled``; a missing or
wrong key answers 401 ``invalid_admin_key``; an unknown backend 404 ``backend_not_found``.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Request

from app.api.errors import APIError

router = APIRouter(prefix="/admin")


def _authorize(request: Request) -> Any:
    """The engine, once the request carries the admin key.

    Raises:
        APIError: 404 ``admin_disabled`` (no admin key configured, or no pool), 401
            ``invalid_admin_key``.
    """
    engine = request.app.state.engine
    remote = getattr(engine.config, "remote", None)
    key = getattr(remote, "admin_api_key", None)
    if not key or getattr(engine, "pool", None) is None:
        raise APIError(404, "admin routes are off: set remote.admin_api_key in the deploy config",
                       code="admin_disabled")
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise APIError(401, "missing or wrong admin key (Authorization: Bearer <remote.admin_api_key>)",
                       code="invalid_admin_key", type="authentication_error")
    return engine


@router.get("/backends")
async def list_backends(request: Request) -> dict:
    """Every backend's snapshot: ``{"object": "list", "data": [{name, url, state, sessions, ...}]}``."""
    engine = _authorize(request)
    return {"object": "list", "data": engine.pool.snapshot()}


async def _set(request: Request, name: str, draining: bool) -> dict:
    engine = _authorize(request)
    try:
        return engine.set_draining(name, draining)
    except KeyError:
        names = ", ".join(b.name for b in engine.pool.backends)
        raise APIError(404, f"no backend named {name!r} (backends: {names})", code="backend_not_found",
                       param="name") from None


@router.post("/backends/{name}/drain")
async def drain(name: str, request: Request) -> dict:
    """Drain backend ``name`` (its name or URL-encoded URL); answers its snapshot."""
    return await _set(request, name, True)


@router.post("/backends/{name}/undrain")
async def undrain(name: str, request: Request) -> dict:
    """Let backend ``name`` take new sessions and chats again; answers its snapshot."""
    return await _set(request, name, False)
