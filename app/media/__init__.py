"""Media helpers: pure functions, no model and no server code.

Decode any input (WAV/FLAC/MP3/OGG/WebM, raw PCM16/float32/G.711, data URLs, files) to float32
mono at a target rate; encode PCM16/WAV/FLAC/MP3/Opus; resample with soxr; decode images with
size limits; tile sub-frames into one composite; demux video with PyAV at a fixed fps. Every
public function raises :class:`MediaError` (a ``ValueError`` with a stable ``code``) on bad
input.
"""

from app.media.audio import (
    PcmStreamResampler,
    decode_audio,
    drop_leading_silence,
    encode_audio,
    encode_wav,
    float_to_int16,
    float_to_pcm16,
    pcm16_to_float,
    resample,
)
from app.media.dataurl import (
    decode_base64,
    guess_audio_format,
    parse_data_url,
    to_data_url,
)
from app.media.errors import MediaError
from app.media.image import (
    decode_image,
    encode_jpeg,
    encode_png,
    fit_within,
    grid_shape,
    shrink_by_whole_factor,
    stack_frames,
)
from app.media.video import DemuxedVideo, demux_video, normalize_rotation, rotate_frame

__all__ = [
    "DemuxedVideo",
    "MediaError",
    "PcmStreamResampler",
    "decode_audio",
    "decode_base64",
    "decode_image",
    "demux_video",
    "drop_leading_silence",
    "encode_audio",
    "encode_jpeg",
    "encode_png",
    "encode_wav",
    "fit_within",
    "float_to_int16",
    "float_to_pcm16",
    "grid_shape",
    "guess_audio_format",
    "normalize_rotation",
    "parse_data_url",
    "pcm16_to_float",
    "resample",
    "rotate_frame",
    "shrink_by_whole_factor",
    "stack_frames",
    "to_data_url",
]
