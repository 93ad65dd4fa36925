"""Base64 and ``data:`` URL helpers, plus MIME/extension -> audio format guessing.

All functions are pure; failures raise :class:`app.media.errors.MediaError` with code
``bad_base64`` (malformed input) or ``too_large`` (over a byte limit).
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse

from app.media.errors import BAD_BASE64, TOO_LARGE, MediaError

_B64_ALPHABET = re.compile(rb"\A[A-Za-z0-9+/]*={0,2}\Z")
_WHITESPACE = re.compile(r"\s+")
_MIME_RE = re.compile(r"\A[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*\Z")

DEFAULT_DATA_URL_MIME = "text/plain"
"""MIME type of a ``data:`` URL that names none (RFC 2397)."""


def decode_base64(s: str | bytes, *, max_bytes: int | None = None) -> bytes:
    """Strictly decode standard or URL-safe base64, or the payload of a base64 ``data:`` URL.

    Accepted input: ``"<payload>"`` or ``"data:<mime>[;params];base64,<payload>"``. All ASCII
    whitespace (newlines from MIME-wrapped base64 included) is removed first. The URL-safe
    alphabet (``-``/``_``) is mapped to the standard one (the two are never mixed up because
    neither character belongs to the other alphabet). Missing ``=`` padding is tolerated;
    every other deviation (a foreign character, padding in the middle, a length of ``4k+1``)
    is rejected. An empty payload decodes to ``b""``.

    Args:
        s: the base64 text (``str``, or ASCII ``bytes``).
        max_bytes: optional limit on the decoded size in bytes; checked from the encoded
            length before decoding.

    Returns:
        The decoded bytes.

    Raises:
        MediaError: ``bad_base64`` on malformed input (also for a non-base64 ``data:`` URL);
            ``too_large`` when the decoded size would exceed ``max_bytes``.
    """
    if isinstance(s, (bytes, bytearray, memoryview)):
        try:
            s = bytes(s).decode("ascii")
        except UnicodeDecodeError as exc:
            raise MediaError(BAD_BASE64, "base64 input is not ASCII") from exc
    if not isinstance(s, str):
        raise MediaError(
            BAD_BASE64, f"expected a base64 string, got {type(s).__name__}"
        )
    text = s.strip()
    if text[:5].lower() == "data:":
        header, sep, payload = text.partition(",")
        if not sep:
            raise MediaError(BAD_BASE64, "data URL has no ',' separator")
        params = [p.strip().lower() for p in header[5:].split(";")]
        if "base64" not in params[1:]:
            raise MediaError(
                BAD_BASE64, "data URL is not base64-encoded (missing ';base64')"
            )
        text = payload
    text = _WHITESPACE.sub("", text)
    text = text.replace("-", "+").replace("_", "/")
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError as exc:
        raise MediaError(
            BAD_BASE64, "base64 input contains non-ASCII characters"
        ) from exc
    if not _B64_ALPHABET.match(raw):
        raise MediaError(
            BAD_BASE64, "base64 input contains characters outside the alphabet"
        )
    body = raw.rstrip(b"=")
    if len(body) % 4 == 1:
        raise MediaError(BAD_BASE64, "base64 input has an impossible length")
    pad = len(raw) - len(body)
    if pad and (len(raw) % 4 or pad != -len(body) % 4):
        raise MediaError(BAD_BASE64, "base64 input has wrong padding")
    if max_bytes is not None and (len(body) * 3) // 4 > max_bytes:
        raise MediaError(
            TOO_LARGE,
            f"decoded payload would exceed {max_bytes} bytes",
            param="max_bytes",
        )
    padded = body + b"=" * (-len(body) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MediaError(BAD_BASE64, f"invalid base64: {exc}") from exc


def parse_data_url(url: str, *, max_bytes: int | None = None) -> tuple[str, bytes]:
    """Parse an RFC 2397 ``data:`` URL.

    ``data:[<mime>][;<param>=<value>]*[;base64],<data>``. Base64 payloads are decoded with
    :func:`decode_base64`; other payloads are percent-decoded.

    Args:
        url: the URL text.
        max_bytes: optional limit on the payload size in bytes.

    Returns:
        ``(mime, payload)``: ``mime`` is lower-case without parameters
        (``"audio/webm;codecs=opus"`` -> ``"audio/webm"``), :data:`DEFAULT_DATA_URL_MIME` when the
        URL names none; ``payload`` the decoded bytes.

    Raises:
        MediaError: ``bad_base64`` if ``url`` is not a well-formed data URL or its payload is
            invalid; ``too_large`` over ``max_bytes``.
    """
    if not isinstance(url, str):
        raise MediaError(
            BAD_BASE64, f"expected a data URL string, got {type(url).__name__}"
        )
    text = url.strip()
    if text[:5].lower() != "data:":
        raise MediaError(BAD_BASE64, "not a data URL (must start with 'data:')")
    header, sep, payload = text[5:].partition(",")
    if not sep:
        raise MediaError(BAD_BASE64, "data URL has no ',' separator")
    parts = [p.strip() for p in header.split(";")]
    mime = parts[0].lower() or DEFAULT_DATA_URL_MIME
    if not _MIME_RE.match(mime):
        raise MediaError(BAD_BASE64, f"data URL has an invalid MIME type {parts[0]!r}")
    is_b64 = any(p.lower() == "base64" for p in parts[1:])
    if is_b64:
        data = decode_base64(payload, max_bytes=max_bytes)
    else:
        try:
            data = urllib.parse.unquote_to_bytes(payload)
        except (TypeError, ValueError) as exc:  # pragma: no cover - unquote is lenient
            raise MediaError(BAD_BASE64, f"invalid data URL payload: {exc}") from exc
        if max_bytes is not None and len(data) > max_bytes:
            raise MediaError(
                TOO_LARGE,
                f"data URL payload exceeds {max_bytes} bytes",
                param="max_bytes",
            )
    return mime, data


def to_data_url(data: bytes, mime: str) -> str:
    """Encode bytes as a base64 ``data:`` URL.

    Args:
        data: the payload.
        mime: its MIME type, e.g. ``"audio/wav"`` or ``"image/jpeg"``.

    Returns:
        ``"data:<mime>;base64,<standard base64 with padding>"``.
    """
    return f"data:{mime};base64,{base64.b64encode(bytes(data)).decode('ascii')}"


_AUDIO_FORMATS: dict[str, str] = {
    # MIME types (without parameters)
    "audio/wav": "wav",
    "audio/wave": "wav",
    "audio/x-wav": "wav",
    "audio/vnd.wave": "wav",
    "audio/x-pn-wav": "wav",
    "audio/flac": "flac",
    "audio/x-flac": "flac",
    "audio/ogg": "ogg",
    "application/ogg": "ogg",
    "audio/opus": "opus",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mpeg3": "mp3",
    "audio/x-mpeg-3": "mp3",
    "audio/webm": "webm",
    "video/webm": "webm",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/m4a": "m4a",
    "audio/aac": "aac",
    "audio/x-aac": "aac",
    "audio/pcm": "pcm16",
    "audio/basic": "g711_ulaw",
    "audio/pcmu": "g711_ulaw",
    "audio/pcma": "g711_alaw",
    # extensions / format names
    "wav": "wav",
    "wave": "wav",
    "flac": "flac",
    "ogg": "ogg",
    "oga": "ogg",
    "opus": "opus",
    "mp3": "mp3",
    "webm": "webm",
    "m4a": "m4a",
    "mp4": "m4a",
    "aac": "aac",
    "pcm": "pcm16",
    "pcm16": "pcm16",
    "s16le": "pcm16",
    "pcm_s16le": "pcm16",
    "f32le": "pcm_f32le",
    "pcm_f32le": "pcm_f32le",
    "float32": "pcm_f32le",
    "ulaw": "g711_ulaw",
    "mulaw": "g711_ulaw",
    "g711_ulaw": "g711_ulaw",
    "alaw": "g711_alaw",
    "g711_alaw": "g711_alaw",
}


def guess_audio_format(mime_or_ext: str | None) -> str | None:
    """Map a MIME type, file name/extension or format name to a :func:`decode_audio` ``fmt``.

    Examples: ``"audio/x-wav"`` -> ``"wav"``, ``"audio/webm;codecs=opus"`` -> ``"webm"``,
    ``"clip.MP3"`` / ``".mp3"`` / ``"mp3"`` -> ``"mp3"``, ``"audio/pcmu"`` -> ``"g711_ulaw"``.

    Args:
        mime_or_ext: the hint (case-insensitive), or ``None``.

    Returns:
        A canonical format name (``wav``, ``flac``, ``ogg``, ``opus``, ``mp3``, ``webm``,
        ``m4a``, ``aac``, ``pcm16``, ``pcm_f32le``, ``g711_ulaw``, ``g711_alaw``), or ``None``
        when unknown. Never raises.
    """
    if not mime_or_ext or not isinstance(mime_or_ext, str):
        return None
    key = mime_or_ext.strip().lower().split(";", 1)[0].strip()
    if key in _AUDIO_FORMATS:
        return _AUDIO_FORMATS[key]
    if "/" not in key or "." in key.rsplit("/", 1)[-1]:
        ext = key.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
        return _AUDIO_FORMATS.get(ext)
    return None
