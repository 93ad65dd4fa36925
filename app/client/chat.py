"""``python -m app chat``: one chat turn from the shell, against a server or in-process.

``python -m app chat (--text T | --audio FILE) [--image FILE] [--url URL] [--out reply.wav]
[--text-only] [--deploy-config F]``

* With ``--url`` the request goes to ``POST {url}/v1/chat/completions`` through the ``openai``
  SDK (non-streaming; key from ``OPENAI_API_KEY``, else ``OMNI_API_KEY``, default ``EMPTY``); the model name is the
  server's first ``/v1/models`` entry.
* Without ``--url`` the deploy config's model family is loaded here (a note on stderr says so) and
  :func:`app.backend.chat.run_chat` is called directly (no HTTP).

Prints what the model heard (in-process only), the reply transcript and the path of the reply
WAV (24 kHz mono), which is not written with ``--text-only`` or when the reply is empty.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from app.client.config import api_key_from_env
from app.media import MediaError, guess_audio_format, to_data_url

_IMAGE_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
               ".gif": "image/gif", ".bmp": "image/bmp"}


def _api_base(url: str) -> str:
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def build_messages(text: str | None, audio: Path | None, image: Path | None) -> list[dict[str, Any]]:
    """The ``messages`` of one user turn: the image (data URL) first, then the text or the spoken question."""
    parts: list[dict[str, Any]] = []
    if image is not None:
        mime = _IMAGE_MIME.get(image.suffix.lower(), "image/png")
        parts.append({"type": "image_url", "image_url": {"url": to_data_url(image.read_bytes(), mime)}})
    if audio is not None:
        fmt = guess_audio_format(audio.suffix) or "wav"
        parts.append({"type": "input_audio",
                      "input_audio": {"data": base64.b64encode(audio.read_bytes()).decode("ascii"), "format": fmt}})
    if text:
        parts.append({"type": "text", "text": text})
    return [{"role": "user", "content": parts}]


IN_PROCESS_NOTE = ("note: no --url given, so the models are loaded in this process (slow to start; a running "
                   "server is not used). To ask a server: --url http://127.0.0.1:7860")

KEY_HINT = "hint: the server wants an API key: set OPENAI_API_KEY or OMNI_API_KEY to it"


def _remote(args: argparse.Namespace, messages: list[dict[str, Any]], out: Path) -> tuple[str, str | None, str | None]:
    from openai import OpenAI

    client = OpenAI(base_url=_api_base(args.url), api_key=api_key_from_env() or "EMPTY", max_retries=0)
    model = client.models.list().data[0].id
    kwargs: dict[str, Any] = {"modalities": ["text"]}
    if not args.text_only:
        kwargs = {"modalities": ["text", "audio"], "audio": {"format": "wav", "voice": "default"}}
    resp = client.chat.completions.create(model=model, messages=messages, **kwargs)  # type: ignore[arg-type]
    text = ""
    audio_b64 = None
    for choice in resp.choices:  # choice 0 carries both; vLLM-Omni servers send a second, audio-only choice
        text = text or (choice.message.content or "")
        if choice.message.audio is not None and not audio_b64:
            audio_b64 = choice.message.audio.data
    heard = ((resp.model_extra or {}).get("x_omni") or {}).get("user_text")  # (this server's; vLLM-Omni has none)
    if audio_b64:
        out.write_bytes(base64.b64decode(audio_b64))
        return text, str(out), heard
    return text, None, heard


async def _local(args: argparse.Namespace, out: Path) -> tuple[str, str, str | None]:
    from app.backend.chat import ChatInput, run_chat
    from app.backend.engine import Engine
    from app.backend.pipeline.stages import SamplingParams
    from app.backend.pipeline.workers import AudioChunk, RequestContext
    from app.config import load_deploy_config
    from app.constants import INPUT_SAMPLE_RATE_HZ
    from app.media import decode_audio, decode_image, encode_wav

    cfg = load_deploy_config(args.deploy_config)
    limits = cfg.limits
    inp = ChatInput()
    if args.text:
        inp.texts.append(args.text)
    if args.audio:
        inp.audios.append(decode_audio(Path(args.audio).read_bytes(), target_rate=INPUT_SAMPLE_RATE_HZ,
                                       max_seconds=limits.max_audio_seconds))
    if args.image:
        inp.images.append(decode_image(Path(args.image).read_bytes(), max_bytes=limits.max_image_bytes,
                                       max_pixels=limits.max_image_pixels))
    keys = set(SamplingParams.__dataclass_fields__)
    params = SamplingParams(**{k: v for k, v in cfg.stage(0).default_sampling_params.as_dict().items() if k in keys})
    engine = Engine(cfg)
    await engine.start()
    try:
        assert engine.pipeline is not None and engine.family is not None
        ctx = RequestContext(f"cli-{uuid.uuid4().hex[:12]}")
        heard, text, pieces = "", "", []
        async for item in run_chat(engine.pipeline, ctx, inp, params, speech=not args.text_only):
            if isinstance(item, AudioChunk):
                pieces.append(item.audio)
            else:
                heard, text = item.user_text, item.text
        if pieces and sum(p.size for p in pieces):
            out.write_bytes(encode_wav(np.concatenate(pieces), engine.family.capabilities.output_sample_rate_hz))
            return heard, text, str(out)
        return heard, text, None
    finally:
        await engine.stop()


_GUIDE_FLAGS = ("video", "host", "port", "model", "query_type", "modalities", "stream", "prompts",
                "max_tokens", "temperature")


def _uses_guide_client(args: argparse.Namespace) -> bool:
    return bool(any(getattr(args, k, None) for k in _GUIDE_FLAGS) or getattr(args, "num_concurrent_requests", 1) > 1)


def _run_guide_client(args: argparse.Namespace, out: Path) -> int:
    from app.client.chat_multi import print_outcomes, run_requests

    url = args.url or f"http://{args.host or '127.0.0.1'}:{args.port or 8000}"
    modalities = [m.strip() for m in (args.modalities or ("text" if args.text_only else "text,audio")).split(",")]
    query_type = args.query_type or "text"
    prompts = [p for p in args.prompts.split(",") if p.strip()] if args.prompts else ([args.text] if args.text else None)
    if args.audio and not args.text and query_type == "text":
        query_type, prompts = "use_audio", [""]
    outcomes, summary = asyncio.run(run_requests(
        url, query_type=query_type, prompts=prompts, n=args.num_concurrent_requests, stream=args.stream,
        modalities=modalities, model=args.model, audio=Path(args.audio) if args.audio else None,
        image=Path(args.image) if args.image else None, video=Path(args.video) if args.video else None,
        max_tokens=args.max_tokens, temperature=args.temperature, out=out))
    return print_outcomes(outcomes, summary)


def run_chat_cli(args: argparse.Namespace) -> int:
    """Run ``python -m app chat``; returns the exit code (0 ok, 1 request failed, 2 bad arguments).

    The guide's client options (``--query-type``, ``--stream``, ``--num-concurrent-requests``,
    ``--prompts``, ``--video``, ``--modalities``, ``--model``, ``--host/--port``) go through
    :mod:`app.client.chat_multi` (server only)."""
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if _uses_guide_client(args):
        for name in ("audio", "image", "video"):
            value = getattr(args, name, None)
            if value and not Path(value).is_file():
                print(f"error: --{name} {value}: no such file", file=sys.stderr)
                return 2
        if not (args.url or getattr(args, "host", None) or getattr(args, "port", None)):
            print("error: these options need a server: --url or --host/--port", file=sys.stderr)
            return 2
        try:
            return _run_guide_client(args, out)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if not (args.text or args.audio):
        print("error: one of --text / --audio (or --query-type) is required", file=sys.stderr)
        return 2
    for name in ("audio", "image"):
        value = getattr(args, name, None)
        if value and not Path(value).is_file():
            print(f"error: --{name} {value}: no such file", file=sys.stderr)
            return 2
    try:
        if args.url:
            messages = build_messages(args.text, Path(args.audio) if args.audio else None,
                                      Path(args.image) if args.image else None)
            text, wav, heard = _remote(args, messages, out)
        else:
            print(IN_PROCESS_NOTE, file=sys.stderr, flush=True)
            heard, text, wav = asyncio.run(_local(args, out))
        if heard is not None:
            print(f"heard: {heard}")
    except MediaError as exc:
        print(f"error: bad input media: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a CLI reports, it does not trace back
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        if getattr(exc, "status_code", None) == 401:
            print(KEY_HINT, file=sys.stderr)
        return 1
    print(f"transcript: {text}")
    print(f"audio: {wav}" if wav else "audio: (none)")
    return 0
