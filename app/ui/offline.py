"""Keep the page fully offline: strip what Gradio's index page would fetch from outside hosts.

Gradio's ``templates/frontend/index.html`` (gradio 5.50, pinned in ``pyproject.toml``) links
an iframe-resizer script from cdnjs and preconnects to Google Fonts. The script only matters
when the page is embedded in an iframe on another site, the fonts are not used (system-font
theme): :class:`OfflinePageMiddleware` removes those tags from the HTML pages the app serves.

FastRTC's component bundle (fastrtc 0.0.34, pinned in ``pyproject.toml``) is patched as it is
served (:data:`FASTRTC_PATCHES`): it would load a "pop" sound from huggingface.co, and its
audio visualiser (hidden by ``page.css``) runs ``requestAnimationFrame`` loops that are never
cancelled when a call stops, so every Start/Stop cycle left one more running (~1-3 % of a core
each in Chromium). Together with no STUN (``rtc_configuration=None``) and analytics off, the
page makes no request outside the server's origin (``e2e/test_page_ux.py`` counts them and
measures idle CPU over 10 cycles).
"""

from __future__ import annotations

import re
from typing import Any

OUTSIDE_TAGS = re.compile(
    rb"<script[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>"  # iframe-resizer (cdnjs)
    rb"|<link[^>]*\bhref=\"https?://fonts\.(?:googleapis|gstatic)\.com[^\"]*\"[^>]*>",  # font preconnects
    re.IGNORECASE,
)
"""Tags of Gradio's index page that make the browser contact another host."""


FASTRTC_PATCHES: tuple[tuple[bytes, bytes], ...] = (
    # the "pop" notification sound from huggingface.co: none (offline)
    (b'new Audio("https://huggingface.co/datasets/freddyaboulton/bucket/resolve/main/pop-sounds.mp3")',
     b"new Audio()"),
    # the hidden wave visualiser: its idle animation draws once instead of looping on animation frames ...
    (b'I(), (i === "closed" || i === "waiting") && (T = requestAnimationFrame(C));', b"I();"),
    # ... and a call opens no AudioContext + analyser for it (one per call, closed only with the page)
    ((b"T && cancelAnimationFrame(T), p = new (window.AudioContext || window.webkitAudioContext)(), "
     b"g = p.createAnalyser(), p.createMediaStreamSource(l()).connect(g), g.fftSize = 128, "
     b"g.smoothingTimeConstant = 0.85, b = new Uint8Array(g.frequencyBinCount), y = new Array(r).fill(0), "
     b"D = new Array(r).fill(0), L();"), b"T && cancelAnimationFrame(T);"),
    # the hidden pulse of the mic icon: the same (an AudioContext and a frame loop per call, never stopped)
    ((b"f = new (window.AudioContext || window.webkitAudioContext)(), p = f.createAnalyser(), "
     b"f.createMediaStreamSource(i()).connect(p), p.fftSize = 64, p.smoothingTimeConstant = 0.8, "
     b"g = new Uint8Array(p.frequencyBinCount), y();"), b""),
)
"""``(old, new)`` replacements in FastRTC's component JavaScript (see the module docstring)."""


def patch_fastrtc_js(js: bytes) -> bytes:
    """FastRTC's bundle with :data:`FASTRTC_PATCHES` applied (those it contains)."""
    for old, new in FASTRTC_PATCHES:
        js = js.replace(old, new)
    return js


def strip_outside_tags(html: bytes) -> bytes:
    """``html`` without :data:`OUTSIDE_TAGS` (``<meta>`` image URLs stay: browsers never fetch them)."""
    return OUTSIDE_TAGS.sub(b"", html)


class OfflinePageMiddleware:
    """ASGI middleware: HTML responses pass through :func:`strip_outside_tags`, Gradio's
    custom-component JavaScript through :func:`patch_fastrtc_js`.

    Only uncompressed bodies are rewritten (component JavaScript is asked for uncompressed: Gradio
    would brotli it); everything else streams through untouched.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] | None = None
        chunks: list[bytes] = []
        component_js = "/custom_component/" in scope.get("path", "") and scope["path"].endswith(".js")
        rewrite = patch_fastrtc_js if component_js else strip_outside_tags
        if component_js:  # Gradio compresses these (brotli): ask for them plain, so they can be patched
            plain = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"accept-encoding"]
            scope = {**scope, "headers": plain}

        async def wrapped(message: dict[str, Any]) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                html = headers.get(b"content-type", b"").startswith(b"text/html")
                if (html or component_js) and b"content-encoding" not in headers:
                    start = message
                    return
                await send(message)
            elif message["type"] == "http.response.body" and start is not None:
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                body = rewrite(b"".join(chunks))
                headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": body})
            else:
                await send(message)

        await self.app(scope, receive, wrapped)
