"""Turn-based chat through the pipeline (the backend of ``POST /v1/chat/completions``).

The API layer decodes every media part into arrays; this module only runs the stages:
ASR of audio parts, reading of images and video frames, the reply, and its speech.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np

from app.backend.pipeline.segmenter import segment_text
from app.backend.pipeline.stages import SamplingParams, ThinkerPrompt, Turn
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
    """The reply text, produced before any audio.

    Attributes:
        text: the reply.
        user_text: what the model understood the user said (text parts + transcripts).
        seen_text: what it read in the images.
        ttft_s: seconds from request start to the text.
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
    """Answer one chat request: yields one :class:`ReplyText`, then (if ``speech``) audio chunks.

    Raises:
        EmptyPrompt: nothing to answer.
        RequestCancelled: ``ctx`` was cancelled.
        StageError: a stage failed.
    """
    t0 = time.perf_counter()
    heard = [await pipeline.transcribe(ctx, a) for a in inp.audios]
    seen = [t for t in [await pipeline.read_image(ctx, img) for img in inp.images] if t]
    user_text = " ".join(p.strip() for p in [*inp.texts, *heard] if p and p.strip())
    if not user_text and not seen:
        raise EmptyPrompt("No text prompt found in messages (no text, no intelligible speech, no readable image)")
    prompt = ThinkerPrompt(inp.instructions, list(inp.history), user_text or "What do you see?", seen)
    reply = await pipeline.generate_reply(ctx, prompt, params)
    text = reply.text.strip()
    yield ReplyText(text, user_text, seen, time.perf_counter() - t0, reply.finish_reason)
    segments = segment_text(text) if text else []
    if speech and segments:
        async for chunk in pipeline.speak(ctx, segments):
            yield chunk
