"""API keys on a real server (API + page mounted, two keys): every route the app serves refuses
without a key except the open ones; the realtime WebSocket takes the header or ``?api_key=``
and refuses before admission; keys never reach the logs or /metrics; the per-key session limit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

import httpx
import pytest
import websockets
from fastapi.routing import APIWebSocketRoute
from openai import AuthenticationError, OpenAI
from starlette.routing import Mount, Route, WebSocketRoute

from app.api.auth import exposure_warning

KEYS = ["sk-test-Alpha-7f3a9c", "sk-test-Bravo-0d41e2"]
OPEN = {"/health", "/metrics", "/login", "/logout"}


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def keyed(deploy_config, tiny_family):
    """The app with the page, keyed by two keys, 1 session per key, uvicorn logging at info (captured)."""
    from app.config import parse_deploy_config
    from tests.live_server import LiveServer

    data = deploy_config.model_dump(exclude_none=True)
    data["server"] = {**data["server"], "api_key": KEYS}
    data["duplex_session"] = {**data["duplex_session"], "max_sessions_per_client": 1}
    srv = LiveServer(parse_deploy_config(data), tiny_family, with_ui=True, log_level="info")
    cap = _Capture()
    loggers = [logging.getLogger(n) for n in ("uvicorn.access", "uvicorn.error")]
    for lg in loggers:
        lg.addHandler(cap)
    srv.start()
    srv.captured = cap
    yield srv
    srv.stop()
    for lg in loggers:
        lg.removeHandler(cap)


def _walk(routes, prefix=""):
    """(path, methods | "ws") of every route, through mounts (the Gradio app at ``/``)."""
    for r in routes:
        contexts = getattr(r, "effective_route_contexts", None)  # FastAPI >= 0.16x: an included router
        if contexts is not None:
            for c in contexts():
                m = "ws" if isinstance(c.original_route, WebSocketRoute | APIWebSocketRoute) else \
                    set(getattr(c.original_route, "methods", None) or {"GET"})
                yield prefix + (getattr(c.starlette_route, "path", None) or c.path), m
        elif isinstance(r, Mount):
            inner = getattr(r.app, "routes", None)
            if inner is None:  # a static-files mount
                yield (prefix + r.path).rstrip("/") + "/x", {"GET"}
            else:
                yield from _walk(inner, (prefix + r.path).rstrip("/"))
        elif isinstance(r, WebSocketRoute | APIWebSocketRoute):
            yield prefix + r.path, "ws"
        elif isinstance(r, Route):
            yield prefix + r.path, set(r.methods or {"GET"})


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path) or "/"


def test_every_route_the_app_serves_refuses_without_a_key(keyed):
    seen_http = seen_ws = 0
    paths = sorted({(p, ("ws",) if m == "ws" else tuple(sorted(m))) for p, m in _walk(keyed.app.routes)})
    assert any(p.startswith("/gradio_api/") for p, _ in paths)  # the mounted Gradio app was walked
    assert any(p == "/webrtc/offer" for p, _ in paths)          # FastRTC's routes too
    with httpx.Client(base_url=keyed.base_url, timeout=10) as http:
        for path, methods in paths:
            url = _concrete(path)
            if methods == ("ws",):
                seen_ws += 1
                with pytest.raises(websockets.InvalidStatus) as e:
                    asyncio.run(_ws_connect(keyed.ws_url + url))
                assert e.value.response.status_code == 401, url
                continue
            for method in methods:
                seen_http += 1
                r = http.request(method, url, json={} if method in ("POST", "PUT", "PATCH") else None)
                if path.startswith("/admin/"):  # its own key (remote.admin_api_key); off here
                    assert r.status_code == 404 and r.json()["error"]["code"] == "admin_disabled", (method, url)
                elif path in OPEN:  # (POST /login with no key is the login form's "not valid")
                    assert r.status_code != 401 or (path, method) == ("/login", "POST"), (method, url)
                else:
                    assert r.status_code == 401, (method, url, r.status_code, r.text[:200])
                    if not url.startswith("/v1"):
                        continue
                    assert r.json()["error"]["code"] == "invalid_api_key"
                    assert r.headers["www-authenticate"] == "Bearer"
                    # a wrong key is no better than none
                    bad = http.request(method, url, headers={"Authorization": "Bearer sk-wrong"})
                    assert bad.status_code == 401, url
    assert seen_http > 20 and seen_ws >= 2


async def _ws_connect(url: str, **kw):
    async with websockets.connect(url, open_timeout=10, **kw) as ws:
        return json.loads(await asyncio.wait_for(ws.recv(), 10))


def test_v1_routes_take_either_key_with_the_openai_sdk(keyed):
    for key in KEYS:
        client = OpenAI(base_url=keyed.base_url + "/v1", api_key=key, max_retries=0, timeout=30)
        assert [m.id for m in client.models.list().data]
    with pytest.raises(AuthenticationError) as e:
        OpenAI(base_url=keyed.base_url + "/v1", api_key="sk-wrong", max_retries=0).models.list()
    assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
    assert httpx.get(keyed.base_url + "/health").status_code == 200  # open
    # the page: a browser is sent to /login; a bearer header opens it too
    r = httpx.get(keyed.base_url + "/", headers={"Accept": "text/html"})
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert httpx.get(keyed.base_url + "/", headers={"Authorization": f"Bearer {KEYS[0]}"}).status_code == 200


def test_login_sets_a_cookie_that_opens_the_page_and_never_holds_the_key(keyed):
    with httpx.Client(base_url=keyed.base_url, timeout=10) as http:
        bad = http.post("/login", data={"api_key": "sk-wrong"})
        assert bad.status_code == 401 and "not valid" in bad.text
        ok = http.post("/login", data={"api_key": KEYS[1]})
        assert ok.status_code == 303
        cookie = http.cookies.get("omni_key")
        assert cookie and KEYS[1] not in cookie
        assert http.get("/", headers={"Accept": "text/html"}).status_code == 200
        assert http.get("/gradio_api/info").status_code == 200
        # the cookie is the page's, not the API's
        assert http.get("/v1/models").status_code == 401
        http.get("/logout")
        assert http.get("/", headers={"Accept": "text/html"}).status_code == 303


def test_realtime_takes_header_or_query_key_and_refuses_before_admission(keyed):
    url = keyed.ws_url + "/v1/realtime?duplex=1"
    for bad in ({}, {"additional_headers": {"Authorization": "Bearer sk-wrong"}}):
        with pytest.raises(websockets.InvalidStatus) as e:
            asyncio.run(_ws_connect(url, **bad))
        assert e.value.response.status_code == 401
        assert json.loads(e.value.response.body)["error"]["code"] == "invalid_api_key"
    with pytest.raises(websockets.InvalidStatus):
        asyncio.run(_ws_connect(url + "&api_key=sk-wrong"))
    assert keyed.engine.sessions.active == 0  # refusals held no slot

    async def both() -> tuple[dict, dict, dict]:
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {KEYS[0]}"}) as a:
            first_a = json.loads(await asyncio.wait_for(a.recv(), 10))
            # the same key again: over its per-client share (1), refused at once, retryable
            async with websockets.connect(url + f"&api_key={KEYS[0]}") as again:
                refused = json.loads(await asyncio.wait_for(again.recv(), 10))
            async with websockets.connect(url + f"&api_key={KEYS[1]}") as b:  # the other key has its own share
                first_b = json.loads(await asyncio.wait_for(b.recv(), 10))
                await b.send(json.dumps({"type": "session.close"}))
            await a.send(json.dumps({"type": "session.close"}))
            return first_a, refused, first_b

    first_a, refused, first_b = asyncio.run(both())
    assert first_a["type"] == "session.created" and first_b["type"] == "session.created"
    assert refused["type"] == "error" and refused["error"]["code"] == "resource_exhausted"
    assert refused["error"]["retryable"] is True and refused["error"]["retry_after_ms"] > 0
    assert refused["error"]["limit_scope"] == "client"


def test_keys_never_reach_the_logs_or_metrics(keyed):
    # (runs after the tests above used both keys in headers and in ?api_key= queries)
    httpx.get(keyed.base_url + f"/v1/models?api_key={KEYS[0]}", headers={"Authorization": f"Bearer {KEYS[0]}"})
    text = "\n".join(keyed.captured.lines)
    assert "api_key=***" in text  # the query was logged, redacted
    assert "/v1/realtime" in text  # WebSocket handshakes are logged by uvicorn.error
    for key in KEYS:
        assert key not in text
        assert key not in httpx.get(keyed.base_url + "/metrics").text


@pytest.mark.parametrize(("host", "keys", "warns"), [
    ("0.0.0.0", (), True), ("192.168.1.5", (), True), ("::", (), True), ("example.org", (), True),
    ("127.0.0.1", (), False), ("localhost", (), False), ("::1", (), False), ("0.0.0.0", ("k",), False),
])
def test_a_non_loopback_bind_without_a_key_warns(host, keys, warns):
    msg = exposure_warning(host, keys)
    assert (msg is not None) is warns
    if warns:
        assert "--api-key" in msg and host in msg


def test_keyless_limits_per_address_and_session_length(make_server):
    srv = make_server(duplex_session={"max_sessions_per_client": 1, "max_session_s": 1.5, "reaper_interval_s": 0.2,
                                      "idle_ttl_s": 60.0})
    url = srv.ws_url + "/v1/realtime?duplex=1"

    async def run() -> tuple[dict, list[dict], float, dict]:
        async with websockets.connect(url) as a:
            assert json.loads(await a.recv())["type"] == "session.created"
            t0 = time.monotonic()
            async with websockets.connect(url) as again:  # same address: over its share
                refused = json.loads(await asyncio.wait_for(again.recv(), 10))
            got = []
            while not got or got[-1]["type"] not in ("session.expired", "session.closed"):
                got.append(json.loads(await asyncio.wait_for(a.recv(), 10)))
            took = time.monotonic() - t0
        await asyncio.sleep(0.3)
        later = await _ws_connect(url)  # the slot came back
        return refused, got, took, later

    refused, got, took, later = asyncio.run(run())
    err = refused["error"]
    assert err["code"] == "resource_exhausted" and err["limit_scope"] == "client" and err["retryable"] is True
    assert 1000 <= err["retry_after_ms"] <= 2000  # when the held session reaches max_session_s (+ one reaper tick)
    assert got[-1]["type"] == "session.expired" and got[-1]["reason"] == "max_session_length"
    assert 1.3 < took < 4
    assert later["type"] == "session.created"


def test_realtime_demo_takes_the_key_and_says_when_it_is_refused(keyed, question_wav, tmp_path, capsys, monkeypatch):
    from app.client.demo import main_realtime_demo

    argv = ["--url", keyed.base_url, "--input-wav", str(question_wav), "--no-realtime-pacing"]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OMNI_API_KEY", "")
    assert main_realtime_demo([*argv, "--output-dir", str(tmp_path / "none")]) == 1
    refused = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert refused["protocol_ok"] is False and "401" in refused["reason"] and "--api-key" in refused["reason"]
    monkeypatch.setenv("OMNI_API_KEY", f"{KEYS[1]},{KEYS[0]}")  # (the first one is used)
    assert main_realtime_demo([*argv, "--output-dir", str(tmp_path / "keyed")]) == 0
    ok = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert ok["ok"] is True and ok["protocol_ok"] is True and ok["reason"] is None
    assert "paris" in ok["transcript"].lower()


@pytest.mark.parametrize("keyed_metrics", [False, True])
def test_metrics_are_open_unless_the_setting_keys_them(deploy_config, tiny_family, keyed_metrics):
    from app.config import parse_deploy_config
    from app.server import build_app

    data = deploy_config.model_dump(exclude_none=True)
    data["server"] = {**data["server"], "api_key": KEYS[0], "metrics_require_key": keyed_metrics}
    app = build_app(parse_deploy_config(data), family=tiny_family, with_ui=False)

    async def get(path: str, **headers: str) -> int:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as h:
            return (await h.get(path, headers=headers)).status_code

    assert asyncio.run(get("/metrics")) == (401 if keyed_metrics else 200)
    assert asyncio.run(get("/metrics", Authorization=f"Bearer {KEYS[0]}")) == 200
    assert asyncio.run(get("/health")) != 401  # (503 here: the engine is not started)


def test_redaction_covers_query_values_bearer_tokens_and_the_literal_keys():
    from app.api.auth import RedactKeys

    r = RedactKeys((KEYS[0],))
    assert r.redact('127.0.0.1:5 - "GET /v1/models?x=1&api_key=anything&y=2 HTTP/1.1" 200') == \
        '127.0.0.1:5 - "GET /v1/models?x=1&api_key=***&y=2 HTTP/1.1" 200'
    assert r.redact("WebSocket /v1/realtime?api_key=k%20y [accepted]") == "WebSocket /v1/realtime?api_key=*** [accepted]"
    assert r.redact("Authorization: Bearer sk-abc.def") == "Authorization: Bearer ***"
    assert r.redact(f"key={KEYS[0]}") == "key=***"
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s"', ("c", "GET", "/?api_key=z"),
                               None)
    assert r.filter(record) and record.getMessage() == 'c - "GET /?api_key=***"'
