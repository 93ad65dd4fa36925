"""Camera intake with no video track back: FastRTC's audio-video handler reads frames even when
nothing is sent to the peer.

FastRTC 0.0.34 (pinned in ``pyproject.toml``) wraps a peer's camera track in
``fastrtc.tracks.VideoStreamHandler_``, which is also the server's outbound video track; it
starts reading the camera (``process_frames`` -> ``handler.video_receive``) only from its own
``recv()``, i.e. when aiortc pulls a frame to send back. The page (``assets/page.js``) offers its
camera send-only, so aiortc answers ``recvonly``, never pulls a frame, and the camera would never
be read. :func:`install` makes each ``VideoStreamHandler_`` start its intake as it is created
(idempotent: FastRTC's ``start()`` keeps a ``has_started`` flag, so a peer that does take video
back, a headless ``/webrtc/offer`` client for instance, starts it once as before).

What this saves on the server per camera call (measured by ``benchmarks/bench_browser.py
--modes camera,mic``): decoding the page's video at its capture rate and size (the page now sends
what the units read, ``page.js`` ``camFps``), the bgr24 conversion of each of those frames, and
VP8-encoding an echo track of ``handler.VIDEO_FPS`` frames a second.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

_installed = False


def install() -> bool:
    """Patch ``fastrtc.tracks.VideoStreamHandler_.__init__`` to schedule ``start()`` at once.

    Returns:
        Whether the patch is in place (False when FastRTC's class no longer has the ``start`` /
        ``process_frames`` / ``has_started`` it relies on; FastRTC then behaves as shipped).
    """
    global _installed
    if _installed:
        return True
    try:
        from fastrtc import tracks
    except ImportError:
        return False
    cls = getattr(tracks, "VideoStreamHandler_", None)
    if cls is None or not all(hasattr(cls, a) for a in ("start", "process_frames", "recv")) \
            or "has_started" not in cls.start.__code__.co_names:
        log.warning("fastrtc's VideoStreamHandler_ changed; camera intake starts with the echo track only")
        return False
    orig_init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # (built outside the event loop: FastRTC never does; recv() still starts it)
            return
        loop.call_soon(lambda: None if self.has_started else loop.create_task(self.start()))

    cls.__init__ = __init__  # type: ignore[method-assign]
    _installed = True
    return True
