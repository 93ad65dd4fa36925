"""Ops routes: ``GET /v1/models``, ``GET /health``, ``GET /metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    """The served models (OpenAI ``list`` shape; a remote backend's own list when reachable)."""
    return await request.app.state.engine.models()


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    """200 when every stage worker runs, else 503 with the details."""
    h = request.app.state.engine.health()
    return JSONResponse(h, status_code=200 if h["status"] == "ok" else 503)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text exposition of the engine's registry."""
    return Response(generate_latest(request.app.state.engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)
