"""Forward ``POST /v1/chat/completions`` to the remote server with httpx, byte for byte.

Streaming (SSE) bodies are passed through chunk by chunk as they arrive (no buffering, no
re-encoding; ``accept-encoding: identity`` is asked for); non-streaming JSON likewise. The remote's status and body come back unchanged,
4xx/5xx included (they are already OpenAI-style). Only failures to talk to the remote at all
are answered here, OpenAI-style: 502 ``remote_unavailable`` (connect/transport errors) or 504
``remote_timeout`` (no answer within ``remote.timeout_s``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import httpx

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "content-length", "content-encoding", "date", "server",
})
"""Response headers not copied to our client (per-connection, set by our own server, or describing an
encoding httpx has already undone)."""


class ForwardedResponse(NamedTuple):
    """A remote answer to hand to our client; unpacks as ``status, headers, body``.

    Attributes:
        status: HTTP status to answer with.
        headers: response headers to copy (``content-type`` always present).
        body: the body, as an async iterator of byte chunks; iterate it to the end (or close it)
            so the remote connection is released.
    """

    status: int
    headers: dict[str, str]
    body: AsyncIterator[bytes]


def error_body(status: int, message: str, code: str, *, error_type: str = "server_error") -> dict[str, Any]:
    """The OpenAI-style error object ``{"error": {message, type, param, code}}``."""
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def error_response(status: int, message: str, code: str, *, error_type: str = "server_error") -> ForwardedResponse:
    """A :class:`ForwardedResponse` carrying an OpenAI-style JSON error."""
    data = json.dumps(error_body(status, message, code, error_type=error_type)).encode()
    return ForwardedResponse(status, {"content-type": "application/json"}, _once(data))


async def forward_chat(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    stream: bool,
    headers: dict[str, str] | None = None,
    raise_connect_errors: bool = False,
) -> ForwardedResponse:
    """POST ``body`` to ``url`` and return the remote's answer for pass-through.

    Args:
        client: the shared client (its timeout is ``remote.timeout_s``).
        url: the remote's ``.../v1/chat/completions``.
        body: the request JSON; ``stream`` is set from the argument.
        stream: ask for SSE streaming.
        headers: extra request headers (``Authorization``).
        raise_connect_errors: raise instead of answering 502 when the connection cannot be made
            at all (nothing reached the remote, so the caller may try another one).

    Returns:
        The remote's status, headers and body iterator; or a 502/504 OpenAI-style error when the
        remote cannot be reached or does not answer in time. A transport failure in the middle
        of a stream ends it with one SSE ``data: {"error": {...}}`` event (the status line has
        already gone out).

    Raises:
        httpx.ConnectError, httpx.ConnectTimeout: only with ``raise_connect_errors``.
    """
    payload = dict(body)
    payload["stream"] = stream
    request = client.build_request("POST", url, json=payload, headers=headers)
    try:
        response = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        if raise_connect_errors and isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            raise
        if isinstance(exc, httpx.TimeoutException):
            return error_response(504, f"the remote model server did not answer in time: {exc}", "remote_timeout")
        return error_response(502, f"the remote model server is unavailable: {type(exc).__name__}: {exc}",
                              "remote_unavailable")
    out_headers = {k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP}
    out_headers.setdefault("content-type", "application/json")
    is_sse = out_headers["content-type"].startswith("text/event-stream")

    async def body_iter() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except httpx.HTTPError as exc:
            log.warning("remote chat stream broke: %s", exc)
            if is_sse:
                err = error_body(502, f"the remote model server went away mid-stream: {exc}", "remote_unavailable")
                yield f"data: {json.dumps(err)}\n\n".encode()
        finally:
            await response.aclose()

    return ForwardedResponse(response.status_code, out_headers, body_iter())
