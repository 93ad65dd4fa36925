"""Pipeline.speak: each Code2Wav chunk goes out as soon as it is made, with the words it speaks
(the real tiny Talker and Code2Wav)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from app.backend.metrics import EngineMetrics
from app.backend.pipeline.workers import AudioChunk, Pipeline, RequestContext

SEGMENTS = ["The capital of France is Paris, ", "a city on the Seine."]


def _pipeline(family, chunk_frames: int) -> Pipeline:
    return Pipeline(family, max_num_seqs=(1, 1, 1), inbox_sizes=(8, 8, 8), codec_chunk_frames=chunk_frames,
                    metrics=EngineMetrics(), timeouts_s=(60.0, 60.0, 60.0))


async def _speak(pipe: Pipeline, segments: list[str], log: list[str] | None = None) -> list[AudioChunk]:
    pipe.start()
    try:
        if log is not None:  # note each Code2Wav request as it is made
            submit = pipe.code2wav.submit

            async def noted(ctx, payload):
                log.append(f"code2wav {len(log)}")
                return await submit(ctx, payload)
            pipe.code2wav.submit = noted  # type: ignore[method-assign]
        out = []
        async for chunk in pipe.speak(RequestContext("speak-test"), segments):
            if log is not None:
                log.append(f"chunk {chunk.index}")
            out.append(chunk)
        return out
    finally:
        await pipe.stop()


@pytest.fixture(scope="module")
def one_chunk_per_segment(tiny_family) -> list[AudioChunk]:
    return asyncio.run(_speak(_pipeline(tiny_family, 100_000), SEGMENTS))


def test_the_first_audio_goes_out_before_the_segment_is_fully_voiced(tiny_family, one_chunk_per_segment):
    log: list[str] = []
    chunks = asyncio.run(_speak(_pipeline(tiny_family, 43), SEGMENTS, log))
    first_segment = [c for c in chunks if c.index == 0]
    assert len(first_segment) >= 2, [c.audio.size for c in chunks]
    assert log.index("chunk 0") < log.index("code2wav 2")  # out before Code2Wav voiced the segment's rest
    assert first_segment[0].audio.size < one_chunk_per_segment[0].audio.size


def test_the_chunks_join_into_the_same_audio_and_the_same_words(tiny_family, one_chunk_per_segment):
    chunks = asyncio.run(_speak(_pipeline(tiny_family, 43), SEGMENTS))
    whole = np.concatenate([c.audio for c in one_chunk_per_segment])
    joined = np.concatenate([c.audio for c in chunks])
    assert joined.size == whole.size
    assert np.max(np.abs(joined - whole)) < 1e-5  # streamed Code2Wav == one-shot (float rounding only)
    for i, seg in enumerate(SEGMENTS):
        assert "".join(c.text for c in chunks if c.index == i) == seg
    assert [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert all(c.audio.size for c in chunks)  # no empty delta in a spoken reply
    first_words = chunks[0].text.split()
    assert 1 <= len(first_words) < len(SEGMENTS[0].split())  # the first chunk carries only its words


def test_a_reply_starts_at_its_first_sound(one_chunk_per_segment):
    """Piper begins a reply with ~30-45 ms of silence; the first chunk keeps only 5 ms of it."""
    rate = 24_000
    first, second = one_chunk_per_segment[0].audio, one_chunk_per_segment[1].audio
    assert np.flatnonzero(np.abs(first) >= 1e-3)[0] <= 5 * rate // 1000
    assert np.flatnonzero(np.abs(second) >= 1e-3)[0] > 5 * rate // 1000  # later segments are left as they come
