"""Ops routes: ``GET /v1/models``, ``GET /health``, ``GET /metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.errors import APIError

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    """The served models (OpenAI ``list`` shape; a remote backend's own list when reachable)."""
    return await request.app.state.engine.models()


@router.get("/v1/models/{model_id}")
async def retrieve_model(model_id: str, request: Request) -> dict:
    """One served model (OpenAI ``model`` object); 404 with an OpenAI-style body otherwise."""
    for model in (await request.app.state.engine.models())["data"]:
        if model["id"] == model_id:
            return model
    raise APIError(404, f"The model `{model_id}` does not exist", code="model_not_found", param="model")


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    """200 when every stage worker runs (``status`` ``ok``, or ``degraded`` while a stage runs on a fresh
    thread after its watchdog abandoned a hung one), else 503 with the details."""
    h = request.app.state.engine.health()
    return JSONResponse(h, status_code=503 if h["status"] == "unhealthy" else 200)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text exposition of the engine's registry."""
    return Response(generate_latest(request.app.state.engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)
