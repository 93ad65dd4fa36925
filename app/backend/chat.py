"""Turn-based chat through the pipeline (the backend of ``POST /v1/chat/completions``).

The API layer decodes every media part into arrays; this module only runs the stages:
ASR of audio parts, reading of images and video frames, the reply, and its speech.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np

from app.backend.pipeline.stages import (
    GeneratedReply,
    SamplingParams,
    ThinkerPrompt,
    Turn,
)
from app.backend.pipeline.workers import AudioChunk, Pipeline, RequestContext
from app.constants import DEFAULT_INSTRUCTIONS


class EmptyPrompt(ValueError):
    """The request has neither text, nor speech, nor readable images (HTTP 400)."""


@dataclass
class ChatInput:
    """A decoded chat request.

    Attributes:
        instructions: system prompt text (default vLLM-Omni's duplex default).
        history: earlier text turns.
        texts: text parts of the last user message.
        audios: float32 16 kHz mono arrays (``input_audio``, ``audio_url`` and video sound tracks).
        images: uint8 RGB arrays (``image_url`` parts and sampled video frames).
    """

    instructions: str = DEFAULT_INSTRUCTIONS
    history: list[Turn] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    audios: list[np.ndarray] = field(default_factory=list)
    images: list[np.ndarray] = field(default_factory=list)


@dataclass
class ReplyText:
    """The reply text, once the Thinker has written all of it.

    Attributes:
        text: the reply.
        user_text: what the model understood the user said (text parts + transcripts).
        seen_text: what it saw in the images, one line each (repeats, e.g. like video frames, once).
        ttft_s: seconds from request start to the whole text.
        finish_reason: ``stop``, or ``length`` when ``max_tokens`` cut the reply (see
            :class:`~app.backend.pipeline.stages.GeneratedReply`).
    """

    text: str
    user_text: str
    seen_text: list[str]
    ttft_s: float
    finish_reason: str = "stop"


async def run_chat(
    pipeline: Pipeline, ctx: RequestContext, inp: ChatInput, params: SamplingParams, *, speech: bool
) -> AsyncIterator[ReplyText | AudioChunk]:
    """Answer one chat request: yields one :class:`ReplyText` and (if ``speech``) the audio chunks.

    With ``speech`` the reply is voiced while the Thinker writes it (its short first segment goes
    to the Talker at once, :meth:`Pipeline.stream_reply`), so the first audio chunks may come
    before the :class:`ReplyText`; it follows as soon as the Thinker is done (at the next chunk).
    Without ``speech`` the :class:`ReplyText` is the only item.

    Raises:
        EmptyPrompt: nothing to answer.
        RequestCancelled: ``ctx`` was cancelled.
        StageError: a stage failed.
    """
    t0 = time.perf_counter()
    last_user = next((t.text for t in reversed(inp.history) if t.role == "user"), "")  # (the ASR's context)
    heard = [await pipeline.transcribe(ctx, a, last_user) for a in inp.audios]
    seen = list(dict.fromkeys(t for t in [await pipeline.read_image(ctx, img) for img in inp.images] if t))
    user_text = " ".join(p.strip() for p in [*inp.texts, *heard] if p and p.strip())
    if not user_text and not seen:
        raise EmptyPrompt("No text prompt found in messages (no text, no intelligible speech, no readable image)")
    prompt = ThinkerPrompt(inp.instructions, list(inp.history), user_text or "What do you see?", seen)

    def reply_text(reply: GeneratedReply, done_at: float) -> ReplyText:
        return ReplyText(reply.text.strip(), user_text, seen, done_at - t0, reply.finish_reason)

    if not speech:
        reply = await pipeline.generate_reply(ctx, prompt, params)
        yield reply_text(reply, time.perf_counter())
        return
    stream = pipeline.stream_reply(ctx, prompt, params)
    told = False
    async for chunk in pipeline.speak(ctx, stream):
        if not told and stream.reply is not None:
            told = True
            yield reply_text(stream.reply, stream.done_at or time.perf_counter())
        yield chunk
    if not told:
        assert stream.reply is not None  # (speak iterates the stream to its end)
        yield reply_text(stream.reply, stream.done_at or time.perf_counter())
