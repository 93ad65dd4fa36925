"""The guide's multimodal chat client options for ``python -m app chat`` against a server.

Mirrors vLLM-Omni's ``openai_chat_completion_client_for_multimodal_generation.py``:
``--query-type text|use_audio|use_image|use_video`` (sample inputs from :mod:`app.client.samples`
unless ``--audio``/``--image``/``--video`` are given), ``--modalities text|text,audio``,
``--stream`` (text deltas printed as they come; the streamed audio chunks saved as one WAV),
``--num-concurrent-requests N`` with ``--prompts a,b,c`` (request ``i`` asks prompt
``i mod len``), ``--model``, ``--host/--port`` (or ``--url``), ``--max-tokens``, ``--temperature``.

Per request it prints ``[i] ttft_ms=... ttfa_ms=... total_ms=... transcript: ...`` and the WAV
path; concurrent runs end with one ``summary:`` line (count, ok, wall time, requests/s, TTFT and
TTFA p50/mean). TTFT = request sent -> first non-empty text (stream) or the whole response
(non-stream); TTFA = request sent -> first audio chunk (stream) or the whole response.
"""

from __future__ import annotations

import asyncio
import base64
import io
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openai
import soundfile as sf

from app.client.config import api_key_from_env
from app.constants import OUTPUT_SAMPLE_RATE_HZ

QUERY_TYPES = ("text", "use_audio", "use_image", "use_video")
DEFAULT_PROMPTS = {
    "text": "What is the capital of France?",
    "use_audio": None,  # the spoken question is the prompt
    "use_image": "What does the sign say?",  # the phrasing tiny's few-shot prompt reads signs with
    "use_video": "What does the sign say?",
}


@dataclass
class Outcome:
    """One request's result: ``text``, ``audio`` (float32 24 kHz mono), times in ms, ``error``."""

    index: int
    text: str = ""
    audio: list[np.ndarray] = field(default_factory=list)
    ttft_ms: float | None = None
    ttfa_ms: float | None = None
    total_ms: float | None = None
    error: str | None = None
    wav: str | None = None


def _b64_part(path: Path, kind: str) -> dict[str, Any]:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    if kind == "audio":
        return {"type": "input_audio", "input_audio": {"data": data, "format": path.suffix.lstrip(".") or "wav"}}
    mime = {"image": "image/png" if path.suffix.lower() == ".png" else "image/jpeg", "video": "video/mp4"}[kind]
    return {"type": f"{kind}_url", f"{kind}_url": {"url": f"data:{mime};base64,{data}"}}


def build_content(query_type: str, prompt: str | None, *, audio: Path | None = None, image: Path | None = None,
                  video: Path | None = None) -> list[dict[str, Any]]:
    """A user turn's content parts for ``query_type``: media first (sample files unless given), then text.

    Raises:
        ValueError: unknown ``query_type``.
    """
    from app.client.samples import sample_path

    if query_type not in QUERY_TYPES:
        raise ValueError(f"query type must be one of {QUERY_TYPES}, not {query_type!r}")
    parts = []
    if image or query_type == "use_image":
        parts.append(_b64_part(image or sample_path("image.png"), "image"))
    if video or query_type == "use_video":
        parts.append(_b64_part(video or sample_path("clip.mp4"), "video"))
    if audio or query_type == "use_audio":
        parts.append(_b64_part(audio or sample_path("question.wav"), "audio"))
    text = prompt if prompt is not None else DEFAULT_PROMPTS[query_type]
    if text:
        parts.append({"type": "text", "text": text})
    return parts


def _decode_chunk(data: str) -> np.ndarray:
    raw = base64.b64decode(data)
    audio, _rate = sf.read(io.BytesIO(raw), dtype="float32", always_2d=True)
    return audio.mean(axis=1)


async def _one(client: Any, body: dict[str, Any], out: Outcome, echo: bool) -> None:
    """One chat request through the ``openai`` SDK's async client (``client.chat.completions``)."""
    t0 = time.perf_counter()

    def ms() -> float:
        return round((time.perf_counter() - t0) * 1000, 1)

    try:
        if not body.get("stream"):
            resp = await client.chat.completions.create(**body)
            out.total_ms = out.ttft_ms = ms()
            for choice in resp.choices:  # vLLM-Omni servers may send a second, audio-only choice
                out.text = out.text or (choice.message.content or "")
                if choice.message.audio is not None and choice.message.audio.data and not out.audio:
                    out.audio.append(_decode_chunk(choice.message.audio.data))
                    out.ttfa_ms = out.total_ms
            return
        async for chunk in await client.chat.completions.create(**body):
            for choice in chunk.choices:
                delta = choice.delta
                audio = ((delta.model_extra or {}).get("audio") or {}).get("data")
                if audio is None and (chunk.model_extra or {}).get("modality") == "audio":
                    audio = delta.content  # vLLM-Omni also puts an audio chunk's WAV in delta.content
                if audio:
                    out.ttfa_ms = out.ttfa_ms if out.ttfa_ms is not None else ms()
                    out.audio.append(_decode_chunk(audio))
                elif delta.content:
                    out.ttft_ms = out.ttft_ms if out.ttft_ms is not None else ms()
                    out.text += delta.content
                    if echo:
                        sys.stdout.write(delta.content)
                        sys.stdout.flush()
        out.total_ms = ms()
        if echo:
            sys.stdout.write("\n")
    except (openai.APIError, ValueError, sf.LibsndfileError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 1) if values else None


