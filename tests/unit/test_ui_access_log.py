"""The page's once-a-second polls stay out of uvicorn's access log; other requests and server
errors stay in it."""

from __future__ import annotations

import logging

import pytest

from app.ui.routes import PolledAccessFilter


def _record(method: str, path: str, status: int) -> logging.LogRecord:
    # the shape of uvicorn's access record (uvicorn/protocols/http/h11_impl.py)
    return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 0, '%s - "%s %s HTTP/%s" %d',
                             ("127.0.0.1:5000", method, path, "1.1", status), None)


@pytest.mark.parametrize(("method", "path", "status", "kept"), [
    ("GET", "/webrtc/unit/abc/0.jpg?u=1733", 200, False),
    ("GET", "/webrtc/unit/abc/1.jpg?u=1733", 404, False),  # no stacked frame yet
    ("GET", "/webrtc/state/abc", 200, False),
    ("GET", "/webrtc/unit/abc/0.jpg", 500, True),
    ("POST", "/webrtc/force_listen", 200, True),
    ("POST", "/v1/chat/completions", 200, True),
    ("GET", "/health", 200, True),
])
def test_polls_are_dropped_and_everything_else_is_kept(method: str, path: str, status: int, kept: bool) -> None:
    assert PolledAccessFilter().filter(_record(method, path, status)) is kept


def test_at_debug_the_polls_are_kept() -> None:
    logger = logging.getLogger("uvicorn.access")
    old = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        assert PolledAccessFilter().filter(_record("GET", "/webrtc/unit/abc/0.jpg", 200))
    finally:
        logger.setLevel(old)
