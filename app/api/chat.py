"""``POST /v1/chat/completions``: OpenAI-compatible turn-based omni chat (vLLM-Omni's wire shape).

Thin: read the body under ``limits.max_request_bytes``, validate it (pydantic,
:mod:`app.api.chat_models`), decode the media (:mod:`app.api.media_resolve`), run
:func:`app.backend.chat.run_chat`, serialise. No state lives here.

Behaviour worth knowing (decisions where vLLM-Omni's reference is ambiguous or differs):

* ``modalities``: a list drawn from ``text``/``audio``; default both. ``["audio"]`` is accepted
  and treated like ``["text", "audio"]`` (the text is the audio's transcript anyway). A
  non-list or any other value -> 400 "Unsupported output modalities ...".
* ``audio.format``: wav (default, 24 kHz mono PCM16), pcm16/pcm (raw little-endian int16 at
  24 kHz), flac, mp3, opus; anything else -> 400 "Invalid audio format". Streaming chunks use
  the same format, each encoded on its own; with wav/pcm16/flac their PCM concatenates to the
  whole reply sample-exactly (mp3/opus add codec padding per chunk).
* Audio requested but the reply is empty (nothing to say): the response is text-only, audio
  omitted, no error (vLLM-Omni answers 400 "Audio generation completed but no audio was
  produced."; an empty reply is not a client error here).
* The reply is voiced while the Thinker writes it: a stream's first audio chunks may come before
  its one text chunk (the whole reply text, as MiniCPM-o's aggregated text chunk), which follows
  as soon as the Thinker is done. The first of them is awaited BEFORE the HTTP status is sent,
  also when streaming, so ``EmptyPrompt`` is a real 400 and a ``StageError`` before it a real
  500. Later failures inside a stream become ``data: {"error": {...}}`` then ``data: [DONE]``.
* A client that disconnects cancels the request's :class:`RequestContext`: every stage drops
  the request's queued work and the Talker stops; the outcome is counted as ``cancelled``.
* Metrics: ``omni_chat_requests{outcome=ok|bad_request|server_error|cancelled}``,
  ``omni_ttfp_seconds{route="chat"}`` (request start -> first audio ready).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import fields as dc_fields
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from app.api import chat_models as M
from app.api.errors import APIError, bad_request
from app.api.media_resolve import DecodedRequest, MediaLimits, build_chat_input
from app.backend.chat import ChatInput, EmptyPrompt, ReplyText, run_chat
from app.backend.pipeline.stages import ContextLengthExceeded, SamplingParams
from app.backend.pipeline.workers import (
    AudioChunk,
    RequestCancelled,
    RequestContext,
    StageError,
)
from app.backend.protocol.json_text import LoneSurrogateError, loads_text
from app.constants import AUDIO_TOKENS_PER_UNIT, FRAME_BLOCK_TOKENS
from app.media import MediaError, encode_audio

log = logging.getLogger(__name__)
router = APIRouter()

_SAMPLING_KEYS = tuple(f.name for f in dc_fields(SamplingParams))
_IGNORED_OK = frozenset({"frequency_penalty", "presence_penalty", "user", "metadata", "store", "stop",
                         "parallel_tool_calls", "response_format", "service_tier", "logit_bias"})
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class _ClientGone(Exception):
    """The client disconnected while the request body was being read."""


# --------------------------------------------------------------------------- request parsing
async def _read_body(request: Request, limit: int) -> bytes:
    _require_json(request)
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"Request body is {declared} bytes, limit {limit} (limits.max_request_bytes)",
                       code="request_too_large")
    buf = bytearray()
    try:
        async for piece in request.stream():
            buf += piece
            if len(buf) > limit:
                raise APIError(413, f"Request body exceeds {limit} bytes (limits.max_request_bytes)",
                               code="request_too_large")
    except APIError:
        raise
    except Exception as exc:  # starlette ClientDisconnect
        raise _ClientGone() from exc
    return bytes(buf)


def _parse_request(raw: bytes) -> M.ChatCompletionRequest:
    try:
        obj = loads_text(raw)
    except LoneSurrogateError as exc:
        raise bad_request(f"Request body is not valid text: {exc}", code="invalid_json", param=exc.path or None) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"Request body is not valid JSON: {exc}", code="invalid_json") from exc
    except RecursionError:  # e.g. 100k nested '[': json's C parser gives up on the stack depth
        raise bad_request("Request body is not valid JSON: nested too deeply", code="invalid_json") from None
    if not isinstance(obj, dict):
        raise bad_request("Request body must be a JSON object", code="invalid_request")
    try:
        req = M.ChatCompletionRequest.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = M.json_path(err.get("loc", ())) or None
        msg = f"{param}: {err.get('msg', 'invalid')}" if param else str(err.get("msg", "invalid request"))
        raise bad_request(msg, code="invalid_request", param=param) from exc
    ignored = sorted(set(req.model_extra or {}) - _IGNORED_OK)
    if ignored:
        log.info("chat request: ignoring unknown fields %s", ignored)
    return req


def _check_unsupported(req: M.ChatCompletionRequest) -> None:
    if req.n is not None and req.n != 1:
        raise bad_request("n > 1 is not supported", code="unsupported_parameter", param="n")
    if req.tools:
        raise bad_request("tools are not supported (this model makes no tool calls)", code="unsupported_parameter",
                          param="tools")
    if req.logprobs or req.top_logprobs:
        raise bad_request("logprobs are not supported", code="unsupported_parameter",
                          param="logprobs" if req.logprobs else "top_logprobs")


TEMPLATE_KWARGS = ("use_tts_template", "enable_thinking")
"""``chat_template_kwargs`` keys with a meaning here (any other key is refused)."""


def _template_speech(kwargs: dict[str, Any] | None, family: str) -> bool:
    """Apply ``chat_template_kwargs``: whether speech may be produced.

    ``use_tts_template: false`` means text only (vLLM-Omni: no TTS template, no Talker);
    ``enable_thinking: false`` is what the families here do anyway; ``enable_thinking: true``
    and any other key are refused (400 ``unsupported_parameter``), never silently dropped.
    """
    kwargs = kwargs or {}
    for key, value in kwargs.items():
        param = f"chat_template_kwargs.{key}"
        if key not in TEMPLATE_KWARGS:
            raise bad_request(f"{param} is not supported (supported: {', '.join(TEMPLATE_KWARGS)})",
                              code="unsupported_parameter", param=param)
        if not isinstance(value, bool):
            raise bad_request(f"{param} must be true or false", code="invalid_request", param=param)
    if kwargs.get("enable_thinking") is True:
        raise bad_request(f"chat_template_kwargs.enable_thinking: the '{family}' model family has no thinking mode",
                          code="unsupported_parameter", param="chat_template_kwargs.enable_thinking")
    return kwargs.get("use_tts_template", True) is not False


def _require_json(request: Request) -> None:
    """415 ``unsupported_media_type`` unless the body is declared JSON (no Content-Type is taken as JSON)."""
    declared = request.headers.get("content-type")
    if declared is None:
        return
    mime = declared.split(";", 1)[0].strip().lower()
    if mime != "application/json" and not mime.endswith("+json"):
        raise APIError(415, f"Content-Type must be application/json, got {declared!r} "
                            "(curl: add -H 'Content-Type: application/json')",
                       code="unsupported_media_type", param="Content-Type")


def _want_audio(modalities: Any) -> bool:
    if modalities is None:
        return True
    if (not isinstance(modalities, list) or not modalities
            or not all(isinstance(m, str) and m in M.OUTPUT_MODALITIES for m in modalities)):
        raise bad_request(f"Unsupported output modalities {modalities!r}; supported: ['text'] or ['text', 'audio']",
                          code="unsupported_modality", param="modalities")
    return "audio" in modalities


def _audio_format(req: M.ChatCompletionRequest) -> str:
    fmt = (req.audio.format if req.audio else "wav").strip().lower()
    if fmt not in M.AUDIO_OUTPUT_FORMATS:
        raise bad_request(f"Invalid audio format {fmt!r}; supported: {', '.join(M.AUDIO_OUTPUT_FORMATS)}",
                          code="invalid_audio_format", param="audio.format")
    return M.AUDIO_OUTPUT_FORMATS[fmt]


def _sampling(req: M.ChatCompletionRequest, config: Any, max_context: int) -> SamplingParams:
    vals: dict[str, Any] = {k: v for k, v in config.stage(0).default_sampling_params.as_dict().items()
                            if k in _SAMPLING_KEYS}
    if req.sampling_params_list:
        first = req.sampling_params_list[0]
        if first is not None and not isinstance(first, dict):
            raise bad_request("sampling_params_list[0] must be an object", param="sampling_params_list[0]")
        vals.update({k: v for k, v in (first or {}).items() if k in _SAMPLING_KEYS and v is not None})
    for key in ("temperature", "top_p", "top_k", "repetition_penalty", "seed"):
        if getattr(req, key) is not None:
            vals[key] = getattr(req, key)
    max_tokens = req.max_completion_tokens or req.max_tokens
    if max_tokens is not None:
        vals["max_tokens"] = max_tokens
    if vals.get("max_tokens") and vals["max_tokens"] > max_context:
        raise bad_request(f"max_tokens {vals['max_tokens']} exceeds the model context ({max_context} tokens)",
                          code="invalid_request", param="max_tokens")
    try:
        return SamplingParams(**vals)
    except TypeError as exc:  # pragma: no cover - keys are filtered above
        raise bad_request(f"Invalid sampling parameters: {exc}", param="sampling_params_list") from exc


def _prompt_tokens(dec: DecodedRequest) -> int:
    inp: ChatInput = dec.chat_input
    text = " ".join([inp.instructions, *(t.text for t in inp.history), *inp.texts])
    return (M.approx_tokens(text) + int(np.ceil(dec.audio_seconds)) * AUDIO_TOKENS_PER_UNIT
            + dec.image_count * FRAME_BLOCK_TOKENS)


async def _watch_disconnect(request: Request, ctx: RequestContext) -> None:
    """Cancel ``ctx`` when the client goes away (the body has been read already)."""
    while True:
        msg = await request.receive()
        if msg.get("type") == "http.disconnect":
            ctx.cancel()
            return


def _error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())


def _stage_error(exc: StageError) -> APIError:
    if isinstance(exc.__cause__, ContextLengthExceeded):  # the request's fault, not the server's
        return bad_request(str(exc.__cause__), code="context_length_exceeded", param="max_tokens")
    return APIError(500, f"{exc} (the request failed; the server keeps running)", code="stage_error",
                    type="server_error")


# --------------------------------------------------------------------------- route
@router.post("/v1/chat/completions")
async def create_chat_completion(request: Request) -> Response:
    """Answer one chat completion (JSON, or SSE when ``stream`` is true)."""
    engine = request.app.state.engine
    if engine.forwards_chat:  # a remote vLLM-Omni server answers
        return await _forward_chat(request, engine)
    metrics = engine.metrics
    t0 = time.perf_counter()
    try:
        prepared = await _prepare(request, engine)
    except _ClientGone:
        metrics.requests.labels("cancelled").inc()
        return Response(status_code=499)
    except APIError as exc:
        metrics.requests.labels("bad_request" if exc.status < 500 else "server_error").inc()
        return _error_response(exc)
    req, dec, params, want_audio, fmt = prepared

    ctx = RequestContext(M.new_completion_id())
    created = int(time.time())
    model = engine.config.server.served_model_name
    watcher = asyncio.create_task(_watch_disconnect(request, ctx))
    gen = run_chat(engine.pipeline, ctx, dec.chat_input, params, speech=want_audio)
    try:
        first = await anext(gen)  # the reply text, or its first audio
    except asyncio.CancelledError:
        ctx.cancel()
        watcher.cancel()
        raise
    except Exception as exc:  # noqa: BLE001 - mapped to HTTP statuses
        watcher.cancel()
        await gen.aclose()
        return _early_failure(exc, metrics, ctx)
    rate = engine.family.capabilities.output_sample_rate_hz
    job = _Job(ctx, model, created, t0, first, gen, watcher, metrics, rate, fmt, want_audio,
               _prompt_tokens(dec), req)
    if req.stream:
        return StreamingResponse(job.stream(), media_type="text/event-stream", headers=_SSE_HEADERS)
    return await job.complete()


async def _forward_chat(request: Request, engine: Any) -> Response:
    """Pass the request to the remote vLLM-Omni server and its answer back unchanged (SSE chunk by chunk)."""
    try:
        raw = await _read_body(request, engine.config.limits.max_request_bytes)
    except _ClientGone:
        return Response(status_code=499)
    except APIError as exc:
        return _error_response(exc)
    try:
        body = json.loads(raw)
    except ValueError as exc:
        return _error_response(bad_request(f"Request body is not valid JSON: {exc}", code="invalid_json"))
    except RecursionError:
        return _error_response(bad_request("Request body is not valid JSON: nested too deeply", code="invalid_json"))
    if not isinstance(body, dict):
        return _error_response(bad_request("Request body must be a JSON object", code="invalid_request"))
    status, headers, chunks = await engine.forward_chat(body, body.get("stream") is True)
    return StreamingResponse(chunks, status_code=status, headers=headers)


async def _prepare(request: Request, engine: Any) -> tuple[M.ChatCompletionRequest, DecodedRequest, SamplingParams,
                                                           bool, str]:
    limits = MediaLimits.from_config(engine.config.limits)
    req = _parse_request(await _read_body(request, limits.max_request_bytes))
    if engine.pipeline is None or engine.family is None:
        raise APIError(503, "The engine is not ready (models still loading); retry shortly", code="engine_not_ready",
                       type="server_error", retry_after_ms=5000)
    served = engine.config.server.served_model_name
    if not engine.serves_model(req.model):
        raise APIError(404, f"The model `{req.model}` does not exist (serving `{served}`)", code="model_not_found",
                       param="model")
    _check_unsupported(req)
    caps = engine.family.capabilities
    want_audio = _want_audio(req.modalities) and _template_speech(req.chat_template_kwargs, caps.name)
    fmt = _audio_format(req)
    params = _sampling(req, engine.config, caps.max_context_tokens)
    dec = await build_chat_input(req.messages, limits=limits, vision=caps.vision)
    return req, dec, params, want_audio, fmt


def _early_failure(exc: Exception, metrics: Any, ctx: RequestContext) -> Response:
    """Failures before the first byte of the response: proper HTTP statuses."""
    if isinstance(exc, EmptyPrompt):
        metrics.requests.labels("bad_request").inc()
        return _error_response(bad_request(str(exc), code="empty_prompt", param="messages"))
    if isinstance(exc, RequestCancelled) or ctx.cancelled:
        metrics.requests.labels("cancelled").inc()
        return Response(status_code=499)
    if isinstance(exc, StageError):
        err = _stage_error(exc)
        metrics.requests.labels("bad_request" if err.status < 500 else "server_error").inc()
        return _error_response(err)
    log.exception("chat request %s failed", ctx.request_id, exc_info=exc)
    metrics.requests.labels("server_error").inc()
    return _error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error",
                                    type="server_error"))


class _Job:
    """One accepted request after its first item (the reply text or its first audio): collects or
    streams the rest."""

    def __init__(self, ctx: RequestContext, model: str, created: int, t0: float, first: ReplyText | AudioChunk,
                 gen: AsyncIterator[ReplyText | AudioChunk], watcher: asyncio.Task[None], metrics: Any,
                 rate: int, fmt: str, want_audio: bool, prompt_tokens: int, req: M.ChatCompletionRequest) -> None:
        self.ctx, self.model, self.created, self.t0 = ctx, model, created, t0
        self.first: ReplyText | AudioChunk | None = first
        self.reply: ReplyText | None = None  # (run_chat yields it before it ends)
        self.gen, self.watcher, self.metrics, self.rate, self.fmt = gen, watcher, metrics, rate, fmt
        self.want_audio, self.prompt_tokens, self.req = want_audio, prompt_tokens, req
        self.audio_id = M.new_audio_id()
        self.ttfp_s: float | None = None
        self.audio_samples = 0

    def _first_audio(self) -> None:
        if self.ttfp_s is None:
            self.ttfp_s = time.perf_counter() - self.t0
            self.metrics.ttfp_s.labels("chat").observe(self.ttfp_s)

    async def _items(self) -> AsyncIterator[ReplyText | AudioChunk]:
        """The first item, then the rest; the reply text is kept as it passes."""
        first, self.first = self.first, None
        async for item in _chain(first, self.gen):
            if isinstance(item, ReplyText):
                self.reply = item
            yield item

    @property
    def _reply(self) -> ReplyText:
        assert self.reply is not None, "run_chat ended without the reply text"
        return self.reply

    def _usage(self) -> dict[str, int]:
        return M.usage(self.prompt_tokens, M.approx_tokens(self._reply.text))

    def _extra(self) -> dict[str, Any]:
        return {
            "user_text": self._reply.user_text,
            "seen_text": list(self._reply.seen_text),
            "ttft_s": round(self._reply.ttft_s, 4),
            "ttfp_s": None if self.ttfp_s is None else round(self.ttfp_s, 4),
            "audio_duration_s": round(self.audio_samples / self.rate, 4),
            "sample_rate_hz": self.rate,
            "voice": self.req.audio.voice if self.req.audio else None,
        }

    async def _close(self) -> None:
        self.watcher.cancel()
        with contextlib.suppress(BaseException):
            await self.gen.aclose()

    # ---- non-streaming ----
    async def complete(self) -> Response:
        pieces: list[np.ndarray] = []
        try:
            async for item in self._items():
                if isinstance(item, AudioChunk):
                    self._first_audio()
                    pieces.append(item.audio)
                    self.audio_samples += item.audio.size
            audio_obj = None
            if self.want_audio and self.audio_samples:
                pcm = np.concatenate(pieces)
                data = await asyncio.to_thread(encode_audio, pcm, self.rate, self.fmt)
                audio_obj = M.audio_object(self.audio_id, data, self._reply.text)
        except asyncio.CancelledError:
            self.ctx.cancel()
            await self._close()
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to HTTP statuses
            await self._close()
            return _early_failure(exc if not isinstance(exc, MediaError) else RuntimeError(str(exc)),
                                  self.metrics, self.ctx)
        await self._close()
        self.metrics.requests.labels("ok").inc()
        body = M.completion_response(completion_id=self.ctx.request_id, created=self.created, model=self.model,
                                     text=self._reply.text, audio=audio_obj, usage_obj=self._usage(),
                                     layout=self.req.omni_layout, extra=self._extra(),
                                     finish_reason=self._reply.finish_reason)
        return JSONResponse(body)

    # ---- streaming ----
    def _chunk(self, delta: dict[str, Any] | None, modality: str | None, **kw: Any) -> str:
        body = M.chunk(completion_id=self.ctx.request_id, created=self.created, model=self.model, delta=delta,
                       modality=modality, **kw)
        return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"

    async def stream(self) -> AsyncIterator[str]:
        outcome = "cancelled"
        try:
            yield self._chunk({"role": "assistant", "content": ""}, "text")
            try:
                async for item in self._items():
                    if isinstance(item, ReplyText):
                        if item.text:
                            yield self._chunk({"content": item.text}, "text")
                        continue
                    self._first_audio()
                    self.audio_samples += item.audio.size
                    data = await asyncio.to_thread(encode_audio, item.audio, self.rate, self.fmt)
                    b64 = M.audio_object(self.audio_id, data, item.text)["data"]
                    meta = {"format": self.fmt, "sample_rate_hz": self.rate, "frame_count": int(item.audio.size),
                            "channels": 1}
                    yield self._chunk({"content": b64,
                                       "audio": {"id": self.audio_id, "data": b64, "transcript": item.text}},
                                      "audio", audio_metadata=meta)
                last = "audio" if self.audio_samples else "text"
                yield self._chunk({}, last, finish_reason=self._reply.finish_reason, x_omni=self._extra())
                opts = self.req.stream_options
                if opts is not None and opts.include_usage:
                    yield self._chunk(None, None, usage=self._usage())
                outcome = "ok"
            except RequestCancelled:
                return
            except (StageError, MediaError, Exception) as exc:  # noqa: BLE001 - reported in-stream
                if self.ctx.cancelled:
                    return
                outcome = "server_error"
                err = _stage_error(exc) if isinstance(exc, StageError) else APIError(
                    500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error", type="server_error")
                log.warning("chat stream %s failed: %s", self.ctx.request_id, exc)
                yield f"data: {json.dumps(err.body())}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            if outcome != "ok":
                self.ctx.cancel()
            self.metrics.requests.labels(outcome).inc()
            await self._close()


async def _chain(first: ReplyText | AudioChunk | None,
                 rest: AsyncIterator[ReplyText | AudioChunk]) -> AsyncIterator[ReplyText | AudioChunk]:
    if first is not None:
        yield first
    async for item in rest:
        yield item
