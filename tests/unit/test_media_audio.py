"""Unit tests for app.media.audio and app.media.g711."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import soundfile as sf
import soxr

from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ, ms_to_samples
from app.media import (
    MediaError,
    PcmStreamResampler,
    decode_audio,
    encode_audio,
    encode_wav,
    float_to_pcm16,
    g711,
    pcm16_to_float,
    resample,
)


def sine(freq: float, rate: int, seconds: float, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def chirp(rate: int, seconds: float) -> np.ndarray:
    """A 200 -> 3000 Hz linear sweep with a Hann envelope (non-periodic), peak 0.6."""
    t = np.arange(round(rate * seconds)) / rate
    phase = 2 * np.pi * (200 * t + (3000 - 200) / (2 * seconds) * t**2)
    return (0.6 * np.hanning(t.size) * np.sin(phase)).astype(np.float32)


def peak_hz(x: np.ndarray, rate: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.fft.rfftfreq(x.size, 1 / rate)[np.argmax(spec)])


def amplitude_at(x: np.ndarray, rate: int, freq: float) -> float:
    """Amplitude of a sinusoid at ``freq`` (least squares fit)."""
    t = np.arange(x.size) / rate
    basis = np.stack(
        [np.sin(2 * np.pi * freq * t), np.cos(2 * np.pi * freq * t)], axis=1
    )
    coef, *_ = np.linalg.lstsq(basis, x.astype(np.float64), rcond=None)
    return float(np.hypot(*coef))


def best_corr(a: np.ndarray, b: np.ndarray, max_lag: int = 3000) -> float:
    """Max normalised correlation of a and b over lags in [-max_lag, max_lag]."""
    best = -1.0
    for lag in range(-max_lag, max_lag + 1, 1):
        x = a[max(0, lag) :]
        y = b[max(0, -lag) :]
        n = min(x.size, y.size)
        if n < a.size // 2:
            continue
        x, y = x[:n], y[:n]
        c = float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-12))
        best = max(best, c)
    return best


# ------------------------------------------------------------------ PCM16 conversion


def test_float_to_pcm16_full_scale_and_clipping() -> None:
    x = np.array([1.0, -1.0, 1.5, -1.5, 0.0, 0.5, -0.25, np.nan], dtype=np.float32)
    pcm = np.frombuffer(float_to_pcm16(x), dtype="<i2")
    assert pcm.tolist() == [32767, -32767, 32767, -32767, 0, 16384, -8192, 0]
    assert float_to_pcm16(np.array([1.0], np.float32)) == b"\xff\x7f"  # little-endian
    # no wrap to -32768
    assert float_to_pcm16(np.array([10.0], np.float64)) == b"\xff\x7f"


def test_float_to_pcm16_rejects_non_float() -> None:
    with pytest.raises(MediaError) as err:
        float_to_pcm16(np.array([1, 2, 3], dtype=np.int16))
    assert err.value.code == "bad_audio"
    with pytest.raises(MediaError):
        float_to_pcm16(np.zeros((2, 2), np.float32))


def test_pcm16_to_float_values_and_odd_bytes() -> None:
    data = np.array([-32768, 0, 32767, 16384], dtype="<i2").tobytes()
    x = pcm16_to_float(data)
    assert x.dtype == np.float32
    np.testing.assert_allclose(x, [-1.0, 0.0, 32767 / 32768, 0.5])
    with pytest.raises(MediaError) as err:
        pcm16_to_float(b"\x00\x01\x02")
    assert err.value.code == "bad_audio"


def test_decode_pcm16_odd_byte_count_raises() -> None:
    with pytest.raises(MediaError) as err:
        decode_audio(
            b"\x00" * 7,
            target_rate=INPUT_SAMPLE_RATE_HZ,
            fmt="pcm16",
            input_rate=INPUT_SAMPLE_RATE_HZ,
        )
    assert err.value.code == "bad_audio"


def test_decode_pcm16_needs_input_rate() -> None:
    with pytest.raises(MediaError) as err:
        decode_audio(b"\x00\x00", target_rate=INPUT_SAMPLE_RATE_HZ, fmt="pcm16")
    assert err.value.param == "input_rate"


def test_decode_raw_pcm16_resamples() -> None:
    x = sine(440, OUTPUT_SAMPLE_RATE_HZ, 1.0)
    y = decode_audio(
        float_to_pcm16(x),
        target_rate=INPUT_SAMPLE_RATE_HZ,
        fmt="s16le",
        input_rate=OUTPUT_SAMPLE_RATE_HZ,
    )
    assert y.shape == (INPUT_SAMPLE_RATE_HZ,)
    assert abs(peak_hz(y, INPUT_SAMPLE_RATE_HZ) - 440) < 2
    assert abs(amplitude_at(y, INPUT_SAMPLE_RATE_HZ, 440) - 0.5) < 0.01


def test_decode_raw_float32_is_clipped() -> None:
    raw = np.array([0.25, 2.0, -3.0], dtype="<f4").tobytes()
    y = decode_audio(
        raw,
        target_rate=INPUT_SAMPLE_RATE_HZ,
        fmt="pcm_f32le",
        input_rate=INPUT_SAMPLE_RATE_HZ,
    )
    np.testing.assert_allclose(y, [0.25, 1.0, -1.0])
    with pytest.raises(MediaError):
        decode_audio(
            b"\x00" * 5,
            target_rate=INPUT_SAMPLE_RATE_HZ,
            fmt="f32le",
            input_rate=INPUT_SAMPLE_RATE_HZ,
        )


# ------------------------------------------------------------------ containers


@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_stereo_wav_to_mono_16k(rate: int) -> None:
    seconds = 1.5
    left = sine(440, rate, seconds, amp=0.6)
    right = sine(1000, rate, seconds, amp=0.2)
    bio = io.BytesIO()
    sf.write(bio, np.stack([left, right], axis=1), rate, format="WAV", subtype="PCM_16")
    y = decode_audio(bio.getvalue(), target_rate=INPUT_SAMPLE_RATE_HZ)
    assert y.dtype == np.float32 and y.ndim == 1
    assert abs(y.size - ms_to_samples(seconds * 1000, INPUT_SAMPLE_RATE_HZ)) <= 1
    assert abs(peak_hz(y, INPUT_SAMPLE_RATE_HZ) - 440) < 2
    # channel mean: 440 Hz at 0.6/2, 1000 Hz at 0.2/2
    assert abs(amplitude_at(y, INPUT_SAMPLE_RATE_HZ, 440) - 0.3) < 0.01
    assert abs(amplitude_at(y, INPUT_SAMPLE_RATE_HZ, 1000) - 0.1) < 0.01


def test_stereo_opposite_channels_cancel() -> None:
    x = sine(300, 48_000, 0.5)
    bio = io.BytesIO()
    sf.write(bio, np.stack([x, -x], axis=1), 48_000, format="WAV", subtype="FLOAT")
    y = decode_audio(bio.getvalue(), target_rate=INPUT_SAMPLE_RATE_HZ)
    assert y.size == INPUT_SAMPLE_RATE_HZ // 2
    assert np.abs(y).max() < 1e-4


def test_empty_audio_returns_empty() -> None:
    for kwargs in (
        {},
        {"fmt": "pcm16", "input_rate": INPUT_SAMPLE_RATE_HZ},
        {"fmt": "g711_ulaw"},
        {"fmt": "wav"},
    ):
        y = decode_audio(b"", target_rate=INPUT_SAMPLE_RATE_HZ, **kwargs)
        assert y.shape == (0,) and y.dtype == np.float32
    bio = io.BytesIO()
    sf.write(bio, np.zeros((0, 2), np.float32), 48_000, format="WAV", subtype="PCM_16")
    y = decode_audio(bio.getvalue(), target_rate=INPUT_SAMPLE_RATE_HZ)
    assert y.shape == (0,)


def test_wav_round_trip_is_exact_to_quantisation() -> None:
    x = sine(440, OUTPUT_SAMPLE_RATE_HZ, 0.5, amp=0.9)
    data = encode_wav(x, OUTPUT_SAMPLE_RATE_HZ)
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    info = sf.info(io.BytesIO(data))
    assert (info.samplerate, info.channels, info.subtype) == (
        OUTPUT_SAMPLE_RATE_HZ,
        1,
        "PCM_16",
    )
    y = decode_audio(data, target_rate=OUTPUT_SAMPLE_RATE_HZ)
    assert y.shape == x.shape
    assert np.abs(y - x).max() < 2 / 32767


def test_encode_wav_clips_instead_of_wrapping() -> None:
    data = encode_wav(np.array([1.5, -1.5, 1.0], np.float32), INPUT_SAMPLE_RATE_HZ)
    pcm, _ = sf.read(io.BytesIO(data), dtype="int16")
    assert pcm.tolist() == [32767, -32767, 32767]


@pytest.mark.parametrize("fmt", ["wav", "flac", "ogg", "mp3", "opus"])
def test_container_round_trip(fmt: str) -> None:
    rate = OUTPUT_SAMPLE_RATE_HZ
    x = chirp(rate, 1.0)
    data = encode_audio(x, rate, fmt)
    assert len(data) > 100
    y = decode_audio(data, target_rate=rate, fmt=fmt, max_seconds=5.0)
    assert abs(y.size - x.size) < rate // 10, (fmt, y.size)
    lag = 0 if fmt in ("wav", "flac") else 600
    assert best_corr(x, y, max_lag=lag) > (0.999 if lag == 0 else 0.98)
    # the sweep does not match itself inverted
    assert best_corr(x, -y, max_lag=lag) < 0.9


def test_encode_pcm16_is_raw() -> None:
    x = np.array([0.0, 1.0, -1.0], np.float32)
    assert encode_audio(x, INPUT_SAMPLE_RATE_HZ, "pcm16") == float_to_pcm16(x)


def test_decode_accepts_mime_hint() -> None:
    x = sine(440, INPUT_SAMPLE_RATE_HZ, 0.2)
    y = decode_audio(
        encode_wav(x, INPUT_SAMPLE_RATE_HZ),
        target_rate=INPUT_SAMPLE_RATE_HZ,
        fmt="audio/x-wav",
    )
    assert y.size == x.size


def test_unsupported_formats() -> None:
    with pytest.raises(MediaError) as err:
        decode_audio(b"abcd", target_rate=INPUT_SAMPLE_RATE_HZ, fmt="midi")
    assert (err.value.code, err.value.param) == ("unsupported_format", "fmt")
    with pytest.raises(MediaError) as err:
        encode_audio(np.zeros(10, np.float32), INPUT_SAMPLE_RATE_HZ, "aiff-ish")
    assert err.value.code == "unsupported_format"


def test_garbage_is_bad_audio_not_library_error() -> None:
    for junk in (
        b"definitely not audio",
        b"RIFF\x00\x00\x00\x00WAVEjunk",
        bytes(range(256)) * 4,
    ):
        with pytest.raises(MediaError) as err:
            decode_audio(junk, target_rate=INPUT_SAMPLE_RATE_HZ)
        assert err.value.code == "bad_audio"
        assert isinstance(err.value, ValueError)


def test_max_seconds() -> None:
    x = sine(440, INPUT_SAMPLE_RATE_HZ, 2.0)
    wav = encode_wav(x, INPUT_SAMPLE_RATE_HZ)
    assert (
        decode_audio(wav, target_rate=INPUT_SAMPLE_RATE_HZ, max_seconds=2.0).size
        == x.size
    )
    with pytest.raises(MediaError) as err:
        decode_audio(wav, target_rate=INPUT_SAMPLE_RATE_HZ, max_seconds=1.5)
    assert err.value.code == "too_large"
    with pytest.raises(MediaError) as err:
        decode_audio(
            float_to_pcm16(x),
            target_rate=INPUT_SAMPLE_RATE_HZ,
            fmt="pcm16",
            input_rate=INPUT_SAMPLE_RATE_HZ,
            max_seconds=1.0,
        )
    assert err.value.code == "too_large"
    with pytest.raises(MediaError) as err:
        decode_audio(
            encode_audio(x, INPUT_SAMPLE_RATE_HZ, "mp3"),
            target_rate=INPUT_SAMPLE_RATE_HZ,
            max_seconds=1.0,
        )
    assert err.value.code == "too_large"


# ------------------------------------------------------------------ G.711


def test_g711_known_values() -> None:
    ulaw = decode_audio(
        bytes([0xFF, 0x80, 0x00, 0x7F]),
        target_rate=g711.G711_SAMPLE_RATE_HZ,
        fmt="g711_ulaw",
    )
    np.testing.assert_allclose(ulaw * 32768, [0, 32124, -32124, 0])
    alaw = decode_audio(
        bytes([0xD5, 0x55, 0xAA, 0x2A]),
        target_rate=g711.G711_SAMPLE_RATE_HZ,
        fmt="g711_alaw",
    )
    np.testing.assert_allclose(alaw * 32768, [8, -8, 32256, -32256])


def test_g711_matches_audioop_reference() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")
    all_bytes = bytes(range(256))
    ref_u = np.frombuffer(audioop.ulaw2lin(all_bytes, 2), "<i2")
    ref_a = np.frombuffer(audioop.alaw2lin(all_bytes, 2), "<i2")
    np.testing.assert_array_equal(g711.ulaw_decode(all_bytes), ref_u)
    np.testing.assert_array_equal(g711.alaw_decode(all_bytes), ref_a)
    pcm = np.arange(-32768, 32768, 7, dtype=np.int16)
    assert g711.ulaw_encode(pcm) == audioop.lin2ulaw(pcm.astype("<i2").tobytes(), 2)
    assert g711.alaw_encode(pcm) == audioop.lin2alaw(pcm.astype("<i2").tobytes(), 2)


@pytest.mark.parametrize("fmt", ["g711_ulaw", "g711_alaw"])
def test_g711_round_trip_and_resample(fmt: str) -> None:
    rate = g711.G711_SAMPLE_RATE_HZ
    x = sine(400, rate, 1.0, amp=0.5)
    data = encode_audio(x, rate, fmt)
    assert len(data) == x.size
    y = decode_audio(data, target_rate=rate, fmt=fmt)
    assert np.abs(y - x).max() < 0.02
    y16 = decode_audio(data, target_rate=INPUT_SAMPLE_RATE_HZ, fmt=fmt)
    assert y16.size == 2 * x.size
    assert abs(peak_hz(y16, INPUT_SAMPLE_RATE_HZ) - 400) < 2


# ------------------------------------------------------------------ resampling


def test_resample_keeps_frequency_and_length() -> None:
    x = sine(440, 48_000, 1.0)
    y = resample(x, 48_000, INPUT_SAMPLE_RATE_HZ)
    assert y.dtype == np.float32 and y.shape == (INPUT_SAMPLE_RATE_HZ,)
    assert abs(peak_hz(y, INPUT_SAMPLE_RATE_HZ) - 440) < 2
    same = resample(x, 48_000, 48_000)
    assert same is not x and np.array_equal(same, x)
    assert resample(np.zeros(0, np.float32), 48_000, INPUT_SAMPLE_RATE_HZ).shape == (0,)
    with pytest.raises(MediaError):
        resample(x, 0, INPUT_SAMPLE_RATE_HZ)


def test_stream_resampler_matches_one_shot() -> None:
    rate_in = 48_000
    x = sine(440, rate_in, 1.0)
    rng = np.random.default_rng(0)
    rs = PcmStreamResampler(rate_in, INPUT_SAMPLE_RATE_HZ)
    out, pos = [], 0
    while pos < x.size:
        n = int(rng.integers(1, 2000))
        out.append(rs.process(x[pos : pos + n]))
        pos += n
    out.append(rs.process(np.zeros(0, np.float32), last=True))
    y = np.concatenate(out)
    assert abs(y.size - INPUT_SAMPLE_RATE_HZ) <= 2
    ref = soxr.resample(x, rate_in, INPUT_SAMPLE_RATE_HZ, quality="HQ")
    n = min(y.size, ref.size)
    assert np.abs(y[:n] - ref[:n]).max() < 1e-3
    assert rs.finished
    with pytest.raises(MediaError):
        rs.process(x[:10])
    rs.reset()
    assert rs.process(x[:4800], last=True).size == 1600


def test_stream_resampler_passthrough() -> None:
    rs = PcmStreamResampler(INPUT_SAMPLE_RATE_HZ, INPUT_SAMPLE_RATE_HZ)
    x = sine(100, INPUT_SAMPLE_RATE_HZ, 0.1)
    y = rs.process(x)
    assert np.array_equal(x, y) and y is not x


@pytest.mark.parametrize(
    ("fmt", "container", "codec"), [("webm", "webm", "libopus"), ("m4a", "ipod", "aac")]
)
def test_pyav_fallback_decode(fmt: str, container: str, codec: str) -> None:
    """Containers libsndfile cannot read (browser WebM/Opus, AAC in MP4) go through PyAV."""
    from app.media.audio import _av_write

    rate = 48_000
    x = chirp(rate, 1.0)
    data = _av_write(x, rate, container, codec)
    with pytest.raises(sf.LibsndfileError):
        sf.info(io.BytesIO(data))  # proves this input really needs the fallback
    y = decode_audio(data, target_rate=INPUT_SAMPLE_RATE_HZ, fmt=fmt)
    ref = resample(x, rate, INPUT_SAMPLE_RATE_HZ)
    assert abs(y.size - ref.size) < INPUT_SAMPLE_RATE_HZ // 10
    assert best_corr(ref, y, max_lag=600) > 0.95
    assert best_corr(ref, -y, max_lag=600) < 0.9


@pytest.mark.parametrize("fmt", ["mp3", "opus"])
def test_encode_falls_back_to_pyav(monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    from app.media import audio as audio_mod

    monkeypatch.setattr(audio_mod, "_sf_supports", lambda *_: False)
    rate = OUTPUT_SAMPLE_RATE_HZ
    x = chirp(rate, 1.0)
    data = encode_audio(x, rate, fmt)
    y = decode_audio(data, target_rate=rate)
    assert best_corr(x, y, max_lag=2000) > 0.98


@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_U8", "PCM_32", "FLOAT"])
def test_pyav_sample_format_conversion(subtype: str) -> None:
    """The PyAV path converts packed int/float sample formats to [-1, 1] and averages."""
    from app.media.audio import _decode_pyav

    rate = 48_000
    t = np.arange(4800) / rate
    x = np.stack([0.5 * np.sin(2 * np.pi * 440 * t), np.full_like(t, -0.1)], axis=1)
    bio = io.BytesIO()
    sf.write(bio, x, rate, format="WAV", subtype=subtype)
    y, got_rate = _decode_pyav(bio.getvalue(), None)
    assert got_rate == rate and y.shape == (4800,)
    tol = 0.01 if subtype == "PCM_U8" else 1e-4
    assert np.abs(y - x.mean(axis=1)).max() < tol


def test_drop_leading_silence_keeps_5_ms_before_the_first_sound() -> None:
    from app.media import drop_leading_silence

    rate = 24_000
    tone = 0.3 * np.cos(2 * np.pi * 440 * np.arange(rate // 10) / rate).astype(np.float32)  # loud from its first sample
    x = np.concatenate([np.full(960, 1e-5, np.float32), tone])  # 40 ms at -100 dBFS, then the sound
    y = drop_leading_silence(x, rate)
    assert y.size == tone.size + 120 and np.array_equal(y[120:], tone)
    assert drop_leading_silence(tone, rate).size == tone.size  # nothing to drop
    quiet = np.zeros(480, np.float32)
    assert drop_leading_silence(quiet, rate).size == quiet.size  # all silence: left to the caller
    with pytest.raises(MediaError):
        drop_leading_silence(x, 0)
