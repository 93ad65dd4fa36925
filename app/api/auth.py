"""API keys (``server.api_key``, ``serve --api-key``, env ``OMNI_API_KEY``), as ``vllm serve --api-key``.

One pure-ASGI middleware, :class:`ApiKeyMiddleware`, guards every route the process serves, the
mounted Gradio app and FastRTC's routes included, so a route added later is keyed by default:

* open: ``/health``, ``/login``, ``/logout``, and ``/metrics`` unless ``server.metrics_require_key``;
  ``/admin/*`` checks a key of its own (``remote.admin_api_key``);
* ``/v1/*`` over HTTP: ``Authorization: Bearer KEY``, else 401 with an OpenAI error body
  (``code: invalid_api_key``) and ``WWW-Authenticate: Bearer``;
* ``/v1/*`` WebSockets (the realtime transport): the ``Authorization`` header or an ``api_key``
  query parameter (browsers cannot set headers); else the handshake is answered with HTTP 401
  (the ASGI denial-response extension), before the route runs, so no session slot is taken;
* everything else is the page (``/``, ``/gradio_api/...``, ``/webrtc/offer`` ...): a Bearer header
  or the login cookie, unless ``server.public_page``. A browser asking for HTML is sent to
  ``/login``, where the user types a key once; the cookie holds an HMAC of the key under a
  per-process secret, never the key.

The middleware puts who asked in ``scope["omni.principal"]``: ``key-N`` (the N-th configured key,
1-based; never the key itself), or the client address when no key is configured; the realtime
route counts sessions per principal (``duplex_session.max_sessions_per_client``).

:func:`install_log_redaction` keeps keys out of uvicorn's logs (its access log prints query
strings, so ``?api_key=...`` would otherwise be logged).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import ipaddress
import logging
import re
import secrets
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qs

from fastapi.security.utils import get_authorization_scheme_param
from starlette.datastructures import Headers, QueryParams
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

log = logging.getLogger(__name__)

COOKIE = "omni_key"
"""Name of the page's login cookie."""

LOGIN_PATH = "/login"
LOGOUT_PATH = "/logout"
ALWAYS_OPEN = frozenset({"/health", LOGIN_PATH, LOGOUT_PATH})
"""Paths no key is asked for (``/metrics`` joins them unless ``metrics_require_key``)."""

OWN_KEY_PREFIXES = ("/admin/",)
"""Routes guarded by a key of their own (``remote.admin_api_key``, :mod:`app.api.admin`), not the users'."""

PRINCIPAL = "omni.principal"
"""ASGI scope key of who asked (``key-N`` or the client address)."""

current_principal: ContextVar[str | None] = ContextVar("omni_principal", default=None)
"""Who asked, for code that runs in the request's context but sees no scope: the page's WebRTC
handler opens its session from tasks started while the offer request is served (they inherit
this variable), so the page's sessions count against ``max_sessions_per_client`` too."""

_MAX_LOGIN_BODY = 4096


