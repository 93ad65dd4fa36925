"""The offline patches match the pinned Gradio and FastRTC assets (an upgrade that moves them fails here)."""

from __future__ import annotations

from pathlib import Path

import fastrtc
import gradio

from app.ui.offline import FASTRTC_PATCHES, patch_fastrtc_js, strip_outside_tags


def _bundles() -> list[Path]:
    return [p for p in (Path(fastrtc.__file__).parent / "templates" / "component").glob("*.js")
            if b"pop-sounds" in p.read_bytes()]


def test_every_fastrtc_patch_applies_to_the_installed_bundle():
    (bundle,) = _bundles()
    js = bundle.read_bytes()
    assert [js.count(old) for old, _ in FASTRTC_PATCHES] == [1] * len(FASTRTC_PATCHES)
    out = patch_fastrtc_js(js)
    assert b"huggingface.co" not in out and out.count(b"requestAnimationFrame") == js.count(b"requestAnimationFrame") - 1


def test_gradio_index_page_loses_its_outside_links():
    html = (Path(gradio.__file__).parent / "templates" / "frontend" / "index.html").read_bytes()
    assert b"cdnjs.cloudflare.com" in html and b"fonts.googleapis.com" in html
    out = strip_outside_tags(html)
    assert b"cdnjs" not in out and b"fonts.g" not in out
    assert b'<script type="module" crossorigin src="./assets/' in out  # Gradio's own bundle stays
