"""Duplex behaviour (turn-taking) benchmark on a generated dialogue set with ground truth.

The dialogues come from :mod:`turns_dataset` (generated at benchmark time into the system temp
dir; categories, voices, noise and ground truth are described there). Each dialogue runs in a
fresh session through :class:`app.client.duplex.DuplexClient` on ``WS /v1/realtime?duplex=1``:
input appended in ``--append-ms`` slices (100 ms), no commits (the server's turn policy decides),
the server's default session settings (``overlap_policy`` ``listen_only``).

Clocks. *Wall* times are client ``time.monotonic()``; the *media clock* is cumulative input audio
sent (``audio_end_ms``). The media stamp of a server event is the ``audio_end_ms`` of the last
append sent before it was received. The *origin* of a media instant ``m`` is the send time of the
first append whose ``audio_end_ms >= m`` (up to one append after ``m``; recorded as slack).

Pacing. ``--pace realtime`` (default): slice ``[a, b)`` ms is sent at ``t0 + b/1000`` s.
``--pace fast`` (decision metrics only; latencies are not reported): slices are sent
``--fast-speedup`` (8) times faster than real time, and after every
``input_audio_buffer.speech_stopped`` the input stalls until the server has acted on that turn
end (a ``response.created``, or the user item's transcript, which it publishes before deciding
to answer or not) or ``--fast-settle-s`` (8 s) pass: the server's model work then costs no media
time, i.e. the run emulates an infinitely fast model and the media stamps show where the
*policy* decided. The
overlap categories (``backchannel``, ``barge_in``) always run at real time, because their second
utterance must start at a given point of the reply's real playback (below); every category's
pace is recorded.

Playback emulation. The client plays the assistant's audio at real time: a delta's audio starts at
``max(its receive time, end of the audio queued before it)``. A stop (``response.done`` with
``status: cancelled`` or ``status_details.reason: user_overlap``, or ``response.listen`` carrying
the response's id) drops the rest. When a response's audio has drained (or at a stop) the client
sends ``playback.ack{played_ms, truncate}`` like a player (``DuplexClient.ack_playback``). For
``backchannel`` / ``barge_in`` the second utterance (part B) is streamed so that its speech onset
lands ``onset_after_first_audio_ms`` (ground truth, 0.3-0.9 s) of media time after the media
stamp of the reply's first audio delta, i.e. that far into the reply's playback.

Per dialogue, user *turns* come from the ground truth (``start_ms``/``end_ms`` of speech; a pause
inside an utterance belongs to its turn; part B of a barge-in is a turn, a backchannel is not).
Each response (``response.created``) is attributed to the user speech it answers: the server
publishes that item's transcript (``conversation.item.input_audio_transcription.completed``)
right before it creates the reply, and ``input_audio_buffer.speech_started`` gave the item's
media start, which falls in one ground-truth turn (from 400 ms before its first speech to 100 ms
after its end) or in none (a backchannel, noise). Without such a transcript, the response goes to
the earliest finished turn that has no reply yet, else to a turn in progress. A response
attributed to turn k is a *premature takeover* if it was created before the origin of the end of
turn k, a *reply* if it is the first one after it, *extra* otherwise; a response attributed to no
turn is *unprompted* (a reply to silence, noise, a backchannel...).

Metrics (counts ``k/n``, rates with Wilson 95 % intervals; percentiles with distribution-free
order-statistic 95 % intervals, ``None`` where n is too small for a bound):

``turn_end_latency_ms``  per turn with a reply due, real time only: receive time of the first
    non-empty audio delta of the response assigned to the turn, minus the origin of the turn's
    end (end of the user's speech). p50 / p95.
``premature_takeover``  per dialogue with user turns: at least one premature takeover (a response
    attributed to a turn and created while that turn had not really ended, e.g. in a mid-sentence
    pause).
``missed_turn``  per turn with a reply due: no assigned response whose first audio arrived within
    ``--reply-window-s`` (4 s) of the origin of the turn's end (fast pace: whose ``response.created``
    media stamp lies within that window of the turn's end). A premature response that keeps
    talking over the real end is not a reply.
``nonspeech_reply``  per ``silence`` / ``noise`` dialogue: any response created.
``backchannel_false_stop``  per valid ``backchannel`` dialogue: the reply was stopped (stop event
    as above, received after the send time of the append carrying the backchannel's onset) while
    its audio had not run out on the playback clock. Valid: a reply to part A existed and was
    audible at the onset, and was either stopped or would have played on for at least
    ``MIN_REMAINING_MS`` (1 s) after the onset.
``barge_in_success``  per valid ``barge_in`` dialogue (same validity): the reply was stopped
    after the barge-in onset and before its audio ran out.
``barge_in_stop_latency_ms``  per success: receive time of the stop event minus the send time of
    the append carrying the barge-in's first speech sample (the onset). p50 / p95.
``backchannel_answered``  (informative) a response created after a backchannel onset.
``both_answered_in_order``  per ``back_to_back`` dialogue: neither turn missed and the two replies
    created in turn order.

Run time on 2 cores (mean wall per dialogue in the quick run): question 4.8 s, statement 3.7,
pause 5.4, hesitation 5.6, silence 12.8, noise 10.8, backchannel 8.3, barge_in 8.2, back_to_back
8.9, so ~70 s per round of the 9 categories: ~35 min per detector for 30 per category (+ server
start and one warm-up dialogue); ``--pace fast`` ~14 min (estimate: the overlap categories stay real time).

Detectors. ``--detector NAME`` starts the server with the deploy override
``{"turn_policy": {"detector": NAME}}`` (temp YAML via ``common.write_deploy_yaml``); omitted =
no override (today's server rejects the unknown key: the current policy is the default, label
``default``; ``silence`` also sets ``resume_window_ms: 0``, the old policy). ``--detectors silence,smart_turn`` runs several, each on a fresh server, the
dialogues interleaved (dialogue i on every detector before dialogue i+1; ``--order
sequential`` runs them back to back). ``--server-url`` runs against a running server (one
detector, ``--label`` names it). Rows of ``results/turns.json`` are per detector label; a later
run on the same dataset (split, seed, per-category, categories) replaces its own label's row and
keeps the others (``--fresh`` drops them), so detectors end up side by side.

Usage::

    .venv/bin/python benchmarks/bench_turns.py --quick                       # 3 per category, ~4 min
    .venv/bin/python benchmarks/bench_turns.py                               # 30 per category, ~35 min
    .venv/bin/python benchmarks/bench_turns.py --pace fast                   # ~14 min (estimate), no latencies
    .venv/bin/python benchmarks/bench_turns.py --detectors silence,smart_turn --split test
    .venv/bin/python benchmarks/bench_turns.py --categories pause,hesitation --per-category 10
    .venv/bin/python benchmarks/bench_turns.py --server-url http://127.0.0.1:7860 --label mine
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C
import turns_dataset as D

from app.client.collector import RECEIVED_AT_KEY
from app.client.duplex import AppendRecord, DuplexClient, SessionConfig
from app.client.protocol import AUDIO_DELTA, event_response_id, event_type

REPLY_WINDOW_S = 4.0
MIN_REMAINING_MS = 1000.0
NONSPEECH_GRACE_S = 2.5
OVERLAP_TAIL_S = 1.5
MAX_DIALOGUE_MEDIA_S = 45.0
PAUSE_BINS = ((0, 500, "<0.5 s"), (500, 800, "0.5-0.8 s"), (800, 10_000, ">=0.8 s"))

DEFINITIONS = {
    "media_clock": "cumulative input audio sent (audio_end_ms); an event's media stamp = audio_end_ms of the last "
                   "append sent before it was received",
    "origin": "send time of the first append whose audio_end_ms reaches the media instant",
    "turn_end_latency_ms": "per turn with a reply due (real time only): first non-empty audio delta of the response "
                           "assigned to the turn minus the origin of the turn's end of speech",
    "premature_takeover": "per dialogue with user turns: a response attributed to a turn and created before the "
                          "origin of that turn's real end",
    "missed_turn": "per turn with a reply due: no assigned response with first audio within reply_window_s of the "
                   "origin of the turn's end (fast pace: response.created media stamp within the window)",
    "nonspeech_reply": "per silence/noise dialogue: any response created",
    "backchannel_false_stop": "per valid backchannel dialogue: response.done cancelled or reason user_overlap, or "
                              "response.listen with the reply's id, received after the backchannel onset was sent and "
                              "before the reply's audio ran out on the client's playback clock",
    "barge_in_success": "per valid barge_in dialogue: the reply was stopped (same events) after the barge-in onset "
                        "was sent and before its audio ran out",
    "barge_in_stop_latency_ms": "per success: stop event receive time minus the send time of the append carrying the "
                                "barge-in's first speech sample",
    "valid_overlap": "a reply to part A was audible at the onset of part B and was stopped, or would have played for "
                     f">= {MIN_REMAINING_MS:g} ms after the onset",
    "backchannel_answered": "informative: a response created after the backchannel onset (other than the reply)",
    "attribution": "a response answers the user item whose transcript the server published right before "
                   "response.created; that item's speech_started media time picks the ground-truth turn (or none: "
                   "unprompted). Without a transcript: the earliest finished turn without a reply, else a turn in "
                   "progress",
    "both_answered_in_order": "per back_to_back dialogue: no missed turn and the replies created in turn order",
}


# --------------------------------------------------------------------------- playback emulation
class Player:
    """The client's real-time playback of the assistant's audio (one output queue)."""

    def __init__(self) -> None:
        self.queue_end: float | None = None
        self.resp: dict[str, dict[str, Any]] = {}

    def delta(self, rid: str, rx: float, dur_s: float) -> None:
        r = self.resp.setdefault(rid, {"first_rx": rx, "deltas": [], "stopped_at": None, "acked": False})
        if r["stopped_at"] is not None:
            return
        start = rx if self.queue_end is None else max(rx, self.queue_end)
        r["deltas"].append((rx, start, dur_s))
        self.queue_end = start + dur_s

    def stop(self, rid: str, t: float) -> None:
        r = self.resp.get(rid)
        if r is None or r["stopped_at"] is not None:
            return
        r["stopped_at"] = t
        if self.queue_end is not None and r["deltas"] and abs(self.queue_end - (r["deltas"][-1][1] + r["deltas"][-1][2])) < 1e-9:
            self.queue_end = min(self.queue_end, t)

    def first_start(self, rid: str) -> float | None:
        r = self.resp.get(rid)
        return r["deltas"][0][1] if r and r["deltas"] else None

    def sched_end(self, rid: str, received_by: float = float("inf")) -> float | None:
        """End of the audio of the deltas received by ``received_by`` (ignoring any stop)."""
        r = self.resp.get(rid)
        if not r:
            return None
        ends = [s + d for rx, s, d in r["deltas"] if rx <= received_by]
        return max(ends) if ends else None

    def played_ms(self, rid: str, t: float) -> float:
        r = self.resp.get(rid)
        if not r:
            return 0.0
        stop = r["stopped_at"] if r["stopped_at"] is not None else float("inf")
        t = min(t, stop)
        return sum(max(0.0, min(t - s, d)) for _, s, d in r["deltas"]) * 1000.0


# --------------------------------------------------------------------------- dialogue
def _load_pcm(path: Path) -> np.ndarray:
    return D.read_wav(path)


class Script:
    """What the sender streams: static input, or part A + live fill + part B at a trigger."""

    def __init__(self, inst: dict[str, Any], folder: Path) -> None:
        files = inst["files"]
        self.inst = inst
        self.overlap = inst["truth"]["overlap"] is not None
        self.bed = _load_pcm(folder / files["noise_bed"]) if "noise_bed" in files else None
        if self.overlap:
            self.a = _load_pcm(folder / files["part_a"])
            self.b = _load_pcm(folder / files["part_b"])
            self.static = None
        else:
            self.static = _load_pcm(folder / files["input"])
        self.b_at: int | None = None  # sample index where part B starts (decided at run time)

    def chunk(self, pos: int, n: int) -> np.ndarray:
        """Samples ``[pos, pos+n)`` of the stream (zeros past the end of what is scheduled)."""
        out = np.zeros(n, np.float32)
        if self.static is not None:
            seg = self.static[pos : pos + n]
            out[: seg.size] = seg
            return out
        seg = self.a[pos : pos + n]
        out[: seg.size] += seg
        if self.b_at is not None:
            lo, hi = max(pos, self.b_at), min(pos + n, self.b_at + self.b.size)
            if hi > lo:
                out[lo - pos : hi - pos] += self.b[lo - self.b_at : hi - self.b_at]
        if self.bed is not None:
            idx = (np.arange(pos, pos + n) % self.bed.size)
            out += self.bed[idx]
        return out

    @property
    def static_samples(self) -> int:
        return self.static.size if self.static is not None else self.a.size


def _pcm16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1) * 32767.0).round().astype("<i2").tobytes()


def _media_at(sent: list[float], appends: list[AppendRecord], t: float) -> float:
    i = bisect.bisect_right(sent, t) - 1
    return appends[i].audio_end_ms if i >= 0 else 0.0


def _origin(appends: list[AppendRecord], media_ms: float) -> AppendRecord | None:
    return next((a for a in appends if a.audio_end_ms >= media_ms - 1e-6), None)


def _carrying(appends: list[AppendRecord], media_ms: float) -> AppendRecord | None:
    return next((a for a in appends if a.audio_start_ms <= media_ms < a.audio_end_ms), None)


def _stop_of(ev: dict[str, Any]) -> tuple[str, str] | None:
    """``(response_id, what)`` when ``ev`` stops a response (cancel / user_overlap / listen with id)."""
    kind = event_type(ev)
    if kind == "response.done":
        resp = ev.get("response") or {}
        details = resp.get("status_details") or {}
        if details.get("reason") == "session_closed":  # our own session.close at the end of the dialogue
            return None
        if resp.get("status") == "cancelled" or details.get("reason") == "user_overlap":
            return str(resp.get("id") or ev.get("response_id")), f"done:{resp.get('status')}/{details.get('reason')}"
        return None
    if kind == "response.listen" and ev.get("response_id"):
        return str(ev["response_id"]), "listen:" + str(((ev.get("response") or {}).get("metadata") or {}).get("reason"))
    return None


async def run_dialogue(url: str, inst: dict[str, Any], folder: Path, *, pace: str, append_ms: int,
                       reply_window_s: float, fast_speedup: float, fast_settle_s: float) -> dict[str, Any]:
    """Stream one dialogue in a fresh session; returns its record (analysis included)."""
    script = Script(inst, folder)
    truth = inst["truth"]
    cat = inst["category"]
    if script.overlap:
        pace = "realtime"
    n_chunk = round(append_ms * D.RATE / 1000)
    player = Player()
    state: dict[str, Any] = {"first_audio_media": None, "first_audio_rx": None, "b_media": None,
                             "reply_a_end": None, "speech_stopped_rx": [], "created_rx": [], "transcript_rx": [], "acks": 0}
    ov = truth["overlap"]
    turn_ends = [t["end_ms"] for t in truth["turns"]]
    t_start = time.monotonic()
    async with DuplexClient(url, config=SessionConfig(), handshake_timeout_s=30) as c:
        sent_times: list[float] = []
        ack_tasks: set[asyncio.Task] = set()

        async def ack_later(rid: str, at: float, truncate: bool) -> None:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            if c.closed:
                return
            with contextlib.suppress(Exception):
                await c.ack_playback(rid, played_ms=player.played_ms(rid, at), truncate=truncate)
                state["acks"] += 1

        def schedule_ack(rid: str, at: float, truncate: bool) -> None:
            r = player.resp.get(rid)
            if r is None or r["acked"]:
                return
            r["acked"] = True
            task = asyncio.create_task(ack_later(rid, at, truncate))
            ack_tasks.add(task)
            task.add_done_callback(ack_tasks.discard)

        async def watch() -> None:
            with contextlib.suppress(Exception):
                async for ev in c.events():
                    kind = event_type(ev)
                    rx = ev[RECEIVED_AT_KEY]
                    if kind == AUDIO_DELTA and ev.get("delta"):
                        rid = event_response_id(ev)
                        nbytes = len(base64.b64decode(ev["delta"]))
                        rate = int(ev.get("sample_rate_hz") or 24_000)
                        if rid:
                            player.delta(rid, rx, nbytes / 2 / rate)
                        if state["first_audio_rx"] is None:
                            state["first_audio_rx"] = rx
                            state["first_audio_media"] = _media_at(sent_times, c.appends, rx)
                    elif kind == "input_audio_buffer.speech_stopped":
                        state["speech_stopped_rx"].append(rx)
                    elif kind == "response.created":
                        state["created_rx"].append(rx)
                    elif kind == "conversation.item.input_audio_transcription.completed":
                        state["transcript_rx"].append(rx)
                    stop = _stop_of(ev)
                    if stop is not None:
                        player.stop(stop[0], rx)
                        schedule_ack(stop[0], rx, True)
                    elif kind == "response.done":
                        rid = event_response_id(ev)
                        end = player.sched_end(rid) if rid else None
                        if rid and end is not None:
                            schedule_ack(rid, end, False)

        watcher = asyncio.create_task(watch())

        def finished(media_ms: float) -> bool:
            """Whether the outcome is decided (early stop), at media position ``media_ms``."""
            if cat in ("silence", "noise"):
                return media_ms >= truth["input_ms"] + NONSPEECH_GRACE_S * 1000
            if not script.overlap:
                if media_ms < max(turn_ends) + 200:
                    return False
                last_origin = _origin(c.appends, max(turn_ends))
                if last_origin is None:
                    return False
                got = state["first_audio_rx"] is not None and any(
                    r["deltas"] and r["first_rx"] >= last_origin.sent_at_s for r in player.resp.values())
                if pace == "fast":
                    got = any(t >= last_origin.sent_at_s for t in state["created_rx"])
                return got or media_ms >= truth["input_ms"]
            # overlap: part A, reply, part B, outcome
            a_end = turn_ends[0]
            if state["first_audio_rx"] is None:
                return media_ms >= a_end + (reply_window_s + 2.0) * 1000
            if state["b_media"] is None:
                return False
            b_end = state["b_media"] + ov["speech_end_ms"]
            if media_ms < b_end + 300:
                return False
            first_rid = next(iter(player.resp))
            r = player.resp[first_rid]
            ended = r["stopped_at"] is not None or any(
                event_type(e) == "response.done" and event_response_id(e) == first_rid for e in c.collector.events)
            if not ended:
                return media_ms >= b_end + 20_000
            if state["reply_a_end"] is None:
                state["reply_a_end"] = media_ms
            if ov["reply_due"]:
                b_origin = _origin(c.appends, b_end)
                answered = b_origin is not None and any(
                    rr["first_rx"] >= b_origin.sent_at_s for rid, rr in player.resp.items() if rid != first_rid)
                return answered or media_ms >= b_end + reply_window_s * 1000
            return media_ms >= max(state["reply_a_end"], b_end) + OVERLAP_TAIL_S * 1000

        pos = 0
        t0 = time.monotonic()
        speed = 1.0 if pace == "realtime" else fast_speedup
        stalled_s = 0.0
        max_samples = round(MAX_DIALOGUE_MEDIA_S * D.RATE)
        while pos < max_samples:
            media = pos * 1000.0 / D.RATE
            if finished(media):
                break
            if script.overlap and script.b_at is None and state["first_audio_media"] is not None:
                trigger = state["first_audio_media"] + ov["onset_after_first_audio_ms"] - ov["speech_start_ms"]
                start = max(trigger, media, turn_ends[0] + 1)
                script.b_at = round(start * D.RATE / 1000)
                state["b_media"] = script.b_at * 1000.0 / D.RATE
            if pace == "fast" and state["speech_stopped_rx"]:
                last_ss = state["speech_stopped_rx"][-1]
                while not any(t >= last_ss for t in state["created_rx"] + state["transcript_rx"]) and \
                        time.monotonic() - last_ss < fast_settle_s:
                    ts = time.monotonic()
                    await asyncio.sleep(0.01)
                    stalled_s += time.monotonic() - ts
            chunk = script.chunk(pos, n_chunk)
            pos += n_chunk
            due = t0 + stalled_s + pos / D.RATE / speed
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await c.append_audio(_pcm16(chunk))
            sent_times.append(c.appends[-1].sent_at_s)
        await asyncio.sleep(0.3)  # events already on their way
        for task in list(ack_tasks):
            task.cancel()
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher
    record = analyse(inst, c, player, state, pace=pace, reply_window_s=reply_window_s)
    record["wall_s"] = time.monotonic() - t_start
    record["stalled_s"] = stalled_s if pace == "fast" else None
    return record


# --------------------------------------------------------------------------- analysis
def analyse(inst: dict[str, Any], c: DuplexClient, player: Player, state: dict[str, Any], *, pace: str,
            reply_window_s: float) -> dict[str, Any]:
    truth = inst["truth"]
    cat = inst["category"]
    events = list(c.collector.events)
    appends = list(c.appends)
    sent = [a.sent_at_s for a in appends]
    t0 = appends[0].sent_at_s if appends else 0.0

    def rel(t: float | None) -> float | None:
        return None if t is None else round((t - t0) * 1000.0, 1)

    def stamp(t: float | None) -> float | None:
        return None if t is None else _media_at(sent, appends, t)

    # user turns on the media clock
    turns = [dict(t) for t in truth["turns"]]
    ov = truth["overlap"]
    b_media = state.get("b_media")
    onset = None
    if ov is not None and b_media is not None:
        onset = {"media_ms": b_media + ov["speech_start_ms"], "end_media_ms": b_media + ov["speech_end_ms"]}
        if ov["kind"] != "backchannel":
            turns.append({"start_ms": onset["media_ms"], "end_ms": onset["end_media_ms"], "reply_due": ov["reply_due"],
                          "text": ov["text"], "barge_in": True})
    for t in turns:
        o = _origin(appends, t["end_ms"])
        s = _carrying(appends, t["start_ms"])
        t["end_origin_s"] = o.sent_at_s if o else None
        t["end_slack_ms"] = (o.audio_end_ms - t["end_ms"]) if o else None
        t["start_sent_s"] = s.sent_at_s if s else None
    # responses
    responses: list[dict[str, Any]] = []
    for ev in events:
        if event_type(ev) == "response.created":
            rid = event_response_id(ev)
            responses.append({"id": rid, "created_s": ev[RECEIVED_AT_KEY], "created_media_ms": stamp(ev[RECEIVED_AT_KEY])})
    for r in responses:
        rid = r["id"]
        first = next((e for e in events if event_type(e) == AUDIO_DELTA and e.get("delta")
                      and event_response_id(e) == rid), None)
        r["first_audio_s"] = first[RECEIVED_AT_KEY] if first else None
        done = next((e for e in events if event_type(e) == "response.done" and event_response_id(e) == rid), None)
        resp = (done or {}).get("response") or {}
        r["done_s"] = done[RECEIVED_AT_KEY] if done else None
        r["done_status"] = resp.get("status")
        r["done_reason"] = (resp.get("status_details") or {}).get("reason")
        stop = next((e for e in events if (_stop_of(e) or ("", ""))[0] == rid), None)
        r["stop_s"] = stop[RECEIVED_AT_KEY] if stop else None
        r["stop_event"] = _stop_of(stop)[1] if stop else None
        r["transcript"] = "".join(str(e.get("delta") or "") for e in events if event_type(e) ==
                                  "response.output_audio_transcript.delta" and event_response_id(e) == rid)
        r["audio_ms"] = round(sum(d for _, _, d in (player.resp.get(rid) or {}).get("deltas", [])) * 1000.0, 1)
        r["play_end_s"] = player.sched_end(rid)
    # assignment. The server says which user item a reply answers: it publishes the item's
    # transcript (conversation.item.input_audio_transcription.completed) right before creating
    # the reply, and input_audio_buffer.speech_started gave that item's media start. Without
    # such a transcript the response goes to the earliest finished turn still awaiting a reply.
    item_start = {e.get("item_id"): e.get("audio_start_ms") for e in events
                  if event_type(e) == "input_audio_buffer.speech_started" and e.get("item_id")}

    def turn_of_media(ms: float | None) -> int | None:
        if ms is None:
            return None
        for i, tu in enumerate(turns):
            if tu["start_ms"] - 400 <= ms <= tu["end_ms"] + 100:
                return i
        return None

    answered: dict[int, dict[str, Any]] = {}
    prev_created = float("-inf")
    for r in responses:
        t = r["created_s"]
        tr = [e for e in events if event_type(e) == "conversation.item.input_audio_transcription.completed"
              and prev_created < e[RECEIVED_AT_KEY] <= t]
        prev_created = t
        item = tr[-1].get("item_id") if tr else None
        r["answers_item"] = item
        r["answers_item_start_ms"] = item_start.get(item) if item else None
        r["asr"] = tr[-1].get("transcript") if tr else None
        k = turn_of_media(r["answers_item_start_ms"]) if item else None
        if item is not None and k is None:
            r["role"], r["turn"], r["attributed_by"] = "unprompted", None, "transcript item (no ground-truth turn)"
            r["after"] = ("part B (" + ov["kind"] + ")") if onset is not None and r["answers_item_start_ms"] is not None \
                and r["answers_item_start_ms"] >= onset["media_ms"] - 400 else "non-speech / unmatched sound"
            continue
        if k is None:  # no attribution: earliest finished turn without a reply, else a turn in progress
            pending = [i for i, tu in enumerate(turns) if tu["reply_due"] is not False and i not in answered
                       and tu["end_origin_s"] is not None and tu["end_origin_s"] <= t]
            live = [i for i, tu in enumerate(turns) if tu["start_sent_s"] is not None and tu["start_sent_s"] <= t
                    and (tu["end_origin_s"] is None or t < tu["end_origin_s"])]
            k = pending[0] if pending else (live[0] if live else None)
            r["attributed_by"] = "order (no transcript before response.created)"
        else:
            r["attributed_by"] = "transcript item"
        if k is None:
            r["role"], r["turn"] = "unprompted", None
            continue
        tu = turns[k]
        r["turn"] = k
        if tu["end_origin_s"] is None or t < tu["end_origin_s"]:
            r["role"] = "premature"
            r["in_pause"] = any(p["start_ms"] <= (r["created_media_ms"] or -1) <= p["end_ms"] + 1000
                                for p in truth["pauses"])
        elif k in answered:
            r["role"] = "extra"
        else:
            r["role"] = "reply"
            answered[k] = r
    # per-turn outcome
    turn_rows = []
    for i, tu in enumerate(turns):
        r = answered.get(i)
        lat = None
        ok = False
        if r is not None and tu["end_origin_s"] is not None:
            if pace == "realtime":
                if r["first_audio_s"] is not None:
                    lat = (r["first_audio_s"] - tu["end_origin_s"]) * 1000.0
                    ok = lat <= reply_window_s * 1000.0
            else:
                ok = (r["created_media_ms"] or 0) - tu["end_ms"] <= reply_window_s * 1000.0
        turn_rows.append({
            "start_ms": round(tu["start_ms"], 1), "end_ms": round(tu["end_ms"], 1), "reply_due": tu["reply_due"],
            "text": tu["text"], "end_slack_ms": tu["end_slack_ms"], "reply": r["id"] if r else None,
            "latency_ms": round(lat, 1) if lat is not None and ok else None,
            "late_reply_latency_ms": round(lat, 1) if lat is not None and not ok else None,
            "missed": bool(tu["reply_due"] is True and not ok),
            "premature": [x["id"] for x in responses if x.get("role") == "premature" and x.get("turn") == i],
        })
    out: dict[str, Any] = {
        "id": inst["id"], "category": cat, "voice": inst.get("voice"), "rate": inst.get("rate"),
        "noise": (inst["noise"] or {}).get("kind"), "snr_db": (inst["noise"] or {}).get("snr_db"), "pace": pace,
        "input_media_ms": round(appends[-1].audio_end_ms, 1) if appends else 0.0,
        "turns": turn_rows,
        "premature_takeover": any(x.get("role") == "premature" for x in responses) if turns else None,
        "pauses": [{"start_ms": p["start_ms"], "end_ms": p["end_ms"], "measured_ms": p["measured_ms"]}
                   for p in truth["pauses"]] or None,
        "unprompted": sum(1 for x in responses if x.get("role") == "unprompted"),
        "extra": sum(1 for x in responses if x.get("role") == "extra"),
        "replies_in_order": all(a < b for a, b in zip(
            [x["turn"] for x in responses if x.get("role") == "reply"],
            [x["turn"] for x in responses if x.get("role") == "reply"][1:], strict=False)),
        "speech_started_ms": [e.get("audio_start_ms") for e in events if event_type(e) ==
                              "input_audio_buffer.speech_started"],
        "speech_stopped_ms": [e.get("audio_end_ms") for e in events if event_type(e) ==
                              "input_audio_buffer.speech_stopped"],
        "asr": [e.get("transcript") for e in events if event_type(e) ==
                "conversation.item.input_audio_transcription.completed"],
        "errors": [((e.get("error") or {}).get("code") if isinstance(e.get("error"), dict) else e.get("code"))
                   for e in events if event_type(e) == "error"],
        "acks_sent": state.get("acks", 0),
    }
    if cat in ("silence", "noise"):
        out["nonspeech_reply"] = bool(responses)
        out["nonspeech_kind"] = (truth["nonspeech"] or {}).get("kind")
    if ov is not None:
        reply = answered.get(0)
        ov_out: dict[str, Any] = {"kind": ov["kind"], "text": ov["text"], "must_stop": ov["must_stop"],
                                  "onset_after_first_audio_ms": ov["onset_after_first_audio_ms"], "valid": False}
        if reply is None or reply["first_audio_s"] is None or onset is None:
            ov_out["invalid_reason"] = "no reply to part A" if reply is None or reply["first_audio_s"] is None \
                else "part B never started"
        else:
            carry = _carrying(appends, onset["media_ms"])
            t_on = carry.sent_at_s if carry else None
            ov_out["onset_slack_ms"] = round(carry.audio_end_ms - onset["media_ms"], 1) if carry else None
            rid = reply["id"]
            stop_s = reply["stop_s"]
            end_at_onset = player.sched_end(rid, received_by=t_on) if t_on else None
            full_end = player.sched_end(rid)
            ov_out.update({"reply": rid, "reply_audio_ms": reply["audio_ms"], "stop_event": reply["stop_event"],
                           "stop_rel_onset_ms": round((stop_s - t_on) * 1000.0, 1) if stop_s and t_on else None,
                           "first_audio_to_onset_ms": round((t_on - reply["first_audio_s"]) * 1000.0, 1) if t_on else None,
                           "reply_transcript": reply["transcript"]})
            if t_on is None:
                ov_out["invalid_reason"] = "onset append not found"
            elif stop_s is not None and stop_s < t_on:
                ov_out["invalid_reason"] = "reply stopped before the onset"
            elif end_at_onset is None or (full_end or 0) <= t_on:
                ov_out["invalid_reason"] = "reply audio ran out before the onset"
            else:
                stopped = stop_s is not None and stop_s < (player.sched_end(rid, received_by=stop_s) or 0)
                remaining = ((full_end or t_on) - t_on) * 1000.0
                ov_out["remaining_at_onset_ms"] = round(remaining, 1) if not stopped else None
                if stopped or remaining >= MIN_REMAINING_MS:
                    ov_out["valid"] = True
                    ov_out["stopped"] = stopped
                    if stopped:
                        ov_out["stop_latency_ms"] = round((stop_s - t_on) * 1000.0, 1)
                else:
                    ov_out["invalid_reason"] = f"reply ended {remaining:.0f} ms after the onset (< {MIN_REMAINING_MS:g})"
            ov_out["answered_after_onset"] = bool(t_on and any(
                x["id"] != rid and x["created_s"] >= t_on for x in responses))
        out["overlap"] = ov_out
    out["responses"] = [{
        "id": r["id"], "role": r.get("role"), "turn": r.get("turn"), "in_pause": r.get("in_pause"),
        "attributed_by": r.get("attributed_by"), "answers_item_start_ms": r.get("answers_item_start_ms"),
        "asr": r.get("asr"),
        "after": r.get("after"), "created_ms": rel(r["created_s"]), "created_media_ms": r["created_media_ms"],
        "first_audio_ms": rel(r["first_audio_s"]), "stop_ms": rel(r["stop_s"]), "stop_event": r["stop_event"],
        "done_ms": rel(r["done_s"]), "done_status": r["done_status"], "done_reason": r["done_reason"],
        "audio_ms": r["audio_ms"], "play_end_ms": rel(r["play_end_s"]), "transcript": r["transcript"],
    } for r in responses]
    return out


# --------------------------------------------------------------------------- summaries
def summarize_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Metrics of a set of dialogue records (one category, or all)."""
    turns = [t for r in rows for t in r["turns"]]
    due = [t for t in turns if t["reply_due"] is True]
    with_turns = [r for r in rows if r["premature_takeover"] is not None]
    realtime = [r for r in rows if r["pace"] == "realtime"]
    lat = [t["latency_ms"] for r in realtime for t in r["turns"] if t["reply_due"] is True]
    out: dict[str, Any] = {
        "dialogues": len(rows),
        "pace": sorted({r["pace"] for r in rows}),
        "turn_end_latency_ms": C.summarize_ci(lat),
        "premature_takeover": C.rate(sum(1 for r in with_turns if r["premature_takeover"]), len(with_turns)),
        "missed_turn": C.rate(sum(1 for t in due if t["missed"]), len(due)),
        "unprompted_responses": sum(r["unprompted"] for r in rows),
        "errors": sorted({e for r in rows for e in r["errors"] if e}),
    }
    ns = [r for r in rows if "nonspeech_reply" in r]
    if ns:
        out["nonspeech_reply"] = C.rate(sum(1 for r in ns if r["nonspeech_reply"]), len(ns))
        kinds = sorted({r["nonspeech_kind"] for r in ns})
        out["nonspeech_reply_by_kind"] = {k: C.rate(sum(1 for r in ns if r["nonspeech_kind"] == k and r["nonspeech_reply"]),
                                                    sum(1 for r in ns if r["nonspeech_kind"] == k)) for k in kinds}
    bc = [r for r in rows if r.get("overlap") and r["overlap"]["kind"] == "backchannel"]
    if bc:
        valid = [r for r in bc if r["overlap"]["valid"]]
        out["backchannel_false_stop"] = C.rate(sum(1 for r in valid if r["overlap"]["stopped"]), len(valid))
        out["backchannel_invalid"] = len(bc) - len(valid)
        out["backchannel_answered"] = C.rate(sum(1 for r in bc if r["overlap"].get("answered_after_onset")), len(bc))
    bi = [r for r in rows if r.get("overlap") and r["overlap"]["kind"] != "backchannel"]
    if bi:
        valid = [r for r in bi if r["overlap"]["valid"]]
        out["barge_in_success"] = C.rate(sum(1 for r in valid if r["overlap"]["stopped"]), len(valid))
        out["barge_in_invalid"] = len(bi) - len(valid)
        out["barge_in_stop_latency_ms"] = C.summarize_ci(r["overlap"].get("stop_latency_ms") for r in valid)
    bb = [r for r in rows if r["category"] == "back_to_back"]
    if bb:
        out["both_answered_in_order"] = C.rate(sum(1 for r in bb if not any(t["missed"] for t in r["turns"])
                                                   and r["replies_in_order"]), len(bb))
    pz = [r for r in rows if r.get("pauses")]
    if pz:
        bins = {}
        for lo, hi, label in PAUSE_BINS:
            sel = [r for r in pz if lo <= max(p["measured_ms"] for p in r["pauses"]) < hi]
            bins[label] = C.rate(sum(1 for r in sel if r["premature_takeover"]), len(sel))
        out["premature_takeover_by_pause"] = bins
    return out


