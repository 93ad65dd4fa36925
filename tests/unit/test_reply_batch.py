"""ReplyBatcher: several sessions' Thinker replies written in one llama.cpp batch, each the reply it
would be alone; a reply joins the batch at the next step and leaves it when its reader stops."""

from __future__ import annotations

import threading
import time

import pytest

from app.backend.models.tiny.llm import STOP, GemmaLlm, build_prompt
from app.backend.models.tiny.reply_batch import ReplyBatcher, Sampling
from app.backend.pipeline.stages import (
    BatchFigures,
    BatchShare,
    SamplingParams,
    ThinkerPrompt,
)

QUESTIONS = ("What is the capital of France?", "How many legs does a spider have?",
             "What is seven plus five?", "Who wrote Romeo and Juliet?")
GREEDY = SamplingParams(temperature=0.0, max_tokens=48)


@pytest.fixture(scope="module")
def single() -> GemmaLlm:
    """Replies one at a time in Llama's own context (``batch_replies`` 1)."""
    return GemmaLlm(batch_replies=1)


@pytest.fixture(scope="module")
def batched() -> GemmaLlm:
    return GemmaLlm(batch_replies=4)


def _reply(llm: GemmaLlm, question: str) -> str:
    return llm.generate_reply(ThinkerPrompt("", [], question), GREEDY).text


def _tokens(llm: GemmaLlm, question: str) -> list[int]:
    return llm._llm.tokenize(build_prompt(ThinkerPrompt("", [], question)).encode(), add_bos=True, special=True)


def _write(batcher: ReplyBatcher, tokens: list[int], sampling: Sampling,
           share: BatchShare | None = None) -> tuple[str, str | None]:
    text, finish = "", None
    for piece, finish in batcher.complete(tokens, sampling, share):
        text += piece
    return text, finish


def test_replies_written_together_are_the_replies_written_alone(single: GemmaLlm, batched: GemmaLlm) -> None:
    alone_single = [_reply(single, q) for q in QUESTIONS]
    alone_batched = [_reply(batched, q) for q in QUESTIONS]
    before = batched.batcher.stats()
    together: list[str | None] = [None] * len(QUESTIONS)
    start = threading.Barrier(len(QUESTIONS))

    def write(i: int) -> None:
        start.wait()
        together[i] = _reply(batched, QUESTIONS[i])

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(QUESTIONS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    after = batched.batcher.stats()
    assert all(alone_single), alone_single
    assert together == alone_batched
    # Llama's own context evaluates a prompt in other chunks (its last call's prefix), so float
    # rounding may flip a near-tie on some CPU: most replies, not every one, must be the same
    assert sum(a == b for a, b in zip(alone_batched, alone_single, strict=True)) >= len(QUESTIONS) - 1, \
        (alone_batched, alone_single)
    assert after.max_batch >= 2  # they were decoded in the same steps
    assert sum(after.batch_sizes.get(n, 0) - before.batch_sizes.get(n, 0) for n in range(2, 5)) > 0


def test_a_reply_joins_one_being_written_at_the_next_step(batched: GemmaLlm) -> None:
    batcher = batched.batcher
    long = Sampling(max_tokens=40)  # no stop string: it writes all 40 tokens
    first_tokens, second_tokens = _tokens(batched, "Tell me a long story."), _tokens(batched, QUESTIONS[0])
    alone_share = BatchShare()
    alone = _write(batcher, second_tokens, Sampling(max_tokens=12, stop=STOP), alone_share)
    figures = alone_share.take()
    assert figures.steps >= 1 and figures.replies_per_step == 1.0
    before = batcher.stats()
    share_a, share_b = BatchShare(), BatchShare()  # (each session's counters)
    pieces = batcher.complete(first_tokens, long, share_a)
    text, _ = next(pieces)  # the first reply is being written ...
    second = _write(batcher, second_tokens, Sampling(max_tokens=12, stop=STOP), share_b)  # ... when this one comes
    rest = "".join(p for p, _ in pieces)
    after = batcher.stats()
    assert second == alone
    assert (text + rest).strip()
    assert after.batch_sizes.get(2, 0) > before.batch_sizes.get(2, 0)  # written side by side
    a, b = share_a.take(), share_b.take()
    assert a.steps + b.steps == after.tokens - before.tokens  # each written token counted for its own reply
    assert 1.0 < a.replies_per_step < 2.0 and 1.0 < b.replies_per_step <= 2.0  # the second always beside the first
    assert a.wait_ms > 0 and b.wait_ms > 0
    assert share_a.take() == BatchFigures()  # read once


def test_a_reply_whose_reader_stops_leaves_the_batch(batched: GemmaLlm) -> None:
    batcher = batched.batcher
    tokens = _tokens(batched, "Tell me a long story.")
    before = batcher.stats()
    pieces = batcher.complete(tokens, Sampling(max_tokens=200))
    next(pieces)
    pieces.close()  # the session was cancelled after the first piece
    # every sequence is free again: n_seq replies at once all finish
    out: list[tuple[str, str | None] | None] = [None] * batcher.n_seq

    def write(i: int) -> None:
        out[i] = _write(batcher, _tokens(batched, QUESTIONS[i]), Sampling(max_tokens=12, stop=STOP))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(batcher.n_seq)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(o is not None and o[0].strip() for o in out), out
    assert batcher.stats().tokens - before.tokens < 200  # the stopped reply wrote far fewer than 200


def test_stop_strings_end_the_text_and_are_never_passed_on(batched: GemmaLlm) -> None:
    text, finish = _write(batched.batcher, _tokens(batched, "Tell me a long story."),
                          Sampling(max_tokens=80, stop=(" ", "\n")))
    assert finish == "stop" and " " not in text and "\n" not in text


def test_a_prompt_that_does_not_fit_a_sequence_is_refused(batched: GemmaLlm) -> None:
    batcher = batched.batcher
    with pytest.raises(ValueError, match="exceed"):
        batcher.complete([2] * batcher.n_ctx_seq, Sampling(max_tokens=8))
    with pytest.raises(ValueError, match="empty"):
        batcher.complete([], Sampling(max_tokens=8))


def test_a_reply_a_user_waits_for_takes_a_free_sequence_before_a_speculative_one(batched: GemmaLlm) -> None:
    """Every sequence busy; a speculative reply (prepared at a pause) asks first, then one a user waits
    for: the first sequence to free goes to the second."""
    batcher = batched.batcher
    busy_tokens = _tokens(batched, "Tell me a long story.")
    first_piece: dict[str, float] = {}

    def write(name: str, tokens: list[int], sampling: Sampling, waiting=None) -> None:
        for _piece, _ in batcher.complete(tokens, sampling, None, waiting):
            first_piece.setdefault(name, time.perf_counter())

    busy = [threading.Thread(target=write, args=(f"busy{i}", busy_tokens, Sampling(max_tokens=12 if i == 0 else 60)))
            for i in range(batcher.n_seq)]  # (no stop string: 12 and 60 tokens; the short one frees first)
    for t in busy:
        t.start()
    while len(first_piece) < batcher.n_seq:  # all being written
        time.sleep(0.005)
    question = _tokens(batched, QUESTIONS[0])
    speculative = threading.Thread(target=write, args=("speculative", question, Sampling(max_tokens=4),
                                                       lambda: False))
    speculative.start()
    time.sleep(0.05)  # (it asks first)
    waited = threading.Thread(target=write, args=("waited", question, Sampling(max_tokens=4), lambda: True))
    waited.start()
    for t in [*busy, speculative, waited]:
        t.join(60)
    assert first_piece["waited"] < first_piece["speculative"], first_piece
