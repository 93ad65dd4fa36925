"""Whether the words of an utterance are finished: Gemma 3 270M's next-token probability of the
sentence end after the transcript (the ``tiny`` family's text end-of-turn model).

The acoustic Smart Turn model is fooled by flat synthetic prosody: "I would like to book a table |
for two people tonight" scores as complete at the pause. The words say otherwise, but no word list
catches it (the fragment ends on a noun). A language model does: after the transcript quoted as
a voice message, the probability that the next token closes the sentence (``.``, ``?``, ``!`` or
the closing quote) is low when the sentence goes on. Measured on the turn-taking dialogue set's
sentences (``benchmarks/turns_dataset.py``): the inner-pause fragments score <= 0.03, the finished
questions and statements >= 0.07 (``benchmarks/tune_turns.py`` tunes the threshold,
``turn_policy.smart_turn_completion_threshold``, on the dev split and reports the test split).

The model runs in its own ``llama_cpp.Llama`` context on the Thinker's GGUF file (mmap'd, so the
weights' pages are shared with the Thinker's). Its calls take the cores ahead of the Thinker's
tokens (:data:`~app.backend.models.tiny.runtime.CORES`), so it uses both: one call is ~6-30 tokens
of prefill after the prompt's kept start (:data:`FIXED_START`), ~37 ms on this machine's 2 cores.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import numpy as np

from app.backend.models.tiny.llm import load_gemma
from app.backend.models.tiny.runtime import DEFAULT_THREADS

PROMPT: Final[str] = 'Transcript of a voice message:\n"{text}'
"""The transcript (its final punctuation removed) is quoted; the next token says whether it ends."""

FIXED_START: Final[str] = PROMPT.split('"', 1)[0]
"""The start of every prompt whose evaluation is kept between calls (8 tokens of ~17: 37 instead of
58 ms a call on this machine). It stops before the quote, which may merge with the text's first
characters into one token. It is evaluated alone, so a text's probability never depends on the
call before it (which session, in what order)."""

END_STRINGS: Final[tuple[str, ...]] = ('."', '?"', '!"', ".", "?", "!", '"', " ?", ".\n", "?\n")
"""Next tokens that end the quoted utterance (the first token of each)."""

N_CTX: Final[int] = 256
"""Context of the scoring context, tokens (the transcript is cut to its last ~150 words)."""

MAX_WORDS: Final[int] = 150
"""Words of the transcript kept (the end decides)."""

_TRAILING: Final[re.Pattern[str]] = re.compile(r"[\s.?!,;:\u2026\"'\u201d]+$")


def words_of(text: str) -> str:
    """``text`` checked for a word (the scorer's ``prepare``).

    Raises:
        ValueError: not a string, or no word in it.
    """
    if not isinstance(text, str) or not _TRAILING.sub("", text.strip()).split():
        raise ValueError("the text end-of-turn model needs a transcript with words")
    return text


class GemmaTextEndModel:
    """``predict(texts) -> float32 [n]``: the probability that each utterance's words end there.

    Args:
        model_path: the GGUF file (default: the Thinker's, :func:`~app.backend.models.tiny.llm.gemma_gguf_path`,
            sha256-checked).
        n_threads: llama.cpp threads.

    Raises:
        ModelAssetMissingError, WeightIntegrityError: see :func:`~app.backend.models.tiny.llm.gemma_gguf_path`.
    """

    def __init__(self, model_path: Path | None = None, n_threads: int = DEFAULT_THREADS) -> None:
        import llama_cpp

        self._llm = load_gemma(model_path, n_ctx=N_CTX, n_threads=n_threads, n_batch=N_CTX)
        self._logits_ith = llama_cpp.llama_get_logits_ith
        self._end_ids = sorted({self._llm.tokenize(s.encode(), add_bos=False)[0] for s in END_STRINGS})
        self._lock = threading.Lock()  # one llama context: one call at a time
        self._fixed = self._llm.tokenize(FIXED_START.encode(), add_bos=True)
        self._fixed_ready = False

    def end_probability(self, text: str) -> float:
        """Probability in [0, 1] that ``text`` (a transcript, any final punctuation ignored) ends here.

        Raises:
            ValueError: ``text`` holds no word.
        """
        words = _TRAILING.sub("", text.strip()).split()
        if not words:
            raise ValueError("no words to score")
        prompt = PROMPT.format(text=" ".join(words[-MAX_WORDS:]))
        with self._lock:
            llm, fixed = self._llm, self._fixed
            tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True)
            if tokens[: len(fixed)] == fixed and len(tokens) > len(fixed):
                if not self._fixed_ready:  # the prompt's fixed start, evaluated alone once
                    llm.reset()
                    llm.eval(fixed)
                    self._fixed_ready = True
                llm.n_tokens = len(fixed)  # (eval drops the previous call's tokens after it)
                llm.eval(tokens[len(fixed):])
            else:  # (not seen: the fixed start always tokenizes alike)
                llm.reset()
                llm.eval(tokens)
                self._fixed_ready = False
            ptr = self._logits_ith(self._llm.ctx, -1)
            logits = np.ctypeslib.as_array(ptr, shape=(self._llm.n_vocab(),)).astype(np.float64)
        p = np.exp(logits - logits.max())
        return float(p[self._end_ids].sum() / p.sum())

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`end_probability` of each text, float32 ``[len(texts)]`` (one context, texts in turn).

        The texts are scored in a thread that exits afterwards: a live thread other than the
        Thinker's that has run llama.cpp makes libgomp throttle the busy-wait of every team, and
        the Thinker's tokens then take 42 ms instead of 26 on this 2-core machine (see
        :func:`~app.backend.pipeline.workers.in_passing_thread`); a fresh thread costs well under 1 ms.

        Raises:
            ValueError: a text holds no word.
        """
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="text-end") as pool:
            return pool.submit(lambda: np.array([self.end_probability(t) for t in texts], dtype=np.float32)).result()