class KeyRing:
    """The configured keys; compares in constant time.

    Args:
        keys: the accepted keys (at least one).
        secret: HMAC secret of the login cookie (random per process when None).
    """

    def __init__(self, keys: tuple[str, ...] | list[str], secret: bytes | None = None) -> None:
        if not keys:
            raise ValueError("a KeyRing needs at least one key")
        self._keys = tuple(keys)
        self._secret = secret or secrets.token_bytes(32)
        self._tokens = tuple(self.cookie_token(k) for k in self._keys)

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys (for log redaction)."""
        return self._keys

    def match(self, candidate: str | None) -> str | None:
        """``key-N`` for a configured key, else None (every key is compared: constant time)."""
        if not candidate:
            return None
        found = None
        for i, key in enumerate(self._keys, 1):
            if hmac.compare_digest(candidate.encode(), key.encode()):
                found = f"key-{i}"
        return found

    def cookie_token(self, key: str) -> str:
        """The cookie value for ``key``: HMAC-SHA256 under the process secret (hex)."""
        return hmac.new(self._secret, key.encode(), hashlib.sha256).hexdigest()

    def match_cookie(self, token: str | None) -> str | None:
        """``key-N`` for a cookie made by :meth:`cookie_token`, else None."""
        if not token:
            return None
        found = None
        for i, t in enumerate(self._tokens, 1):
            if hmac.compare_digest(token.encode(), t.encode()):
                found = f"key-{i}"
        return found


def _error(message: str, code: str = "invalid_api_key") -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def unauthorized(message: str = "Missing or invalid API key: send 'Authorization: Bearer <key>'") -> JSONResponse:
    """The 401 answer (OpenAI error body, ``WWW-Authenticate: Bearer``)."""
    return JSONResponse(_error(message), status_code=401, headers={"WWW-Authenticate": "Bearer"})


class ApiKeyMiddleware:
    """Refuse every request without a valid key, except the open paths (see the module docstring).

    Args:
        app: the ASGI app (the FastAPI app with Gradio mounted).
        ring: the keys; None = keyless (nothing refused; the principal is the client address).
        public_page: page routes need no key.
        metrics_require_key: ``/metrics`` needs a key.
    """

    def __init__(self, app: ASGIApp, *, ring: KeyRing | None, public_page: bool = False,
                 metrics_require_key: bool = False) -> None:
        self.app = app
        self.ring = ring
        self.public_page = public_page
        self.open_paths = ALWAYS_OPEN if metrics_require_key else ALWAYS_OPEN | {"/metrics"}

    def area(self, path: str) -> str:
        """``open``, ``api`` (``/v1/*``) or ``page`` (everything else)."""
        if path in self.open_paths or path.startswith(OWN_KEY_PREFIXES):
            return "open"
        if path == "/v1" or path.startswith("/v1/"):
            return "api"
        return "open" if self.public_page else "page"

    def identify(self, scope: Scope, area: str) -> str | None:
        """``key-N`` when the request carries a configured key where ``area`` accepts one."""
        assert self.ring is not None
        headers = Headers(scope=scope)
        scheme, token = get_authorization_scheme_param(headers.get("authorization"))
        if scheme.lower() == "bearer" and (who := self.ring.match(token)):
            return who
        if scope["type"] == "websocket" and (who := self.ring.match(QueryParams(scope.get("query_string", b"")).get("api_key"))):
            return who
        if area == "page":
            cookies = _cookies(headers.get("cookie", ""))
            return self.ring.match_cookie(cookies.get(COOKIE))
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        client = scope.get("client") or ("unknown", 0)
        if self.ring is None:
            scope[PRINCIPAL] = f"addr-{client[0]}"
            current_principal.set(scope[PRINCIPAL])
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in (LOGIN_PATH, LOGOUT_PATH) and scope["type"] == "http":
            await self._login(scope, receive, send)
            return
        area = self.area(path)
        who = self.identify(scope, area)
        if who is None and area != "open":
            await self._refuse(scope, receive, send, area)
            return
        scope[PRINCIPAL] = who or f"addr-{client[0]}"
        current_principal.set(scope[PRINCIPAL])
        await self.app(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, area: str) -> None:
        if scope["type"] == "websocket":
            ws = WebSocket(scope, receive, send)
            if "websocket.http.response" in scope.get("extensions", {}):
                await ws.send_denial_response(unauthorized(
                    "Missing or invalid API key: send 'Authorization: Bearer <key>' or '?api_key=<key>'"))
            else:  # a server without the denial extension: an error event, then close
                await ws.accept()
                await ws.send_json({"type": "error", "code": "invalid_api_key", "message": "Missing or invalid API key",
                                    "error": {"type": "invalid_request_error", "code": "invalid_api_key",
                                              "message": "Missing or invalid API key"}})
                await ws.close(code=1008)
            return
        headers = Headers(scope=scope)
        wants_html = scope.get("method") == "GET" and "text/html" in headers.get("accept", "")
        response: Response
        if area == "page" and wants_html:
            response = RedirectResponse(LOGIN_PATH, status_code=303)
        else:
            response = unauthorized()
        await response(scope, receive, send)

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /login``: the form; ``POST /login`` (form ``api_key``): cookie + 303 to ``/``; ``/logout``."""
        assert self.ring is not None
        response: Response
        if scope["path"] == LOGOUT_PATH:
            response = RedirectResponse(LOGIN_PATH, status_code=303)
            response.delete_cookie(COOKIE, path="/")
        elif scope["method"] == "POST":
            body = await _read_body(receive, _MAX_LOGIN_BODY)
            key = (parse_qs(body.decode("utf-8", "replace")).get("api_key") or [""])[0].strip()
            if self.ring.match(key) is None:
                response = HTMLResponse(login_page("That key is not valid."), status_code=401)
            else:
                response = RedirectResponse("/", status_code=303)
                response.set_cookie(COOKIE, self.ring.cookie_token(key), httponly=True, samesite="strict",
                                    secure=scope.get("scheme") == "https", path="/")
        else:
            response = HTMLResponse(login_page())
        await response(scope, receive, send)


async def _read_body(receive: Receive, limit: int) -> bytes:
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if len(body) > limit or not msg.get("more_body"):
            return body[:limit]


def _cookies(header: str) -> dict[str, str]:
    out = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            out[name] = value
    return out


def login_page(note: str = "") -> str:
    """The login form (no scripts, no external resources)."""
    msg = f'<p class="err" role="alert">{html.escape(note)}</p>' if note else ""
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:system-ui,sans-serif;max-width:24rem;margin:4rem auto;padding:0 1rem}}
input,button{{font-size:1rem;padding:.5rem;width:100%;box-sizing:border-box;margin:.25rem 0}}.err{{color:#b00}}</style>
</head><body><h1>Sign in</h1><p>This server needs an API key.</p>{msg}
<form method="post" action="{LOGIN_PATH}"><label for="api_key">API key</label>
<input id="api_key" name="api_key" type="password" autocomplete="current-password" required autofocus>
<button type="submit" id="login">Sign in</button></form></body></html>"""


# ---------------------------------------------------------------------------- logs and start-up

_QUERY_KEY = re.compile(r"((?:^|[?&;\s])api_key=)[^&\s\"']*", re.IGNORECASE)
_BEARER = re.compile(r"(bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
REDACTED = "***"


class RedactKeys(logging.Filter):
    """Replace ``api_key=...`` query values, Bearer tokens and the literal keys in a log record."""

    def __init__(self, keys: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._keys = tuple(k for k in keys if k)

    def redact(self, text: str) -> str:
        """``text`` with every key shown as ``***``."""
        text = _QUERY_KEY.sub(lambda m: m.group(1) + REDACTED, text)
        text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        for key in self._keys:
            text = text.replace(key, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            record.args = tuple(self.redact(a) if isinstance(a, str) else a for a in args)
        return True


REDACTED_LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn", "fastapi", "gradio", "fastrtc", "app")


def install_log_redaction(keys: tuple[str, ...] = ()) -> RedactKeys:
    """Put a :class:`RedactKeys` filter on uvicorn's (and our) loggers; idempotent per logger.

    Logger filters see only records logged to that logger, so the filter goes on each logger that
    prints request lines (``uvicorn.access``: ``GET /path?query``; ``uvicorn.error``: WebSocket
    handshakes with their query).
    """
    f = RedactKeys(keys)
    for name in REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        for old in [x for x in logger.filters if isinstance(x, RedactKeys)]:
            logger.removeFilter(old)
        logger.addFilter(f)
    return f


def exposure_warning(host: str, keys: tuple[str, ...]) -> str | None:
    """A warning when ``host`` is reachable from other machines and no key is set, else None."""
    if keys:
        return None
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return (f"WARNING: listening on {host} with no API key: anyone who can reach this port can use the models "
            "and the page. Set --api-key KEY (or OMNI_API_KEY, or server.api_key), or bind --host 127.0.0.1.")