DETECTOR_EXTRA: dict[str, dict[str, Any]] = {"silence": {"resume_window_ms": 0}}
"""Extra ``turn_policy`` overrides per detector name: ``silence`` is the old policy exactly (the
fixed silence timer, no taking back of a wrong end of turn), whatever the default config says."""


def summarize_detector(records: list[dict[str, Any]], categories: list[str]) -> dict[str, Any]:
    return {"overall": summarize_rows(records),
            "per_category": {cat: summarize_rows([r for r in records if r["category"] == cat])
                             for cat in categories if any(r["category"] == cat for r in records)}}


def _fmt_rate(x: dict[str, Any] | None) -> str:
    if not x or not x.get("n"):
        return "n/a"
    lo, hi = x["ci95"]
    return f"{x['k']}/{x['n']} ({x['rate'] * 100:.0f} %, CI {lo * 100:.0f}-{hi * 100:.0f} %)"


def print_summary(label: str, summ: dict[str, Any]) -> None:
    print(f"[turns] ==== {label} ====", flush=True)
    for cat, s in [*summ["per_category"].items(), ("OVERALL", summ["overall"])]:
        lat = s["turn_end_latency_ms"]
        parts = [f"{cat:12s} n={s['dialogues']:3d}"]
        if lat["n"]:
            parts.append(f"latency p50 {lat['p50']:.0f} p95 {lat['p95']:.0f} ms (n={lat['n']})")
        if s["premature_takeover"]["n"]:
            parts.append(f"premature {_fmt_rate(s['premature_takeover'])}")
        if s["missed_turn"]["n"]:
            parts.append(f"missed {_fmt_rate(s['missed_turn'])}")
        for key in ("nonspeech_reply", "backchannel_false_stop", "barge_in_success"):
            if key in s:
                parts.append(f"{key} {_fmt_rate(s[key])}")
        if "barge_in_stop_latency_ms" in s and s["barge_in_stop_latency_ms"]["n"]:
            parts.append(f"stop p50 {s['barge_in_stop_latency_ms']['p50']:.0f} ms")
        print("  " + "; ".join(parts), flush=True)


