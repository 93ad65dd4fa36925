"""Continuous batching of Thinker replies: several sessions' replies decoded together in one llama.cpp
context, one token per reply per step (the ``tiny`` family's cross-session Thinker scheduler).

One thread (:class:`ReplyBatcher`) owns a llama.cpp context with ``n_seq`` sequences. Each step it
builds one ``llama_batch``: the next token of every reply being written, then as much of the waiting
replies' prompts as fits (``N_BATCH``), and runs one ``llama_decode`` inside the cores
(:data:`~app.backend.models.tiny.runtime.CORES`, ``Priority.WORK``, as the single-sequence path holds
them per token). A reply that arrives while others are written joins at the next step: there is no
gathering window, so a reply alone waits for nothing. A reply whose caller stopped reading (the
session was cancelled, a barge-in, the text is complete) leaves the batch at the next step.
Priorities: every reply being written moves one token per step (a reply already playing is never
starved by a newer one); when more replies wait than there are sequences, or their prompts do not
fit one step, those a user waits for (their turn has ended) go before speculative ones (prepared at
a pause, :attr:`~app.backend.pipeline.workers.RequestContext.speculative`).

Why it pays on this CPU: a decode step of Gemma 3 270M (Q4_K_M) on 2 cores costs ~14 ms per token
for one reply, 13.4 for 2, 9.9 for 3, 8.4 for 4 and 8.5 for 6 (``benchmarks/bench_batching.py``,
``results/batching.json``): two replies at once gain little, three or more up to 1.6x. Four
replies at once are written in ~0.8x the time of one after another (most of a short reply is its
prompt's evaluation, which costs the same batched or not).

Each sequence keeps the tokens its KV cache holds; a new reply takes the free sequence that shares
the longest prefix with its prompt (a session's next prompt extends its last one) and evaluates only
the rest, as ``Llama``'s own prefix reuse does for one sequence. When another sequence, free or
busy, holds more of the prompt's start (every prompt starts with the same few-shot transcript, ~250
tokens), those cells are shared with the new sequence instead (one unified KV cache).

Sampling follows ``llama_cpp.Llama.create_completion`` (llama-cpp-python 0.3.36) for the parameters
the Thinker uses: a logit-bias sampler, repetition penalties over the last 64 tokens written, then
greedy (temperature 0) or top-k, typical-p 1, top-p, min-p, temperature and a seeded draw; stop
strings end the text and are never passed on, nor any text that may be the start of one; an
end-of-generation token ends it. Greedy replies are the same tokens alone or batched (checked in
``tests/unit/test_reply_batch.py``), up to the float rounding a different batch shape may give.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.backend.models.tiny.runtime import CORES, Priority
from app.backend.pipeline.stages import BatchShare

log = logging.getLogger(__name__)

N_BATCH: Final[int] = 512
"""Tokens in one ``llama_decode`` at most (prompt tokens beyond it go in the next steps)."""

SHARE_MIN_TOKENS: Final[int] = 16
"""A new reply's sequence takes another sequence's cached start of its prompt when that holds at
least this many more of its tokens than the sequence's own cache (a copy of cells is ~0.03 ms; each
token evaluated again ~0.7 ms)."""

PENALTY_LAST_N: Final[int] = 64
"""Tokens the repetition penalty looks back over (llama-cpp-python's ``last_n_tokens_size``)."""


@dataclass(frozen=True)
class Sampling:
    """One reply's sampling (names as ``Llama.create_completion``'s).

    Attributes:
        max_tokens: tokens written at most (>= 1).
        temperature: 0 = greedy.
        top_p, top_k, min_p: nucleus mass, top-k (0 = off), min-p.
        repeat_penalty: repetition penalty (1 = off).
        seed: seed of the draw (None: a random one); unused when greedy.
        stop: strings that end the text (not included).
        logit_bias: token id -> added logit (``-inf`` bans a token).
    """

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logit_bias: dict[int, float] = field(default_factory=dict)


@dataclass
class BatchStats:
    """What :class:`ReplyBatcher` did since it started.

    Attributes:
        steps: ``llama_decode`` calls.
        replies: replies admitted.
        tokens: tokens written (sum over steps of the replies decoded in each).
        max_batch: most replies decoded in one step.
        batch_sizes: replies per step -> steps of that size.
        wait_s: seconds from each reply's submission to the start of the step that wrote its first
            token (its prompt's evaluation included), summed.
        compute_s: seconds in ``llama_decode`` (and sampling), summed.
    """

    steps: int = 0
    replies: int = 0
    tokens: int = 0
    max_batch: int = 0
    batch_sizes: dict[int, int] = field(default_factory=dict)
    wait_s: float = 0.0
    compute_s: float = 0.0


@dataclass
class _Reply:
    prompt: list[int]
    sampling: Sampling
    out: queue.SimpleQueue[tuple[str, str | None]]
    submitted_at: float = field(default_factory=time.perf_counter)
    closed: threading.Event = field(default_factory=threading.Event)
    seq: int = -1
    fed: int = 0  # prompt tokens in the sequence's KV cache
    completion: list[int] = field(default_factory=list)
    returned: int = 0  # characters of the text passed on
    sampler: Any = None
    started: bool = False
    share: BatchShare | None = None  # the caller's counters (each step that writes a token of it)
    waiting: Callable[[], bool] | None = None  # whether a user waits for it now (None: always)

    def waited_on(self) -> bool:
        return self.waiting is None or bool(self.waiting())


class ReplyBatcher:
    """Writes replies of several callers in one llama.cpp context (see the module docstring).

    Args:
        llm: the loaded ``llama_cpp.Llama`` (its model, tokenizer and vocabulary are shared; its own
            context is not used).
        n_seq: replies written at once at most (the context holds ``n_seq`` sequences).
        n_ctx_seq: tokens per sequence (prompt + reply).
        n_threads: llama.cpp threads.

    Raises:
        ValueError: ``n_seq`` < 1 or ``n_ctx_seq`` < 16.
        RuntimeError: llama.cpp could not create the context.
    """

    def __init__(self, llm: Any, *, n_seq: int, n_ctx_seq: int, n_threads: int) -> None:
        import llama_cpp
        from llama_cpp import _internals

        if n_seq < 1 or n_ctx_seq < 16:
            raise ValueError(f"need n_seq >= 1 and n_ctx_seq >= 16, got {n_seq}, {n_ctx_seq}")
        self._lc, self._internals = llama_cpp, _internals
        self._llm = llm
        self.n_seq, self.n_ctx_seq = n_seq, n_ctx_seq
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)  # as Llama's own context
        params.n_ctx = n_ctx_seq * n_seq
        params.n_batch = params.n_ubatch = N_BATCH
        params.n_seq_max = n_seq
        params.n_threads = params.n_threads_batch = n_threads
        # One cache for every sequence, so a prompt's start can be shared (llama_memory_seq_cp) instead
        # of evaluated again: llama.cpp copies part of a sequence only in a unified cache (it aborts
        # the process otherwise). A step of 4 replies costs ~34 ms against ~29 ms in separate caches.
        params.kv_unified = True
        try:
            self._ctx = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
        except ValueError as exc:
            raise RuntimeError(f"llama.cpp could not create a {n_seq}-sequence context: {exc}") from exc
        self._batch = _internals.LlamaBatch(n_tokens=N_BATCH, embd=0, n_seq_max=1, verbose=False)
        self._vocab = llm._model.vocab
        self._n_vocab = llm.n_vocab()
        self._kv: list[list[int]] = [[] for _ in range(n_seq)]  # tokens each sequence's cache holds
        self._free = set(range(n_seq))
        self._waiting: deque[_Reply] = deque()
        self._active: list[_Reply] = []
        self._cond = threading.Condition()
        self._closed = False
        self._stats = BatchStats()
        self._stats_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="thinker-batch", daemon=True)
        self._thread.start()

    # -- callers' side ------------------------------------------------------------------------
    def complete(self, prompt: Sequence[int], sampling: Sampling, share: BatchShare | None = None,
                 waiting: Callable[[], bool] | None = None) -> Iterator[tuple[str, str | None]]:
        """Write a reply to the token ids ``prompt`` (BOS included); every step that writes one of its
        tokens is added to ``share`` (with the replies in that step, and on the first its wait).
        ``waiting()`` (None: always True) says whether a user waits for it now: while every sequence
        is taken, a free one goes to the oldest waiting reply a user waits for before the oldest
        speculative one, and such prompts are evaluated first in a step.

        Yields:
            ``(text, finish_reason)`` pieces as the reply is written: new text (never a stop string,
            nor the start of one), and ``finish_reason`` None until the last piece, which says
            ``"stop"`` (a stop string or end-of-generation token) or ``"length"``
            (``sampling.max_tokens``). Closing the iterator early ends the reply at the next step.

        Raises:
            ValueError: the prompt is empty, or it and ``max_tokens`` do not fit ``n_ctx_seq``.
            RuntimeError: the batcher is closed, or llama.cpp failed the step.
        """
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) + sampling.max_tokens > self.n_ctx_seq:
            raise ValueError(f"{len(prompt)} prompt tokens + max_tokens {sampling.max_tokens} exceed the "
                             f"{self.n_ctx_seq}-token sequence")
        reply = _Reply(list(prompt), sampling, queue.SimpleQueue(), share=share, waiting=waiting)
        with self._cond:
            if self._closed:
                raise RuntimeError("the reply batcher is closed")
            self._waiting.append(reply)
            self._cond.notify_all()
        return self._pieces(reply)

    def _pieces(self, reply: _Reply) -> Iterator[tuple[str, str | None]]:
        try:
            while True:
                text, finish = reply.out.get()
                if finish == "error":
                    raise RuntimeError(text)
                yield text, finish
                if finish is not None:
                    return
        finally:
            reply.closed.set()
            with self._cond:
                self._cond.notify_all()

    def stats(self) -> BatchStats:
        """A snapshot of :class:`BatchStats`."""
        with self._stats_lock:
            return dataclasses.replace(self._stats, batch_sizes=dict(self._stats.batch_sizes))

    def close(self) -> None:
        """Stop the thread; replies being written end with an error."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)

    # -- the batch thread -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._waiting and not self._active:
                    self._cond.wait()
                if self._closed:
                    for r in list(self._waiting) + self._active:
                        r.out.put(("the reply batcher closed", "error"))
                    return
                self._admit()
            self._drop_closed()
            if not self._active:
                continue
            try:
                self._step()
            except Exception as exc:  # every reply of the step is told; the thread goes on
                log.exception("Thinker batch step failed")
                for r in self._active:
                    r.out.put((f"{type(exc).__name__}: {exc}", "error"))
                    self._release(r, keep=False)
                self._active = []

    def _admit(self) -> None:
        """Give waiting replies a free sequence (under ``self._cond``): the one sharing the longest prefix."""
        while self._waiting and self._free:
            reply = next((r for r in self._waiting if r.waited_on()), self._waiting[0])  # a user waits first
            self._waiting.remove(reply)
            if reply.closed.is_set():
                continue
            common = [_common_prefix(kv, reply.prompt) for kv in self._kv]
            seq = max(self._free, key=lambda s: (common[s], -s))
            self._free.discard(seq)
            last = len(reply.prompt) - 1  # (the last prompt token is evaluated again for its logits)
            src = max(range(self.n_seq), key=lambda s: (common[s], s == seq))
            mem = self._ctx.memory
            if common[src] >= common[seq] + SHARE_MIN_TOKENS:  # another sequence holds more of it: share that
                keep = min(common[src], last)
                self._lc.llama_memory_seq_rm(mem, seq, -1, -1)
                self._lc.llama_memory_seq_cp(mem, src, seq, 0, keep)
            else:
                keep = min(common[seq], last)
                if not self._lc.llama_memory_seq_rm(mem, seq, keep, -1):
                    self._lc.llama_memory_seq_rm(mem, seq, -1, -1)
                    keep = 0
            self._kv[seq] = reply.prompt[:keep]
            reply.seq, reply.fed = seq, keep
            reply.sampler = self._sampler(reply.sampling)
            self._active.append(reply)
            with self._stats_lock:
                self._stats.replies += 1

    def _drop_closed(self) -> None:
        for r in [r for r in self._active if r.closed.is_set()]:
            self._active.remove(r)
            self._release(r, keep=True)

    def _release(self, reply: _Reply, *, keep: bool) -> None:
        """Free the reply's sequence; ``keep``: its cache stays for the next prompt sharing its start."""
        if reply.seq < 0:
            return
        if not keep:
            self._lc.llama_memory_seq_rm(self._ctx.memory, reply.seq, -1, -1)
            self._kv[reply.seq] = []
        with self._cond:
            self._free.add(reply.seq)
        reply.seq = -1

    def _step(self) -> None:
        """One ``llama_decode``: a token of every reply being written, then prompt tokens that fit."""
        b = self._batch.batch
        n = 0
        rows: list[tuple[_Reply, int]] = []  # (reply, batch row of its logits)
        for r in self._active:
            if r.fed == len(r.prompt) and r.completion:  # writing: its last token
                _put(b, n, r.completion[-1], len(self._kv[r.seq]), r.seq, True)
                self._kv[r.seq].append(r.completion[-1])
                rows.append((r, n))
                n += 1
        for r in sorted(self._active, key=lambda r: not r.waited_on()):  # (stable: in order of admission)
            if r.fed < len(r.prompt) and n < N_BATCH:  # its prompt, as much as fits
                take = min(len(r.prompt) - r.fed, N_BATCH - n)
                for i in range(take):
                    last = r.fed + i == len(r.prompt) - 1
                    _put(b, n, r.prompt[r.fed + i], r.fed + i, r.seq, last)
                    if last:
                        rows.append((r, n))
                    n += 1
                self._kv[r.seq].extend(r.prompt[r.fed : r.fed + take])
                r.fed += take
        b.n_tokens = n
        t0 = time.perf_counter()
        with CORES.hold(Priority.WORK, "thinker"):
            rc = self._lc.llama_decode(self._ctx.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            sampled = [(r, r.sampler.sample(self._ctx, row)) for r, row in rows]
        now = time.perf_counter()
        with self._stats_lock:
            s = self._stats
            s.steps += 1
            s.compute_s += now - t0
            s.tokens += len(sampled)
            s.max_batch = max(s.max_batch, len(sampled))
            s.batch_sizes[len(sampled)] = s.batch_sizes.get(len(sampled), 0) + 1
            for r, _ in sampled:
                wait = 0.0
                if not r.started:
                    r.started = True
                    wait = t0 - r.submitted_at
                    s.wait_s += wait
                if r.share is not None:
                    r.share.add(len(sampled), wait)
        for r, token in sampled:
            if self._take(r, token):
                self._active.remove(r)
                self._release(r, keep=True)

    def _take(self, r: _Reply, token: int) -> bool:
        """Pass on what ``token`` adds to ``r``'s text; True when the reply is over."""
        if self._lc.llama_vocab_is_eog(self._vocab, token):
            r.out.put((self._text(r)[r.returned :], "stop"))
            return True
        r.completion.append(token)
        text = self._text(r)
        hit = [text.index(s) for s in r.sampling.stop if s in text]
        if hit:
            r.out.put((text[r.returned : min(hit)], "stop"))
            return True
        if len(r.completion) >= r.sampling.max_tokens:
            r.out.put((text[r.returned :], "length"))
            return True
        if text.endswith("\ufffd"):  # an incomplete UTF-8 character so far: wait for the rest
            return False
        held = max((i for s in r.sampling.stop for i in range(min(len(s), len(text) - r.returned), 0, -1)
                    if text.endswith(s[:i])), default=0)
        upto = len(text) - held
        if upto > r.returned:
            r.out.put((text[r.returned : upto], None))
            r.returned = upto
        return False

    def _text(self, r: _Reply) -> str:
        return self._llm.detokenize(r.completion, prev_tokens=r.prompt).decode("utf-8", errors="replace")

    def _sampler(self, s: Sampling) -> Any:
        """The sampler chain ``Llama.create_completion`` builds for these parameters (llama-cpp-python
        0.3.36 ``Llama._init_sampler``), with the logit bias as llama.cpp's own sampler."""
        chain = self._internals.LlamaSampler()
        if s.logit_bias:
            chain.add_logit_bias(self._n_vocab, s.logit_bias)
        chain.add_penalties(n_vocab=self._n_vocab, penalty_last_n=PENALTY_LAST_N, penalty_repeat=s.repeat_penalty,
                            penalty_freq=0.0, penalty_present=0.0)
        if s.temperature == 0.0:
            chain.add_greedy()
        else:
            seed = s.seed if s.seed is not None else random.randint(0, 2**32 - 1)
            chain.add_top_k(s.top_k)
            chain.add_typical(1.0, 1)
            chain.add_top_p(s.top_p, 1)
            chain.add_min_p(s.min_p, 1)
            chain.add_temp(s.temperature)
            chain.add_dist(seed)
        return chain


def _put(b: Any, i: int, token: int, pos: int, seq: int, logits: bool) -> None:
    b.token[i] = token
    b.pos[i] = pos
    b.seq_id[i][0] = seq
    b.n_seq_id[i] = 1
    b.logits[i] = logits


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
