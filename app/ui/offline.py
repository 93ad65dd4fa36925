"""Keep the page fully offline: strip what Gradio's index page would fetch from outside hosts.

Gradio's ``templates/frontend/index.html`` (gradio 5.50, pinned in ``pyproject.toml``) links
an iframe-resizer script from cdnjs and preconnects to Google Fonts. The script only matters
when the page is embedded in an iframe on another site, the fonts are not used (system-font
theme): :class:`OfflinePageMiddleware` removes those tags from the HTML pages the app serves.

FastRTC's component (fastrtc 0.0.34, pinned) creates ``new Audio(<huggingface.co pop sound>)``
when a stream starts; ``assets/page.js`` replaces outside-origin ``Audio`` sources with none
(no sound, no request). Together with no STUN (``rtc_configuration=None``) and analytics off,
the page makes no request outside the server's origin (``e2e/test_page_ux.py`` counts them).
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


def strip_outside_tags(html: bytes) -> bytes:
    """``html`` without :data:`OUTSIDE_TAGS` (``<meta>`` image URLs stay: browsers never fetch them)."""
    return OUTSIDE_TAGS.sub(b"", html)


class OfflinePageMiddleware:
    """ASGI middleware: HTML responses pass through :func:`strip_outside_tags`.

    Only uncompressed ``text/html`` bodies are rewritten (Gradio serves its index page plain);
    everything else streams through untouched.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] | None = None
        chunks: list[bytes] = []

        async def wrapped(message: dict[str, Any]) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                html = headers.get(b"content-type", b"").startswith(b"text/html")
                if html and b"content-encoding" not in headers:
                    start = message
                    return
                await send(message)
            elif message["type"] == "http.response.body" and start is not None:
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                body = strip_outside_tags(b"".join(chunks))
                headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": body})
            else:
                await send(message)

        await self.app(scope, receive, wrapped)