def headline(label: str, summ: dict[str, Any]) -> list[dict[str, Any]]:
    pc = summ["per_category"]
    ov = summ["overall"]
    out = []
    lat = ov["turn_end_latency_ms"]
    out.append(C.info_metric(f"{label}.turn_end_latency_p50", f"[{label}] turn-end latency p50 (all categories)",
                             lat["p50"], "ms", n=lat["n"],
                             detail=f"p95 {C.fmt_s(lat['p95'], 'ms', 0)}; p50 95 % CI "
                                    f"{C.fmt_s(lat['p50_ci95'][0], 'ms', 0)} - {C.fmt_s(lat['p50_ci95'][1], 'ms', 0)}"))

    def add(mid: str, name: str, x: dict[str, Any] | None) -> None:
        if x and x["n"]:
            out.append(C.info_metric(f"{label}.{mid}", f"[{label}] {name}", round(x["rate"] * 100, 1), "%",
                                     n=x["n"], detail=f"{x['k']}/{x['n']}, Wilson 95 % "
                                                      f"{x['ci95'][0] * 100:.0f}-{x['ci95'][1] * 100:.0f} %"))

    add("premature_pause", "premature takeovers, mid-sentence pauses", (pc.get("pause") or {}).get("premature_takeover"))
    add("premature_hesitation", "premature takeovers, hesitations",
        (pc.get("hesitation") or {}).get("premature_takeover"))
    add("missed", "missed turns (all categories)", ov["missed_turn"])
    add("nonspeech", "replies to silence / noise", ov.get("nonspeech_reply"))
    add("backchannel_false_stop", "backchannel false stops", ov.get("backchannel_false_stop"))
    add("barge_in_success", "barge-in success", ov.get("barge_in_success"))
    return out


