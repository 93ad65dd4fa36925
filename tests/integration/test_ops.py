"""Ops routes: models, metrics, and /health turning unhealthy when a stage worker dies."""

from __future__ import annotations

import time

import httpx


def test_models_and_metrics(server):
    models = httpx.get(server.base_url + "/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == server.engine.config.server.served_model_name
    httpx.post(server.base_url + "/v1/chat/completions", json={
        "model": models["data"][0]["id"], "modalities": ["text", "audio"],
        "messages": [{"role": "user", "content": "Say hello."}]}, timeout=60).raise_for_status()
    text = httpx.get(server.base_url + "/metrics").text
    for name in ("omni_stage_queue_wait_seconds", "omni_stage_compute_seconds", "omni_stage_batch_size",
                 "omni_stage_tokens_total", "omni_talker_code2wav_rtf", "omni_duplex_sessions_active"):
        assert name in text, name
    assert 'omni_stage_compute_seconds_count{stage="code2wav"}' in text


def test_health_reports_a_dead_stage_worker(make_server):
    srv = make_server()
    assert httpx.get(srv.base_url + "/health").json()["status"] == "ok"
    task = srv.engine.pipeline.talker._task
    task.get_loop().call_soon_threadsafe(task.cancel)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and srv.engine.pipeline.talker.alive:
        time.sleep(0.05)
    r = httpx.get(srv.base_url + "/health")
    assert r.status_code == 503
    assert r.json()["stages"] == {"thinker": True, "talker": False, "code2wav": True, "asr": True}
    # a request needing the dead stage fails cleanly instead of hanging
    r = httpx.post(srv.base_url + "/v1/chat/completions", json={
        "model": srv.engine.config.server.served_model_name,
        "messages": [{"role": "user", "content": "Say hello."}]}, timeout=60)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"


def test_retrieve_model(server):
    name = server.engine.config.server.served_model_name
    assert httpx.get(f"{server.base_url}/v1/models/{name}").json()["id"] == name
    r = httpx.get(f"{server.base_url}/v1/models/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_unknown_api_requests_get_openai_error_bodies(server):
    base = server.base_url
    r = httpx.get(base + "/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"
    r = httpx.post(base + "/v1/embeddings", json={"input": "x"})
    assert r.status_code == 404 and r.json()["error"] == {
        "message": "Invalid URL (POST /v1/embeddings)", "type": "invalid_request_error", "param": None,
        "code": "unknown_url"}
    r = httpx.get(base + "/v1/realtime")  # a plain HTTP request to the WebSocket route
    assert r.status_code == 426 and r.json()["error"]["code"] == "websocket_required"
    assert httpx.get(base + "/v1/models").status_code == 200  # known routes are untouched
