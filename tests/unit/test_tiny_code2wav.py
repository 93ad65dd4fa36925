"""Tiny Code2Wav: streamed == one-shot decoding, exact lengths, 24 kHz (real HiFi-GAN)."""

from __future__ import annotations

import numpy as np
import pytest

from app.backend.models.tiny.code2wav import (
    LEFT_CONTEXT_FRAMES,
    LOOKAHEAD_FRAMES,
    TinyCode2Wav,
    measure_receptive_field,
)
from app.backend.models.tiny.codebook import Codebook
from app.backend.models.tiny.talker import PiperFront, TinyTalker
from app.backend.models.tiny.voice import load_piper_split
from app.constants import OUTPUT_SAMPLE_RATE_HZ

pytestmark = pytest.mark.slow

TEXT = "I think the answer is forty two, but I am not entirely sure about it."
"""About 3.9 s of speech (334 codec frames)."""

TOLERANCE = 1e-5
"""Max abs difference allowed between streamed and one-shot samples (float rounding only;
measured ~4e-7)."""


@pytest.fixture(scope="module")
def parts() -> tuple[TinyTalker, TinyCode2Wav]:
    split = load_piper_split()
    codebook = Codebook.load()
    return TinyTalker(PiperFront(split), codebook), TinyCode2Wav(split, codebook)


@pytest.fixture(scope="module")
def tokens(parts) -> np.ndarray:
    talker, _ = parts
    return talker.synthesize(TEXT)


@pytest.fixture(scope="module")
def one_shot(parts, tokens) -> np.ndarray:
    _, c2w = parts
    return c2w.decode(tokens)


def _expected_len(frames: int, c2w: TinyCode2Wav) -> float:
    return frames * c2w.hop_length * OUTPUT_SAMPLE_RATE_HZ / c2w.input_sample_rate_hz


def _stream(
    c2w: TinyCode2Wav, tokens: np.ndarray, sizes: list[int]
) -> tuple[np.ndarray, list[int]]:
    stream = c2w.new_stream()
    outs, i = [], 0
    for n in sizes:
        outs.append(stream.push(tokens[i : i + n], final=False))
        i += n
    outs.append(stream.push(tokens[i:], final=True))
    assert stream.closed and stream.frames_emitted == stream.frames_received == len(tokens)
    return np.concatenate(outs), [len(o) for o in outs]


def test_one_shot_output(parts, tokens, one_shot) -> None:
    _, c2w = parts
    assert c2w.output_sample_rate_hz == OUTPUT_SAMPLE_RATE_HZ == 24_000
    assert one_shot.dtype == np.float32 and one_shot.ndim == 1
    assert abs(len(one_shot) - _expected_len(len(tokens), c2w)) < 1.0
    assert np.max(np.abs(one_shot)) <= 1.0
    assert np.sqrt(np.mean(one_shot**2)) > 0.02  # audible speech, not silence
    # The one-shot decode is the clipped HiFi-GAN output resampled: compare with soxr one-shot.
    import soxr

    ref = soxr.resample(
        np.clip(c2w.decode_latents(c2w.codebook.decode(tokens)), -1, 1),
        c2w.input_sample_rate_hz,
        OUTPUT_SAMPLE_RATE_HZ,
        quality="HQ",
    )
    assert len(ref) == len(one_shot)
    assert np.max(np.abs(ref - one_shot)) < 1e-4


@pytest.mark.parametrize(
    "sizes",
    [
        [7, 25, 3, 40],  # the uneven chunks from the spec, then the rest, then final
        [1, 1, 1, 2, 3, 5, 8, 13, 21],
        [0, 100, 0, 1],
        [LOOKAHEAD_FRAMES, LOOKAHEAD_FRAMES + 1, LEFT_CONTEXT_FRAMES - 1],
    ],
)
def test_streaming_equals_one_shot(parts, tokens, one_shot, sizes) -> None:
    _, c2w = parts
    rest = len(tokens) - sum(sizes)
    streamed, lens = _stream(c2w, tokens, sizes + [rest])
    assert len(streamed) == len(one_shot)
    err = float(np.max(np.abs(streamed - one_shot)))
    print(f"chunks {sizes + [rest]}: max abs error {err:.2e}, push lengths {lens}")
    assert err < TOLERANCE


def test_every_token_pushed_alone(parts, tokens, one_shot) -> None:
    _, c2w = parts
    n = 120
    ref = c2w.decode(tokens[:n])
    streamed, _ = _stream(c2w, tokens[:n], [1] * n)
    assert len(streamed) == len(ref)
    assert np.max(np.abs(streamed - ref)) < TOLERANCE


def test_lookahead_holds_back(parts, tokens) -> None:
    _, c2w = parts
    stream = c2w.new_stream()
    out = stream.push(tokens[:LOOKAHEAD_FRAMES], final=False)
    assert len(out) == 0 and stream.frames_emitted == 0
    stream.push(tokens[LOOKAHEAD_FRAMES : LOOKAHEAD_FRAMES + 30], final=False)
    assert stream.frames_emitted == 30
    rest = stream.push(tokens[LOOKAHEAD_FRAMES + 30 :], final=True)
    assert len(rest) > 0


def test_receptive_field_within_context(parts, tokens) -> None:
    _, c2w = parts
    before, after = measure_receptive_field(c2w, c2w.codebook.decode(tokens[:100]))
    print(f"receptive field: {before:.2f} frames before, {after:.2f} after")
    assert before <= LEFT_CONTEXT_FRAMES
    assert after <= LOOKAHEAD_FRAMES


def test_edge_cases(parts, tokens) -> None:
    _, c2w = parts
    stream = c2w.new_stream()
    assert stream.push(np.zeros(0, np.int32), final=True).shape == (0,)
    with pytest.raises(RuntimeError):
        stream.push(tokens[:3], final=True)
    single = c2w.decode(tokens[:1])
    assert abs(len(single) - _expected_len(1, c2w)) < 1.0
    with pytest.raises(ValueError):
        c2w.new_stream().push(np.array([c2w.codebook.size], np.int32), final=True)
    with pytest.raises(ValueError):
        c2w.new_stream().push(np.zeros((2, 2), np.int32), final=False)


def test_streams_are_independent(parts, tokens) -> None:
    _, c2w = parts
    a, b = c2w.new_stream(), c2w.new_stream()
    out_a = [a.push(tokens[:50], final=False)]
    out_b = [b.push(tokens[100:140], final=False)]
    out_a.append(a.push(tokens[50:80], final=True))
    out_b.append(b.push(tokens[140:160], final=True))
    np.testing.assert_allclose(np.concatenate(out_a), c2w.decode(tokens[:80]), atol=TOLERANCE)
    np.testing.assert_allclose(np.concatenate(out_b), c2w.decode(tokens[100:160]), atol=TOLERANCE)
