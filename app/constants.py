"""Protocol-wide constants, in one typed place.

Every rate, unit length and codec figure that more than one module needs lives here; nothing
else in the code base repeats these numbers as literals.

Sources:
    * 16 kHz input, 24 kHz output, 1 s units, first unit 1030 ms: vLLM-Omni realtime duplex
      protocol (``docs/serving/realtime_duplex_api.md``; ``DUPLEX_FIRST_UNIT_MS = 1030`` in
      ``vllm_omni/clients/duplex.py``): MiniCPM-o's first chunk needs 1035 ms, rounded down to
      the 160-sample (10 ms) hop.
    * 25 Hz codec rate, 25-frame codec chunks, 3 frames of left context: MiniCPM-o 4.5
      (CosyVoice2 S3 tokens) and vLLM-Omni's ``connectors.codec_chunk_frames`` defaults.
    * Token costs (12 per audio unit, 66 per frame block): vLLM-Omni's MiniCPM-o 4.5 duplex
      scheduler token budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

INPUT_SAMPLE_RATE_HZ: Final[int] = 16_000
"""Rate of model input audio (mono float32 / PCM16), Hz."""

OUTPUT_SAMPLE_RATE_HZ: Final[int] = 24_000
"""Rate of model output speech, Hz."""

MIN_INPUT_RATE_HZ: Final[int] = 4_000
MAX_INPUT_RATE_HZ: Final[int] = 192_000
"""Sample rates a client may declare for appended audio, Hz (resampled to 16 kHz server-side)."""

UNIT_MS: Final[int] = 1_000
"""Default duplex unit length, ms (vLLM-Omni ``chunk_period_ms``)."""

FIRST_UNIT_MS: Final[int] = 1_030
"""Cumulative input audio that closes unit 0, ms; later units close every ``unit_ms``."""

FIRST_UNIT_EXTRA_MS: Final[int] = FIRST_UNIT_MS - UNIT_MS
"""Extra audio unit 0 needs beyond one unit, ms (30)."""

ALLOWED_UNIT_MS: Final[tuple[int, ...]] = (500, 1_000)
"""Unit lengths a deploy config may choose, ms."""

MINICPMO_CODEC_RATE_HZ: Final[float] = 25.0
"""MiniCPM-o 4.5 Talker codec frames per second of speech."""

MINICPMO_SILENCE_CODE: Final[int] = 4218
"""MiniCPM-o Token2Wav silence code used as first-chunk left context."""

DEFAULT_CODEC_CHUNK_FRAMES: Final[int] = 25
"""Codec frames per Talker->Code2Wav chunk (vLLM-Omni ``codec_chunk_frames``)."""

DEFAULT_CODEC_LEFT_CONTEXT_FRAMES: Final[int] = 3
"""Codec frames of left context per chunk (vLLM-Omni ``codec_left_context_frames``)."""

MAX_SPEAK_TOKENS_PER_UNIT: Final[int] = 20
"""Text tokens the Thinker may emit per speaking unit (MiniCPM-o ``max_new_speak_tokens_per_chunk``)."""

MAX_SEGMENT_CHARS: Final[int] = 28
"""A unit's text closes once it reaches this many characters (MiniCPM-o duplex loop)."""

AUDIO_TOKENS_PER_UNIT: Final[int] = 12
"""Thinker context tokens per 1 s audio unit: 10 audio embeddings + ``<unit>``/``</unit>``."""

FRAME_BLOCK_TOKENS: Final[int] = 66
"""Thinker context tokens per image block: ``<image>`` + 64 resampler queries + ``</image>``."""

VISION_TILE_PX: Final[int] = 448
"""MiniCPM-o slice edge, pixels (``scale_resolution``)."""

DEFAULT_INSTRUCTIONS: Final[str] = "Streaming Omni Conversation."
"""vLLM-Omni's default duplex session instructions."""

BETA_SERVER_EVENT_ALIASES: Final[Mapping[str, str]] = MappingProxyType({
    "response.audio.delta": "response.output_audio.delta",
    "response.audio.done": "response.output_audio.done",
    "response.audio_transcript.delta": "response.output_audio_transcript.delta",
    "response.audio_transcript.done": "response.output_audio_transcript.done",
    "response.text.delta": "response.output_text.delta",
    "response.text.done": "response.output_text.done",
})
"""Beta (pre-GA) server event name -> GA name (vLLM-Omni's earlier builds, demo and tests);
used by the server-event decoder and by the client."""


def ms_to_samples(ms: float, rate_hz: int) -> int:
    """Convert a duration to a whole number of samples.

    Args:
        ms: duration in milliseconds (>= 0).
        rate_hz: sample rate in Hz.

    Returns:
        ``round(ms * rate_hz / 1000)`` samples.
    """
    return int(round(ms * rate_hz / 1000.0))  # noqa: RUF046 - int even for NumPy scalars


def samples_to_ms(samples: int, rate_hz: int) -> float:
    """Convert a sample count at ``rate_hz`` to milliseconds."""
    return samples * 1000.0 / rate_hz