# --------------------------------------------------------------------------- main
def dataset_signature(man: dict[str, Any]) -> dict[str, Any]:
    return {"split": man["split"], "seed": man["seed"], "gen_version": man["gen_version"],
            "per_category": man["per_category"], "categories": man["categories"],
            "content_sha256": man["content_sha256"]}


async def run_all(targets: list[dict[str, Any]], manifest: dict[str, Any], args: argparse.Namespace,
                  order: str) -> None:
    folder = Path(manifest["folder"])
    insts = manifest["instances"]
    # interleave categories so that a cut-short run still covers all of them
    by_cat: dict[str, list] = {}
    for m in insts:
        by_cat.setdefault(m["category"], []).append(m)
    sched = [m for group in zip(*by_cat.values(), strict=False) for m in group]
    leftovers = [m for m in insts if m not in sched]
    sched += leftovers
    total = len(sched) * sum(1 for tg in targets if tg.get("url"))
    done = 0
    t0 = time.monotonic()

    async def one(tg: dict[str, Any], m: dict[str, Any]) -> None:
        nonlocal done
        rec = None
        for attempt in range(2):
            try:
                rec = await run_dialogue(tg["url"], m, folder, pace=args.pace, append_ms=args.append_ms,
                                         reply_window_s=args.reply_window_s, fast_speedup=args.fast_speedup,
                                         fast_settle_s=args.fast_settle_s)
                break
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                err = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(1.0)
        if rec is None:
            rec = {"id": m["id"], "category": m["category"], "error": err}
            tg["failed"].append(rec)
        else:
            tg["records"].append(rec)
        done += 1
        print(f"[turns] {tg['label']} {done}/{total} {m['id']} ({time.monotonic() - t0:.0f} s): {brief(rec)}",
              flush=True)
        await asyncio.sleep(0.2)

    if args.warmup:  # one unmeasured dialogue per server (first-use allocations, caches)
        for tg in targets:
            if tg.get("url"):
                with contextlib.suppress(Exception):
                    w = await run_dialogue(tg["url"], sched[0], folder, pace="realtime", append_ms=args.append_ms,
                                           reply_window_s=args.reply_window_s, fast_speedup=args.fast_speedup,
                                           fast_settle_s=args.fast_settle_s)
                    tg["warmup"] = {"id": w["id"], "brief": brief(w)}
                    print(f"[turns] {tg['label']} warm-up {w['id']}: {brief(w)}", flush=True)
    if order == "interleaved":
        for m in sched:
            for tg in targets:
                if tg.get("url"):
                    await one(tg, m)
    else:
        for tg in targets:
            if tg.get("url"):
                for m in sched:
                    await one(tg, m)


