"""Gradio's debug prints (one per component-server request, one at mount) stay out of the
server's output."""

from __future__ import annotations

import gradio as gr
import gradio.routes
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.ui import gradio_log


def _post_component_server(app: FastAPI) -> None:
    with TestClient(app, raise_server_exceptions=False) as client:
        client.post("/gradio_api/component_server/",
                    json={"data": [], "component_id": 0, "fn_name": "turn", "session_hash": "s"})


def _mount() -> FastAPI:
    with gr.Blocks() as blocks:
        gr.HTML("x")
    return gr.mount_gradio_app(FastAPI(), blocks, path="/", show_api=False, ssr_mode=False)


@pytest.fixture
def page_app() -> FastAPI:
    return _mount()


def test_the_pinned_gradio_prints_content_type_per_request(page_app, capsys, monkeypatch):
    """The upstream line this module exists for (when Gradio drops it, so can we)."""
    monkeypatch.delattr(gradio.routes, "print", raising=False)
    _post_component_server(page_app)
    assert "content_type application/json" in capsys.readouterr().out
    _mount()
    assert capsys.readouterr().out == "new /\n"


def test_install_drops_that_line_only(page_app, capsys, monkeypatch):
    monkeypatch.setattr(gradio.routes, "print", print, raising=False)  # (as it was again after the test)
    gradio_log.install()
    gradio_log.install()  # (idempotent)
    _post_component_server(page_app)
    assert "content_type" not in capsys.readouterr().out
    _mount()
    assert capsys.readouterr().out == ""
    gradio.routes.print("content_type")  # other calls pass on, a one-argument one included
    gradio.routes.print("another", "line", sep="-")
    assert capsys.readouterr().out == "content_type\nanother-line\n"
