"""ReplyStream: a reply's segments while the Thinker writes it (the first one early), joined exactly."""

from __future__ import annotations

import asyncio

import pytest

from app.backend.pipeline.reply_stream import ReplyStream
from app.backend.pipeline.segmenter import segment_text
from app.backend.pipeline.stages import GeneratedReply


def _writer(pieces: list[str], final: str, log: list[str]):
    """A Thinker stand-in that writes ``pieces`` one by one (yielding to the loop in between, as the
    stage thread does) and then returns ``final`` as the kept reply."""
    async def start(on_text):
        raw = ""
        for piece in pieces:
            raw += piece
            if on_text is not None and not on_text(raw):
                break
            log.append(f"wrote {raw!r}")
            await asyncio.sleep(0.01)
        log.append("done")
        return GeneratedReply(final)
    return start


async def _collect(stream: ReplyStream, log: list[str]) -> list[tuple[str, bool]]:
    out = []
    async for seg, last in stream:
        log.append(f"segment {seg!r}")
        out.append((seg, last))
    return out


def test_the_first_segment_comes_before_the_reply_is_done_and_the_segments_join_into_it() -> None:
    log: list[str] = []
    text = "The capital of France is Paris, a city on the Seine."
    pieces = ["The", " capital", " of", " France", " is", " Paris,", " a", " city", " on", " the", " Seine."]
    stream = ReplyStream(_writer(pieces, text, log), early=True, cancelled=lambda: False)
    out = asyncio.run(_collect(stream, log))
    assert out[0] == ("The capital of France ", False)
    assert log.index("segment 'The capital of France '") < log.index("done")
    assert "".join(s for s, _ in out) == text and out[-1][1] and not any(last for _, last in out[:-1])
    assert stream.reply == GeneratedReply(text)


def test_without_early_voicing_the_segments_are_the_usual_ones() -> None:
    log: list[str] = []
    text = "The capital of France is Paris, a city on the Seine."
    stream = ReplyStream(_writer(text.split(" "), text, log), early=False, cancelled=lambda: False)
    out = asyncio.run(_collect(stream, log))
    assert [s for s, _ in out] == segment_text(text)
    assert log.index("done") < min(i for i, line in enumerate(log) if line.startswith("segment"))


@pytest.mark.parametrize("final", ["It's usually hot.", "It's warm."])
def test_a_reply_that_ends_with_or_before_its_early_segment_closes_with_an_empty_pair(final: str) -> None:
    log: list[str] = []
    stream = ReplyStream(_writer(["It's", " usually", " hot.", " It"], final, log), early=True,
                         cancelled=lambda: False)
    out = asyncio.run(_collect(stream, log))
    assert out == [("It's usually hot. ", False), ("", True)]


def test_a_cancelled_request_stops_the_writing() -> None:
    log: list[str] = []
    state = {"cancelled": False}
    pieces = ["The", " capital", " of", " France", " is", " Paris."]

    async def main():
        stream = ReplyStream(_writer(pieces, "The capital of France is Paris.", log), early=True,
                             cancelled=lambda: state["cancelled"])
        async for seg, _last in stream:
            state["cancelled"] = True  # a barge-in right after the first segment
        return stream

    asyncio.run(main())
    assert sum(line.startswith("wrote") for line in log) < len(pieces)


def test_the_writer_waits_for_the_first_words_to_be_voiced_only_when_someone_voices_them() -> None:
    import time

    text = "The capital of France is Paris, a city on the Seine."
    pieces = ["The", " capital", " of", " France", " is", " Paris,"]

    async def run(voice: bool) -> float:
        stream = ReplyStream(_threaded_writer(pieces, text), early=True, cancelled=lambda: False)
        if voice:
            stream.will_voice()  # ... and never calls first_voiced(): the writer waits out the hold
        t0 = time.perf_counter()
        async for _seg, _last in stream:
            pass
        return time.perf_counter() - t0

    assert asyncio.run(run(voice=False)) < 0.2
    assert asyncio.run(run(voice=True)) >= 0.25


def test_the_writer_waits_out_the_hold_once_per_reply_not_once_per_token() -> None:
    import time

    pieces = ["The", " capital", " of", " France", " is", " Paris,", " a", " city", " on", " the", " river",
              " Seine,", " and", " it", " is", " lovely."]
    text = "".join(pieces)

    async def run() -> float:
        stream = ReplyStream(_threaded_writer(pieces, text), early=True, cancelled=lambda: False)
        stream.will_voice()  # never voiced: a Talker slower than the hold
        t0 = time.perf_counter()
        async for _seg, _last in stream:
            pass
        return time.perf_counter() - t0

    assert asyncio.run(run()) < 1.0  # one 0.3 s hold; one per token would be 12 x 0.3 s


def _threaded_writer(pieces: list[str], final: str):
    """Like :func:`_writer`, but writing in a thread, as the Thinker's stage does (on_text may block)."""
    async def start(on_text):
        def write() -> GeneratedReply:
            raw = ""
            for piece in pieces:
                raw += piece
                if on_text is not None and not on_text(raw):
                    break
            return GeneratedReply(final)
        return await asyncio.to_thread(write)
    return start