def brief(rec: dict[str, Any]) -> str:
    if "error" in rec:
        return "ERROR " + rec["error"]
    bits = []
    for t in rec["turns"]:
        if t["reply_due"] is True:
            bits.append("missed" if t["missed"] else f"lat {t['latency_ms']:.0f} ms" if t["latency_ms"] is not None
                        else "replied")
    if rec.get("premature_takeover"):
        bits.append("PREMATURE")
    if "nonspeech_reply" in rec:
        bits.append("REPLIED to " + str(rec["nonspeech_kind"]) if rec["nonspeech_reply"] else "no reply")
    if rec.get("overlap"):
        o = rec["overlap"]
        if not o["valid"]:
            bits.append("invalid: " + str(o.get("invalid_reason")))
        else:
            bits.append(f"{o['kind']}: " + (f"stopped {o.get('stop_latency_ms'):.0f} ms ({o['stop_event']})"
                                            if o["stopped"] else "not stopped"))
    if rec["unprompted"]:
        bits.append(f"{rec['unprompted']} unprompted")
    return ", ".join(bits) + f" [{rec['wall_s']:.1f} s]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="sanity run: 3 dialogues per category")
    p.add_argument("--per-category", type=int, default=None, help="dialogues per category (default 30; quick 3)")
    p.add_argument("--categories", default=",".join(D.CATEGORIES))
    p.add_argument("--split", choices=D.SPLITS, default="dev")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--detector", default=None, help="turn_policy.detector deploy override (omitted: none)")
    p.add_argument("--detectors", default=None, help="comma list of detectors, each on a fresh server; 'default' = "
                                                     "no override")
    p.add_argument("--order", choices=("interleaved", "sequential"), default="interleaved",
                   help="with several detectors: dialogue by dialogue (default) or one detector after the other")
    p.add_argument("--server-url", default=None, help="use this running server instead of starting one")
    p.add_argument("--label", default=None, help="row label with --server-url (default: the detector or 'default')")
    p.add_argument("--pace", choices=("realtime", "fast"), default="realtime")
    p.add_argument("--fast-speedup", type=float, default=8.0)
    p.add_argument("--fast-settle-s", type=float, default=8.0)
    p.add_argument("--append-ms", type=int, default=100)
    p.add_argument("--reply-window-s", type=float, default=REPLY_WINDOW_S)
    p.add_argument("--warmup", type=int, choices=(0, 1), default=1, help="one unmeasured dialogue per server first")
    p.add_argument("--fresh", action="store_true", help="drop rows of other detectors from an existing turns.json")
    p.add_argument("--result-name", default="turns",
                   help="write benchmarks/results/<name>.json (default turns; e.g. turns_nonspeech for another set)")
    p.add_argument("--dataset-root", type=Path, default=None)
    p.add_argument("--baseline-tree", type=Path, default=None,
                   help="another checkout (e.g. a git worktree of an older commit): each detector also runs on a "
                        "server of that tree, interleaved, labelled '<detector> <its commit>'")
    args = p.parse_args(argv)
    per_cat = args.per_category or (3 if args.quick else 30)
    cats = [x.strip() for x in args.categories.split(",") if x.strip()]
    bad = [x for x in cats if x not in D.CATEGORIES]
    if bad:
        p.error(f"unknown categories {bad}")
    if args.detectors and args.detector:
        p.error("--detector and --detectors are exclusive")
    names: list[str | None] = ([None if x.strip() in ("", "default") else x.strip() for x in args.detectors.split(",")]
                               if args.detectors else [args.detector])
    if args.server_url and (len(names) > 1 or args.baseline_tree):
        p.error("--server-url runs one detector (the server's own), with no baseline")
    t_bench = time.monotonic()
    result = C.base_result("turns", "Duplex behaviour: turn-taking on a generated dialogue set", "turn-taking",
                           quick=args.quick)
    result["reproduce"] = ".venv/bin/python benchmarks/bench_turns.py"
    print(f"[turns] dataset: split {args.split}, seed {args.seed}, {per_cat} per category", flush=True)
    manifest = D.build(args.split, per_cat, seed=args.seed, categories=cats, root=args.dataset_root)
    counts = {cat: sum(1 for m in manifest["instances"] if m["category"] == cat) for cat in cats}
    desc = D.describe()
    result["dataset"] = {**dataset_signature(manifest), "folder": manifest["folder"],
                         "generator": "benchmarks/turns_dataset.py",
                         "categories_detail": {cat: {"n": counts[cat], "how": desc[cat]} for cat in cats},
                         "voices": list(D.VOICES), "rates": D.SPLIT_RATES[args.split],
                         "noisy_share": "index % 3 == 2 of speech categories: pink/brown noise at 15-25 dB SNR"}
    result["settings"] = {"append_ms": args.append_ms, "pace": args.pace,
                          "overlap_categories_pace": "realtime (always)", "reply_window_s": args.reply_window_s,
                          "min_remaining_ms": MIN_REMAINING_MS, "nonspeech_grace_s": NONSPEECH_GRACE_S,
                          "fast_speedup": args.fast_speedup if args.pace == "fast" else None,
                          "fast_settle_s": args.fast_settle_s if args.pace == "fast" else None,
                          "session": "default SessionConfig (server defaults: overlap_policy listen_only)",
                          "order": args.order if len(names) > 1 else None}
    result["definitions"] = DEFINITIONS
    targets: list[dict[str, Any]] = []
    servers: list[C.ServerProcess] = []
    notes: list[str] = []
    try:
        base = C.tree_commit(args.baseline_tree) if args.baseline_tree else None
        runs: list[tuple[str | None, Path | None]] = [(name, None) for name in names]
        if args.baseline_tree:
            runs = [run for name in names for run in ((name, args.baseline_tree), (name, None))]
        for name, tree in runs:
            label = args.label if (args.server_url and args.label) else (name or "default")
            if tree is not None:
                label = f"{label} {base or tree.name}"
            overrides = {"turn_policy": {"detector": name, **DETECTOR_EXTRA.get(name, {})}} if name else {}
            tg: dict[str, Any] = {"label": label, "detector": name, "deploy_overrides": overrides, "records": [],
                                  "failed": [], "url": None, "server": None, "error": None,
                                  "git": base if tree is not None else None}
            if args.server_url:
                tg["url"] = args.server_url
                tg["server"] = f"external: {args.server_url}"
                if name:
                    notes.append(f"{label}: --server-url given, so --detector {name} is only a label (no override).")
                tg["deploy_overrides"] = None
            else:
                cfg = C.write_deploy_yaml(overrides, tree=tree) if overrides else None
                srv = C.ServerProcess(deploy_config=cfg, tree=tree)
                try:
                    ready = srv.start()
                    servers.append(srv)
                    tg["url"], tg["server"], tg["ready_s"] = srv.base_url, srv.command, ready
                    print(f"[turns] server for {label} ready in {ready:.1f} s ({srv.base_url})", flush=True)
                except RuntimeError as exc:
                    tg["error"] = str(exc).splitlines()[0] + " | " + " / ".join(srv.log_tail(6).splitlines()[-3:])
                    tg["server"] = srv.command
                    print(f"[turns] server for {label} failed: {tg['error']}", flush=True)
            targets.append(tg)
        tg_started = C.now_iso()
        asyncio.run(run_all(targets, manifest, args, args.order))
    finally:
        for srv in servers:
            srv.stop()
    rows = []
    for tg in targets:
        recs = sorted(tg["records"], key=lambda r: r["id"])
        summ = summarize_detector(recs, cats) if recs else None
        if summ:
            print_summary(tg["label"], summ)
        rows.append({"label": tg["label"], "detector": tg["detector"], "deploy_overrides": tg["deploy_overrides"],
                     "server": tg["server"], "error": tg["error"], "ready_s": tg.get("ready_s"), "pace": args.pace,
                     "warmup": tg.get("warmup"),
                     "started_at": tg_started, "finished_at": C.now_iso(),
                     "git_commit": tg.get("git") or result["versions"]["git_commit"],
                     "loadavg_1_5_15_at_start": result["machine"]["loadavg_1_5_15_at_start"],
                     "summary": summ, "failed": tg["failed"], "dialogues": recs})
    # merge with an earlier file on the same dataset: one row per label
    path = C.RESULTS_DIR / f"{args.result_name}.json"
    if path.exists() and not args.fresh:
        with contextlib.suppress(OSError, ValueError, KeyError):
            old = json.loads(path.read_text())
            same = {k: v for k, v in old.get("dataset", {}).items() if k in dataset_signature(manifest)} == \
                dataset_signature(manifest)
            if same:
                mine = {r["label"] for r in rows}
                kept = [r for r in old.get("detectors", []) if r["label"] not in mine]
                if kept:
                    notes.append("Rows kept from an earlier run on the same dataset: "
                                 + ", ".join(f"{r['label']} ({r.get('finished_at')})" for r in kept) + ".")
                rows = kept + rows
    result["detectors"] = rows
    metrics = []
    for r in rows:
        if r["summary"]:
            metrics += headline(r["label"], r["summary"])
    for r in rows:
        if r["error"]:
            notes.append(f"{r['label']}: server did not start ({r['error']}).")
        if r["failed"]:
            notes.append(f"{r['label']}: {len(r['failed'])} dialogues failed: "
                         + "; ".join(f"{f['id']}: {f['error']}" for f in r["failed"][:5]))
    if args.pace == "fast":
        notes.append("Pace fast: latencies are not measured; the overlap categories ran at real time.")
    result["metrics"] = metrics
    result["notes"] = notes
    result["wall_s"] = time.monotonic() - t_bench
    result["finished_at"] = C.now_iso()
    out = C.write_result(args.result_name, C.round_floats(result, 3))
    print(f"[turns] wrote {out.relative_to(C.ROOT)} in {result['wall_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
