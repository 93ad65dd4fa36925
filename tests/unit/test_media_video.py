"""Unit tests for app.media.video (small MP4s synthesised with PyAV inside the tests)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest

from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import (
    MediaError,
    demux_video,
    encode_wav,
    normalize_rotation,
    rotate_frame,
)
from app.media.video import _stream_rotation

W, H, SRC_FPS, N_FRAMES = 64, 48, 10, 20
# stripe 0 is always white (orientation marker), stripes 1..5 are the bits of the index
STRIPES = 6
STRIPE_W = W // STRIPES
AUDIO_RATE = 48_000
TONE_HZ = 440.0


def index_image(i: int) -> np.ndarray:
    img = np.zeros((H, W, 3), np.uint8)
    img[:, :STRIPE_W] = 255
    for bit in range(5):
        if i >> bit & 1:
            img[:, (bit + 1) * STRIPE_W : (bit + 2) * STRIPE_W] = 255
    return img


def read_index(img: np.ndarray) -> int:
    """Inverse of index_image for an upright (h, w) = (H, W) frame."""
    assert img.shape == (H, W, 3)
    row = img[H // 2].astype(int).mean(axis=1)
    centres = [row[s * STRIPE_W + STRIPE_W // 2] for s in range(STRIPES)]
    assert centres[0] > 128, "orientation marker missing: frame is flipped or rotated"
    return sum(1 << bit for bit in range(5) if centres[bit + 1] > 128)


def make_mp4(
    *, audio: bool, rotation: int | None = None, n_frames: int = N_FRAMES
) -> bytes:
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    bio = io.BytesIO()
    with av.open(bio, mode="w", format="mp4") as out:
        vs = out.add_stream(codec, rate=SRC_FPS)
        vs.width, vs.height, vs.pix_fmt = W, H, "yuv420p"
        if rotation is not None:
            vs.set_display_rotation(rotation)
        astream = (
            out.add_stream("aac", rate=AUDIO_RATE, layout="stereo") if audio else None
        )
        for i in range(n_frames):
            frame = av.VideoFrame.from_ndarray(index_image(i), format="rgb24")
            frame.pts = i
            for packet in vs.encode(frame):
                out.mux(packet)
        for packet in vs.encode(None):
            out.mux(packet)
        if astream is not None:
            t = np.arange(int(AUDIO_RATE * n_frames / SRC_FPS)) / AUDIO_RATE
            tone = (0.4 * np.sin(2 * np.pi * TONE_HZ * t) * 32767).astype(np.int16)
            pcm = np.stack([tone, tone], axis=1).reshape(1, -1)  # packed s16 stereo
            aframe = av.AudioFrame.from_ndarray(pcm, format="s16", layout="stereo")
            aframe.sample_rate, aframe.pts = AUDIO_RATE, 0
            for packet in astream.encode(aframe):
                out.mux(packet)
            for packet in astream.encode(None):
                out.mux(packet)
    return bio.getvalue()


@pytest.fixture(scope="module")
def mp4_silent() -> bytes:
    return make_mp4(audio=False)


@pytest.fixture(scope="module")
def mp4_audio() -> bytes:
    return make_mp4(audio=True)


def test_fixture_encoding_is_readable(mp4_silent: bytes) -> None:
    with av.open(io.BytesIO(mp4_silent)) as c:
        idx = [read_index(f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
    assert idx == list(range(N_FRAMES))


def test_demux_one_fps_without_audio(mp4_silent: bytes) -> None:
    v = demux_video(mp4_silent, fps=1.0, audio_rate=INPUT_SAMPLE_RATE_HZ)
    assert [read_index(f) for f in v.frames] == [0, 10]
    assert v.frame_times_s == [0.0, 1.0]
    assert v.audio.shape == (0,) and v.audio.dtype == np.float32
    assert not v.has_audio
    assert v.duration_s == pytest.approx(2.0, abs=1e-3)
    assert v.rotation_deg == 0
    assert v.source_fps == pytest.approx(SRC_FPS)
    assert v.video_frames_decoded == N_FRAMES
    assert all(f.dtype == np.uint8 and f.shape == (H, W, 3) for f in v.frames)


@pytest.mark.parametrize(
    ("fps", "expected"),
    [
        (4.0, [0, 2, 5, 7, 10, 12, 15, 17]),  # int(t * 10) truncates: t=0.25 -> frame 2
        (10.0, list(range(N_FRAMES))),
        # faster than the source: frames repeat
        (20.0, [k // 2 for k in range(2 * N_FRAMES)]),
        (3.0, [0, 3, 6, 10, 13, 16]),
    ],
)
def test_demux_sampling(mp4_silent: bytes, fps: float, expected: list[int]) -> None:
    v = demux_video(mp4_silent, fps=fps, audio_rate=INPUT_SAMPLE_RATE_HZ)
    assert [read_index(f) for f in v.frames] == expected
    assert v.frame_times_s == pytest.approx([k / fps for k in range(len(expected))])


def test_demux_with_audio_track(mp4_audio: bytes) -> None:
    v = demux_video(mp4_audio, fps=1.0, audio_rate=INPUT_SAMPLE_RATE_HZ)
    assert [read_index(f) for f in v.frames] == [0, 10]
    assert v.has_audio
    assert v.audio.dtype == np.float32 and v.audio.ndim == 1
    expected = 2 * INPUT_SAMPLE_RATE_HZ
    # AAC may pad by a frame or two
    assert abs(v.audio.size - expected) < 0.05 * expected
    core = v.audio[2000:-2000]
    spec = np.abs(np.fft.rfft(core * np.hanning(core.size)))
    peak = np.fft.rfftfreq(core.size, 1 / INPUT_SAMPLE_RATE_HZ)[np.argmax(spec)]
    assert abs(peak - TONE_HZ) < 3
    # stereo tone of 0.4 averaged to mono stays 0.4
    assert 0.3 < np.abs(core).max() < 0.5
    assert v.duration_s >= 2.0


def test_demux_from_path(tmp_path: Path, mp4_silent: bytes) -> None:
    path = tmp_path / "clip.mp4"
    path.write_bytes(mp4_silent)
    for src in (path, str(path)):
        v = demux_video(src, fps=2.0, audio_rate=INPUT_SAMPLE_RATE_HZ)
        assert [read_index(f) for f in v.frames] == [0, 5, 10, 15]


@pytest.mark.parametrize("rotation", [90, -90, 180])
def test_demux_applies_display_rotation(rotation: int) -> None:
    v = demux_video(
        make_mp4(audio=False, rotation=rotation, n_frames=10),
        fps=5.0,
        audio_rate=INPUT_SAMPLE_RATE_HZ,
    )
    ccw = rotation % 360
    assert v.rotation_deg == ccw
    expected_shape = (W, H, 3) if ccw in (90, 270) else (H, W, 3)
    assert all(f.shape == expected_shape for f in v.frames)
    # undo the counter-clockwise rotation; the marker stripe proves the direction
    assert [read_index(np.rot90(f, k=-ccw // 90)) for f in v.frames] == [0, 2, 4, 6, 8]
    if ccw == 90:  # the left (marker) stripe of the source ends up at the bottom
        assert v.frames[0][-2, :].mean() > 200 and v.frames[0][1, :].mean() < 60


def test_rotation_helpers() -> None:
    assert [normalize_rotation(d) for d in (0, 90, -90, 180, -180, 270, 360, 89.6)] == [
        0,
        90,
        270,
        180,
        180,
        270,
        0,
        90,
    ]
    img = np.arange(6).reshape(2, 3)
    assert rotate_frame(img, 0) is img
    # counter-clockwise
    assert rotate_frame(img, 90).tolist() == [[2, 5], [1, 4], [0, 3]]
    assert rotate_frame(img, 270).tolist() == [[3, 0], [4, 1], [5, 2]]
    no_matrix = SimpleNamespace(side_data=[], rotation=0)
    legacy = SimpleNamespace(metadata={"rotate": "90"})  # legacy tag: clockwise degrees
    assert _stream_rotation(legacy, no_matrix) == 270
    assert _stream_rotation(SimpleNamespace(metadata={}), no_matrix) == 0


def test_limits(mp4_silent: bytes) -> None:
    with pytest.raises(MediaError) as err:
        demux_video(
            mp4_silent, fps=1.0, audio_rate=INPUT_SAMPLE_RATE_HZ, max_seconds=1.0
        )
    assert err.value.code == "too_large"
    with pytest.raises(MediaError) as err:
        demux_video(
            mp4_silent, fps=10.0, audio_rate=INPUT_SAMPLE_RATE_HZ, max_frames=19
        )
    assert (err.value.code, err.value.param) == ("too_large", "max_frames")
    v = demux_video(
        mp4_silent,
        fps=10.0,
        audio_rate=INPUT_SAMPLE_RATE_HZ,
        max_frames=20,
        max_seconds=2.0,
    )
    assert len(v.frames) == 20


def test_bad_inputs(tmp_path: Path, mp4_silent: bytes) -> None:
    wav_only = encode_wav(np.zeros(1600, np.float32), INPUT_SAMPLE_RATE_HZ)
    for bad in (
        b"",
        b"not a video at all",
        mp4_silent[: len(mp4_silent) // 4],
        wav_only,
        tmp_path / "missing.mp4",
    ):
        with pytest.raises(MediaError) as err:
            demux_video(bad, fps=1.0, audio_rate=INPUT_SAMPLE_RATE_HZ)
        assert err.value.code == "bad_video", (
            bad[:20] if isinstance(bad, bytes) else bad
        )
    with pytest.raises(MediaError) as err:
        demux_video(mp4_silent, fps=0.0, audio_rate=INPUT_SAMPLE_RATE_HZ)
    assert err.value.param == "fps"