async def run_requests(base_url: str, *, query_type: str = "text", prompts: list[str] | None = None,
                       n: int = 1, stream: bool = False, modalities: list[str] | None = None,
                       model: str | None = None, audio: Path | None = None, image: Path | None = None,
                       video: Path | None = None, max_tokens: int | None = None, temperature: float | None = None,
                       out: Path = Path("reply.wav"), echo: bool = True) -> tuple[list[Outcome], dict[str, Any]]:
    """Send ``n`` chat requests at once to ``base_url`` (``http://host:port``) and save each reply WAV.

    Returns:
        ``(outcomes, summary)``; ``summary`` has ``requests``, ``ok``, ``wall_s``, ``req_per_s``,
        ``ttft_ms_p50``/``_mean``, ``ttfa_ms_p50``/``_mean``. Failures are in each outcome's ``error``.

    Raises:
        ValueError: bad ``query_type``, ``n < 1``.
    """
    if n < 1:
        raise ValueError("--num-concurrent-requests must be >= 1")
    modalities = modalities or ["text", "audio"]
    root = base_url.rstrip("/")
    api = root if root.endswith("/v1") else root + "/v1"
    async with openai.AsyncOpenAI(base_url=api, api_key=api_key_from_env() or "EMPTY", timeout=600.0,
                                  max_retries=0) as client:
        if model is None:
            model = (await client.models.list()).data[0].id
        bodies = []
        for i in range(n):
            prompt = prompts[i % len(prompts)] if prompts else None
            body: dict[str, Any] = {"model": model, "stream": stream, "modalities": modalities,
                                    "messages": [{"role": "user", "content": build_content(
                                        query_type, prompt, audio=audio, image=image, video=video)}]}
            if "audio" in modalities:
                body["audio"] = {"format": "wav", "voice": "default"}
            if max_tokens is not None:
                body["max_tokens"] = max_tokens
            if temperature is not None:
                body["temperature"] = temperature
            bodies.append(body)
        outcomes = [Outcome(i) for i in range(n)]
        t0 = time.perf_counter()
        await asyncio.gather(*(_one(client, b, o, echo and n == 1 and stream)
                               for b, o in zip(bodies, outcomes, strict=True)))
        wall = time.perf_counter() - t0
    for o in outcomes:
        if o.audio and sum(a.size for a in o.audio):
            path = out if n == 1 else out.with_name(f"{out.stem}_{o.index}{out.suffix}")
            sf.write(path, np.concatenate(o.audio), OUTPUT_SAMPLE_RATE_HZ, subtype="PCM_16", format="WAV")
            o.wav = str(path)
    ok = [o for o in outcomes if o.error is None]
    summary = {"requests": n, "ok": len(ok), "wall_s": round(wall, 3), "req_per_s": round(n / wall, 3),
               "ttft_ms_p50": _p50([o.ttft_ms for o in ok if o.ttft_ms is not None]),
               "ttft_ms_mean": _mean([o.ttft_ms for o in ok if o.ttft_ms is not None]),
               "ttfa_ms_p50": _p50([o.ttfa_ms for o in ok if o.ttfa_ms is not None]),
               "ttfa_ms_mean": _mean([o.ttfa_ms for o in ok if o.ttfa_ms is not None])}
    return outcomes, summary


def print_outcomes(outcomes: list[Outcome], summary: dict[str, Any]) -> int:
    """Print each request and (for several) the summary line; returns 0 if all succeeded else 1."""
    for o in outcomes:
        if o.error:
            print(f"[{o.index}] error: {o.error}", file=sys.stderr)
            continue
        print(f"[{o.index}] ttft_ms={o.ttft_ms} ttfa_ms={o.ttfa_ms} total_ms={o.total_ms}")
        print(f"transcript: {o.text}")
        print(f"audio: {o.wav}" if o.wav else "audio: (none)")
    if len(outcomes) > 1:
        print("summary: " + " ".join(f"{k}={v}" for k, v in summary.items()))
    return 0 if summary["ok"] == summary["requests"] else 1
