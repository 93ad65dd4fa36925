"""A real server on loopback for tests: uvicorn in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import uvicorn

from app.server import build_app


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """Run ``build_app(config, family=family)`` on ``host:port`` until :meth:`stop`.

    Args:
        config: deploy config.
        family: a loaded model family shared between servers of one test run.
        host: bind address (``0.0.0.0`` for WebRTC tests, which need a non-loopback candidate).
        with_ui: mount the page.
        log_level: uvicorn's log level (``info`` prints the access log).
    """

    def __init__(self, config: Any, family: Any, *, host: str = "127.0.0.1", with_ui: bool = False,
                 log_level: str = "warning") -> None:
        self.port = free_port()
        self.app = build_app(config, family=family, with_ui=with_ui)
        self._server = uvicorn.Server(
            uvicorn.Config(self.app, host=host, port=self.port, log_level=log_level, ws_max_size=64 * 1024 * 1024)
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"

    @property
    def engine(self) -> Any:
        """The server's engine."""
        return self.app.state.engine

    def start(self, timeout_s: float = 120.0) -> LiveServer:
        """Start and wait until ``/health`` answers 200."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become healthy")

    def stop(self) -> None:
        """Stop the server and wait for its thread."""
        self._server.should_exit = True
        self._thread.join(timeout=20)
