"""Video demux with PyAV: frames sampled at a fixed rate, plus the audio track.

Frames are uint8 RGB arrays, shape ``(h, w, 3)``, upright (container rotation applied);
audio is float32 mono. Failures raise :class:`app.media.errors.MediaError`
(``bad_video`` / ``too_large``).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.media.audio import AvAudioCollector, resample
from app.media.errors import BAD_VIDEO, TOO_LARGE, MediaError


@dataclass
class DemuxedVideo:
    """Result of :func:`demux_video`.

    Attributes:
        frames: sampled frames, uint8 RGB, each shape (h, w, 3) (rotation applied), one per
            sample time; consecutive entries may be equal when ``fps`` exceeds the source rate.
        frame_times_s: sample time of each frame, seconds from the first video frame
            (``k / fps``).
        audio: float32 mono, shape (n,), at ``audio_rate``; shape (0,) without an audio track.
        duration_s: media length, seconds: the longer of the video span (last frame time plus
            its duration) and the audio length.
        rotation_deg: counter-clockwise display rotation that was applied to the frames, one
            of 0/90/180/270 (the display-matrix convention of ffprobe and PyAV
            ``VideoFrame.rotation``; a legacy clockwise ``rotate`` tag of 90 gives 270).
        audio_rate: rate of ``audio``, Hz.
        source_fps: the stream's average frame rate, or 0.0 when unknown.
        has_audio: whether the container had an audio track.
        video_frames_decoded: how many source frames were decoded.
    """

    frames: list[np.ndarray]
    frame_times_s: list[float]
    audio: np.ndarray
    duration_s: float
    rotation_deg: int
    audio_rate: int = 0
    source_fps: float = 0.0
    has_audio: bool = False
    video_frames_decoded: int = 0


def normalize_rotation(degrees: float) -> int:
    """Round an angle to the nearest multiple of 90 and wrap into {0, 90, 180, 270}."""
    return round(float(degrees) / 90.0) % 4 * 90


def rotate_frame(rgb: np.ndarray, rotation_deg: int) -> np.ndarray:
    """Rotate an image counter-clockwise by ``rotation_deg`` (multiple of 90) for display.

    Args:
        rgb: array of shape (h, w, ...) (any dtype).
        rotation_deg: counter-clockwise angle, degrees; normalised with
            :func:`normalize_rotation`.

    Returns:
        A contiguous array; (w, h, ...) for 90/270, the input itself for 0.
    """
    k = normalize_rotation(rotation_deg) // 90
    if k == 0:
        return rgb
    return np.ascontiguousarray(np.rot90(rgb, k=k))


def _stream_rotation(stream: Any, first_frame: Any) -> int:
    """Counter-clockwise rotation from the frame's display matrix, else the ``rotate`` tag.

    PyAV < 18 iterates a frame's side data as entries with a ``type``; PyAV 18 iterates their
    types (``av.sidedata.sidedata.Type``) as the keys of a mapping: both are read."""
    side_data = getattr(first_frame, "side_data", None) or []
    if any("DISPLAYMATRIX" in str(getattr(sd, "type", sd)) for sd in side_data):
        return normalize_rotation(getattr(first_frame, "rotation", 0) or 0)
    tag = (stream.metadata or {}).get("rotate")
    if tag:
        try:
            return normalize_rotation(-float(tag))  # the tag is clockwise
        except ValueError:
            return 0
    return 0


def _open(data_or_path: bytes | str | Path) -> Any:
    import av

    if isinstance(data_or_path, (bytes, bytearray, memoryview)):
        if len(data_or_path) == 0:
            raise MediaError(BAD_VIDEO, "video data is empty")
        source: Any = io.BytesIO(bytes(data_or_path))
    elif isinstance(data_or_path, (str, Path)):
        path = Path(data_or_path)
        if not path.is_file():
            raise MediaError(BAD_VIDEO, f"no such video file: {path}")
        source = str(path)
    else:
        raise MediaError(
            BAD_VIDEO, f"expected bytes or a path, got {type(data_or_path).__name__}"
        )
    try:
        return av.open(source, mode="r")
    except Exception as exc:
        raise MediaError(BAD_VIDEO, f"cannot open video: {exc}") from exc


def demux_video(
    data_or_path: bytes | str | Path,
    *,
    fps: float,
    audio_rate: int,
    max_seconds: float | None = None,
    max_frames: int | None = None,
) -> DemuxedVideo:
    """Decode a video file: frames sampled every ``1 / fps`` s plus its audio track.

    Sampling: sample ``k`` is at ``t_k = k / fps`` (``t_k`` below the video's end) and takes
    the decoded frame that is on screen at ``t_k``: the last frame whose timestamp (relative
    to the first frame) is ``<= t_k`` (with a tolerance of 1 ms or a tenth of a frame). For
    constant-frame-rate video that is frame ``int(t_k * video_fps)``; variable-rate video
    (browser WebM) is handled by the timestamps. Frames are converted to RGB only when
    picked; container rotation (display matrix or ``rotate`` tag, which PyAV does not apply)
    is applied with ``np.rot90``. The audio track (the first one) is decoded in the same
    pass, averaged to mono and resampled to ``audio_rate``; it is not shifted against the
    video.

    Args:
        data_or_path: the file's bytes, or a path to it.
        fps: sampling rate, frames per second (> 0), e.g. 1.0 for one frame per unit.
        audio_rate: rate of the returned audio, Hz (e.g. ``INPUT_SAMPLE_RATE_HZ``).
        max_seconds: optional limit on the media length (checked from the header when it has
            one, and while decoding).
        max_frames: optional limit on the number of sampled frames.

    Returns:
        A :class:`DemuxedVideo`.

    Raises:
        MediaError: ``bad_video`` (unreadable, no video stream, no decodable frame, bad
            arguments), ``too_large`` (over ``max_seconds`` or ``max_frames``).
    """
    if (
        isinstance(fps, bool)
        or not isinstance(fps, (int, float))
        or not fps > 0
        or math.isinf(fps)
    ):
        raise MediaError(BAD_VIDEO, f"fps must be > 0, got {fps!r}", param="fps")
    if (
        isinstance(audio_rate, bool)
        or not isinstance(audio_rate, int)
        or audio_rate <= 0
    ):
        raise MediaError(
            BAD_VIDEO,
            f"audio_rate must be a positive int, got {audio_rate!r}",
            param="audio_rate",
        )
    container = _open(data_or_path)
    try:
        return _demux(container, float(fps), audio_rate, max_seconds, max_frames)
    except MediaError:
        raise
    except Exception as exc:
        raise MediaError(BAD_VIDEO, f"cannot decode video: {exc}") from exc
    finally:
        container.close()


def _too_large(msg: str, param: str) -> MediaError:
    return MediaError(TOO_LARGE, msg, param=param)


def _demux(
    container: Any,
    fps: float,
    audio_rate: int,
    max_seconds: float | None,
    max_frames: int | None,
) -> DemuxedVideo:
    if not container.streams.video:
        raise MediaError(BAD_VIDEO, "no video stream in the input")
    vstream = container.streams.video[0]
    vstream.thread_type = "AUTO"
    astream = container.streams.audio[0] if container.streams.audio else None
    if max_seconds is not None and container.duration:
        header_s = container.duration / 1_000_000
        if header_s > max_seconds + 0.5:
            raise _too_large(
                f"video is {header_s:.1f} s long, limit {max_seconds:g} s",
                "max_seconds",
            )
    rate = vstream.average_rate or vstream.guessed_rate
    source_fps = float(rate) if rate else 0.0
    tol = min(1e-3, 0.1 / source_fps) if source_fps else 1e-3

    frames: list[np.ndarray] = []
    times: list[float] = []
    rotation = 0
    state: dict[str, Any] = {"cur": None, "rgb": None}

    def emit_before(limit_s: float) -> None:
        """Emit samples with t_k < limit_s - tol from the current frame."""
        while len(frames) / fps < limit_s - tol:
            if max_frames is not None and len(frames) >= max_frames:
                raise _too_large(
                    f"video yields more than {max_frames} frames at {fps:g} fps",
                    "max_frames",
                )
            if state["rgb"] is None:
                state["rgb"] = rotate_frame(
                    state["cur"].to_ndarray(format="rgb24"), rotation
                )
            times.append(len(frames) / fps)
            frames.append(state["rgb"].copy())

    audio = AvAudioCollector(max_seconds)
    t0: float | None = None
    n_video = 0
    last_t = 0.0
    last_dur = 0.0
    streams = [vstream] + ([astream] if astream is not None else [])
    for packet in container.demux(*streams):
        if packet.stream.type == "audio":
            for aframe in packet.decode():
                audio.add(aframe)
            continue
        for vframe in packet.decode():
            ts = vframe.time
            if ts is None:
                ts = n_video / source_fps if source_fps else n_video / fps
            if t0 is None:
                t0 = ts
                rotation = _stream_rotation(vstream, vframe)
            t = ts - t0
            if max_seconds is not None and t > max_seconds:
                raise _too_large(
                    f"video is longer than {max_seconds:g} s", "max_seconds"
                )
            if state["cur"] is not None:
                emit_before(t)
            state["cur"], state["rgb"] = vframe, None
            n_video += 1
            last_t = t
            dur = float(vframe.duration * vframe.time_base) if vframe.duration else 0.0
            last_dur = dur or (1.0 / source_fps if source_fps else 1.0 / fps)
    if state["cur"] is None:
        raise MediaError(BAD_VIDEO, "no decodable video frame")
    video_end = last_t + last_dur
    emit_before(video_end)
    if not frames:  # a video shorter than the tolerance still yields its one frame
        state["rgb"] = (
            state["rgb"]
            if state["rgb"] is not None
            else rotate_frame(state["cur"].to_ndarray(format="rgb24"), rotation)
        )
        frames.append(state["rgb"].copy())
        times.append(0.0)

    mono, src_rate = audio.result()
    if src_rate is not None and mono.size:
        pcm = np.clip(resample(mono, src_rate, audio_rate), -1.0, 1.0).astype(
            np.float32
        )
    else:
        pcm = np.zeros(0, dtype=np.float32)
    duration = max(video_end, pcm.size / audio_rate)
    return DemuxedVideo(
        frames=frames,
        frame_times_s=times,
        audio=pcm,
        duration_s=duration,
        rotation_deg=rotation,
        audio_rate=audio_rate,
        source_fps=source_fps,
        has_audio=astream is not None,
        video_frames_decoded=n_video,
    )
