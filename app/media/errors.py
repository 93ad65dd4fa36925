"""The one exception type the media package raises.

Every public function in :mod:`app.media` converts library failures (soundfile, PyAV, Pillow,
soxr, binascii) into :class:`MediaError`, so callers (the API layer) can map ``code`` to an
HTTP 400 / realtime ``error`` event without knowing which library was involved.
"""

from __future__ import annotations

from typing import Final

BAD_AUDIO: Final[str] = "bad_audio"
"""Audio bytes could not be decoded (corrupt container, odd PCM16 byte count, ...)."""

BAD_IMAGE: Final[str] = "bad_image"
"""Image bytes could not be decoded."""

BAD_VIDEO: Final[str] = "bad_video"
"""Video bytes/file could not be demuxed or decoded."""

BAD_BASE64: Final[str] = "bad_base64"
"""A base64 string or data URL is malformed."""

TOO_LARGE: Final[str] = "too_large"
"""Input exceeds a size, pixel or duration limit."""

UNSUPPORTED_FORMAT: Final[str] = "unsupported_format"
"""A format name (codec, container, raw layout) is not supported."""

ERROR_CODES: Final[frozenset[str]] = frozenset(
    {BAD_AUDIO, BAD_IMAGE, BAD_VIDEO, BAD_BASE64, TOO_LARGE, UNSUPPORTED_FORMAT}
)
"""All stable codes a :class:`MediaError` may carry."""


class MediaError(ValueError):
    """Invalid or unsupported media input.

    Subclasses :class:`ValueError`, so generic validation handlers also catch it.

    Attributes:
        code: stable machine-readable code, one of :data:`ERROR_CODES`
            (``bad_audio``, ``bad_image``, ``bad_video``, ``bad_base64``, ``too_large``,
            ``unsupported_format``).
        param: optional name of the offending request parameter / argument (e.g. ``"fmt"``),
            or ``None``.
        message: the human-readable message (also ``str(err)``).
    """

    def __init__(
        self, code: str, message: str | None = None, *, param: str | None = None
    ) -> None:
        """Create the error.

        Args:
            code: one of :data:`ERROR_CODES`.
            message: human-readable detail; defaults to ``code``.
            param: optional name of the offending parameter.

        Raises:
            ValueError: ``code`` is not a known code (a programming error, not bad input).
        """
        if code not in ERROR_CODES:
            raise ValueError(f"unknown MediaError code {code!r}")
        self.code = code
        self.param = param
        self.message = message or code
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"MediaError(code={self.code!r}, message={self.message!r}, param={self.param!r})"
