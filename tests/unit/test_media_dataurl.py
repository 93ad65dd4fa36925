"""Unit tests for app.media.dataurl and app.media.errors."""

from __future__ import annotations

import base64

import pytest

from app.media import (
    MediaError,
    decode_base64,
    guess_audio_format,
    parse_data_url,
    to_data_url,
)

PAYLOAD = bytes(range(256)) * 3 + b"\xfb\xff"  # exercises '+' and '/' in base64


def test_decode_base64_plain_and_wrapped() -> None:
    b64 = base64.b64encode(PAYLOAD).decode()
    assert decode_base64(b64) == PAYLOAD
    wrapped = "\n".join(b64[i : i + 76] for i in range(0, len(b64), 76))
    assert decode_base64("  " + wrapped + "\r\n") == PAYLOAD
    assert decode_base64(b64.encode()) == PAYLOAD
    assert decode_base64("") == b""


def test_decode_base64_urlsafe_and_missing_padding() -> None:
    data = b"\xfb\xff\xfe?>"
    urlsafe = base64.urlsafe_b64encode(data).decode()
    assert "-" in urlsafe or "_" in urlsafe
    assert decode_base64(urlsafe) == data
    assert decode_base64(base64.b64encode(b"ab").decode().rstrip("=")) == b"ab"


@pytest.mark.parametrize(
    "bad",
    [
        "abc$",
        "QUJD\x00",
        "Q",
        "QUJDR",
        "QQ=",
        "QQ===",
        "QU=JD",
        "QUJDRE=",
        "data:,QUJD",
        "data:audio/wav;base64",
        "héllo==",
    ],
)
def test_decode_base64_rejects(bad: str) -> None:
    with pytest.raises(MediaError) as err:
        decode_base64(bad)
    assert err.value.code == "bad_base64"
    assert isinstance(err.value, ValueError)


def test_decode_base64_accepts_data_url_and_limit() -> None:
    url = to_data_url(PAYLOAD, "audio/wav")
    assert url.startswith("data:audio/wav;base64,")
    assert decode_base64(url) == PAYLOAD
    assert decode_base64(url, max_bytes=len(PAYLOAD)) == PAYLOAD
    with pytest.raises(MediaError) as err:
        decode_base64(url, max_bytes=len(PAYLOAD) - 1)
    assert err.value.code == "too_large"


def test_parse_data_url() -> None:
    mime, data = parse_data_url(
        "data:Audio/WebM;codecs=opus;base64,"
        + base64.b64encode(b"\x1aE\xdf\xa3").decode()
    )
    assert (mime, data) == ("audio/webm", b"\x1aE\xdf\xa3")
    assert parse_data_url("data:,Hello%2C%20World") == ("text/plain", b"Hello, World")
    assert parse_data_url(to_data_url(b"", "image/png")) == ("image/png", b"")
    for bad in (
        "http://x/y.png",
        "data:image/png;base64",
        "data:not a mime;base64,QUJD",
        "data:image/png;base64,@@@@",
    ):
        with pytest.raises(MediaError) as err:
            parse_data_url(bad)
        assert err.value.code == "bad_base64"


@pytest.mark.parametrize(
    ("hint", "fmt"),
    [
        ("audio/wav", "wav"),
        ("audio/x-wav", "wav"),
        ("audio/webm;codecs=opus", "webm"),
        ("audio/mpeg", "mp3"),
        ("clip.MP3", "mp3"),
        (".flac", "flac"),
        ("ogg", "ogg"),
        ("audio/pcmu", "g711_ulaw"),
        ("pcm16", "pcm16"),
        ("audio/L16", None),  # RFC 2586 L16 is big-endian: not our pcm16
        ("/tmp/a.b/voice.opus", "opus"),
        ("image/png", None),
        ("", None),
        (None, None),
        ("application/x-unknown", None),
    ],
)
def test_guess_audio_format(hint: str | None, fmt: str | None) -> None:
    assert guess_audio_format(hint) == fmt


def test_media_error_fields() -> None:
    err = MediaError("too_large", "way too big", param="max_bytes")
    assert (err.code, err.param, str(err)) == ("too_large", "max_bytes", "way too big")
    assert MediaError("bad_audio").param is None
    with pytest.raises(ValueError):
        MediaError("no_such_code")
