"""The pool's arithmetic without sockets: capacity from the backend's word, ranking, chat choice."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry

from app.backend.remote.pool import BackendPool
from app.config import RemoteConfig


def pool(*entries, default_max: int = 4) -> BackendPool:
    remote = RemoteConfig(urls=list(entries), api_key="shared")
    return BackendPool(remote, default_max, CollectorRegistry())


def healthy(p: BackendPool) -> BackendPool:
    for b in p.backends:
        b.healthy = True
    return p


def test_capacity_is_the_smallest_word_and_used_is_their_report_plus_ours():
    p = healthy(pool("http://a:1", {"url": "http://b:1", "max_sessions": 2}))
    a, b = p.backends
    assert (a.name, a.capacity(), b.capacity()) == ("a:1", 4, 2)
    a.reported_max, a.reported_active = 3, 1  # its /health
    assert a.capacity() == 3 and a.free_slots() == 2
    a.session_opened()  # opened after that probe: counted on top of the report
    assert a.used() == 2 and a.free_slots() == 1
    a.admitted(0.01, {"max_sessions": 2})  # its session's capabilities
    assert a.capacity() == 2 and a.free_slots() == 0
    a.session_closed()
    assert a.free_slots() == 1
    a.refused()  # its refusal beats our estimate until it shows room
    assert a.full and a.free_slots() == 0
    a.session_closed()
    assert not a.full


def test_admission_order_most_free_times_weight_and_skips_what_cannot_take_one():
    p = healthy(pool("http://a:1", {"url": "http://b:1", "weight": 2.0}, "http://c:1", "http://d:1"))
    a, b, c, d = p.backends
    assert [x.name for x in p.admission_order()] == ["b:1", "a:1", "c:1", "d:1"]
    b.open_sessions = 3  # free 1 x weight 2 = 2 < 4
    assert [x.name for x in p.admission_order()][:1] == ["a:1"]
    c.draining = True
    d.healthy = False
    a.full = True
    assert [x.name for x in p.admission_order()] == ["b:1"]
    b.open_sessions = 4  # our own cap reached: not even tried
    assert p.admission_order() == [] and p.any_accepting()
    a.full = False
    a.reported_active, a.reported_max = 4, 4  # full by its report: tried last, its word may have changed
    b.open_sessions = 0
    assert [x.name for x in p.admission_order()] == ["b:1", "a:1"]


def test_chat_goes_to_the_least_loaded_per_slot_and_weight():
    p = healthy(pool("http://a:1", {"url": "http://b:1", "weight": 2.0}))
    a, b = p.backends
    a.open_sessions, b.open_sessions = 1, 2  # 1/4/1 = 0.25 vs 2/4/2 = 0.25: tie -> config order
    assert p.pick_for_chat() is a
    a.chats_in_flight = 1
    assert p.pick_for_chat() is b
    assert p.pick_for_chat(exclude={"b:1"}) is a
    b.draining = True
    a.healthy = False
    assert p.pick_for_chat() is None


def test_per_backend_key_and_model_default_to_the_shared_ones():
    p = pool({"url": "http://a:1", "api_key": "own", "model": "m-a"}, "http://b:1")
    a, b = p.backends
    assert a.headers()["authorization"] == "Bearer own" and b.headers()["authorization"] == "Bearer shared"
    assert (a.remote_model, b.remote_model) == ("m-a", None)
    with pytest.raises(KeyError):
        p.get("nope")
    assert p.get("http://b:1") is b and p.get("a:1") is a


async def test_probe_reads_this_apps_health_shape_and_vllm_omnis_empty_200():
    answers = {"a": httpx.Response(200, json={"status": "ok", "sessions": {"active": 3, "max_sessions": 4}}),
               "b": httpx.Response(200), "c": httpx.Response(503, json={"status": "unhealthy"})}
    models = httpx.Response(200, json={"object": "list", "data": [{"id": "served-b"}]})

    def handler(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        return models if request.url.path == "/v1/models" else answers[host]

    p = pool("http://a:1", "http://b:1", "http://c:1")
    for bk in p.backends:
        bk.http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    await p.probe_all()
    a, b, c = p.backends
    assert (a.healthy, a.reported_active, a.reported_max, a.free_slots()) == (True, 3, 4, 1)
    assert (b.healthy, b.reported_active, b.capacity(), b.remote_model) == (True, None, 4, "served-b")
    assert (c.healthy, c.state, c.status_code) == (False, "unhealthy", 503)
    a.lost("socket dropped")
    assert a.state == "unhealthy" and a.error == "socket dropped"
    await p.probe_all()
    assert a.healthy  # the next good probe brings it back
    for bk in p.backends:
        await bk.http.aclose()
