"""Links: how a :class:`~app.backend.remote.session.RemoteSession` reaches the real session.

A link carries wire JSON objects both ways. :class:`WebSocketLink` talks to a vLLM-Omni (or our
own) server's ``/v1/realtime?duplex=1``; the in-process vLLM-Omni link lives in
:mod:`app.backend.remote.inprocess`. The session never sees which one it has.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol
from urllib.parse import urlencode

import websockets
from websockets.asyncio.client import ClientConnection, connect

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest WebSocket message accepted from the remote, bytes."""


class LinkUnavailable(ConnectionError):
    """The remote session could not be reached (connection refused, DNS, handshake timeout,
    HTTP error instead of a WebSocket upgrade). The message says what happened."""


class Link(Protocol):
    """One remote session's two-way channel of wire JSON objects."""

    async def open(self) -> None:
        """Connect. Raises :class:`LinkUnavailable`."""

    async def send(self, event: dict[str, Any]) -> None:
        """Send one client event. Raises :class:`LinkUnavailable` when the link is gone."""

    async def recv(self) -> dict[str, Any] | None:
        """The next server event; ``None`` once the link has ended (any reason)."""

    async def close(self) -> None:
        """Close (idempotent, never raises)."""

    @property
    def close_info(self) -> str:
        """How the link ended, for logs and error messages (``""`` while open)."""


def realtime_url(base_url: str, model: str | None) -> str:
    """``<base>/v1/realtime?duplex=1[&model=...]&autostart=0`` with ws(s):// from http(s)://.

    ``autostart=0`` keeps the remote from opening a default session before our
    ``session.update`` (with ``ref_audio``) arrives.
    """
    base = base_url.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://"):]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://"):]
    query: dict[str, str] = {"duplex": "1"}
    if model:
        query["model"] = model
    query["autostart"] = "0"
    return f"{base}/v1/realtime?{urlencode(query)}"


class WebSocketLink:
    """A WebSocket to a remote realtime duplex endpoint.

    Args:
        url: the full ``ws(s)://`` URL (see :func:`realtime_url`).
        headers: extra handshake headers (``Authorization: Bearer ...``).
        open_timeout_s: limit for TCP connect + WebSocket handshake, seconds.

    Permessage-deflate is off: the payload is mostly base64 audio, which barely compresses,
    and compressing it would add milliseconds to every unit on both ends.
    """

    def __init__(self, url: str, headers: dict[str, str] | None = None, open_timeout_s: float = 10.0) -> None:
        self.url = url
        self._headers = dict(headers or {})
        self._open_timeout_s = open_timeout_s
        self._ws: ClientConnection | None = None
        self._send_lock = asyncio.Lock()
        self._close_info = ""

    @property
    def close_info(self) -> str:
        """How the socket ended, e.g. ``"code 1012 (service restart)"``."""
        return self._close_info

    async def open(self) -> None:
        """Connect. Raises :class:`LinkUnavailable` on any connection failure."""
        try:
            self._ws = await connect(
                self.url,
                additional_headers=self._headers or None,
                open_timeout=self._open_timeout_s,
                max_size=MAX_FRAME_BYTES,
                compression=None,
                proxy=None,
            )
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as exc:
            raise LinkUnavailable(f"cannot open {self.url}: {type(exc).__name__}: {exc}") from exc

    async def send(self, event: dict[str, Any]) -> None:
        """Send one event as a JSON text frame.

        Raises:
            LinkUnavailable: not open, or the socket closed.
        """
        if self._ws is None:
            raise LinkUnavailable("link is not open")
        data = json.dumps(event, separators=(",", ":"))
        try:
            async with self._send_lock:
                await self._ws.send(data)
        except websockets.exceptions.ConnectionClosed as exc:
            raise LinkUnavailable(f"remote closed the connection: {exc}") from exc

    async def recv(self) -> dict[str, Any] | None:
        """The next JSON object from the remote; ``None`` when the socket has closed.

        Non-JSON frames and JSON that is not an object are skipped.
        """
        if self._ws is None:
            return None
        while True:
            try:
                raw = await self._ws.recv()
            except websockets.exceptions.ConnectionClosed as exc:
                rcvd = exc.rcvd
                self._close_info = f"code {rcvd.code} ({rcvd.reason or 'no reason'})" if rcvd else "no close frame"
                return None
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(obj, dict):
                return obj

    async def close(self) -> None:
        """Close the socket (idempotent)."""
        if self._ws is not None:
            try:
                await self._ws.close()
            except Exception as exc:  # noqa: BLE001 - best effort
                log.debug("closing %s failed: %s", self.url, exc)
