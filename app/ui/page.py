"""The browser page (placeholder until the Gradio/FastRTC page lands)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse


def mount_ui(app: FastAPI, engine: Any) -> None:
    """Mount the page at ``/``."""

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> str:
        return "<html><body><h1>omni-duplex</h1><p>API: /v1/chat/completions, /v1/realtime?duplex=1</p></body></html>"
