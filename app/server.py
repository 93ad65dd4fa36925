"""Build the one FastAPI application: API routes + the Gradio page, on one port."""

from __future__ import annotations

import logging
import os
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from app.api import admin as admin_api
from app.api import chat as chat_api
from app.api import ops as ops_api
from app.api import realtime as realtime_api
from app.api.auth import ApiKeyMiddleware, KeyRing, install_log_redaction
from app.api.errors import install_api_fallback, install_error_handlers
from app.backend.pipeline.stages import ModelFamily
from app.backend.remote import make_engine

log = logging.getLogger(__name__)


def build_app(config: Any, *, family: ModelFamily | None = None, with_ui: bool = True) -> FastAPI:
    """Create the application.

    Args:
        config: the deploy config (:class:`app.config.DeployConfig`).
        family: an already-loaded model family to reuse (tests); loaded at start-up when None.
        with_ui: mount the Gradio/FastRTC page at ``/``.

    Returns:
        The FastAPI app; the engine is at ``app.state.engine`` and starts in the lifespan.
    """
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    engine = make_engine(config, family)  # Engine, or RemoteEngine for model_family: vllm_omni

    server = config.server
    keys = server.api_keys

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        install_log_redaction(keys)  # after uvicorn has configured its loggers
        await engine.start()
        try:
            yield
        finally:
            await engine.stop()

    app = FastAPI(title="omni-duplex", lifespan=lifespan)
    app.state.engine = engine
    install_error_handlers(app)
    # outermost: guards every route, the page's Gradio and FastRTC routes included (app.api.auth)
    app.add_middleware(ApiKeyMiddleware, ring=KeyRing(keys) if keys else None, public_page=server.public_page,
                       metrics_require_key=server.metrics_require_key)
    app.include_router(chat_api.router)
    app.include_router(realtime_api.router)
    app.include_router(ops_api.router)
    app.include_router(admin_api.router)
    install_api_fallback(app)  # after the API routes, before the page at /
    if with_ui:
        from app.ui.page import mount_ui

        mount_ui(app, engine)
    return app
