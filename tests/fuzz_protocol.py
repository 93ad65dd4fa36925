"""Protocol fuzzing of ``/v1/realtime?duplex=1`` with hypothesis (shared by the test and ``bench_fuzz``).

:func:`frames` is a hypothesis strategy of client frames: well-formed events, events the server
must refuse (unknown types, missing and wrong-typed fields, bad base64, sample rates out of range,
empty and over-limit payloads, non-object JSON, binary frames of random bytes), mutations of
well-formed events (a key deleted, a value replaced by one of another type, a stray key added),
and events in an order the protocol forbids (commit with nothing appended, acks of responses that
do not exist, cancels with nothing to cancel). Each :class:`Frame` says what the server must do:

* ``must_error``: an ``error`` event with a stable ``code`` answering the frame's ``event_id``
  (or, for a frame with no readable ``event_id``, an ``error`` with ``event_id`` null);
* ``may_error``: depends on session state; if an ``error`` comes it carries the frame's
  ``event_id`` and a stable code.

With a spoken question given, some batches end with a live phase: the question is asked and,
once its response exists, :func:`live_frames` (acks of any length, truncations, cancels of it and
of other ids, interrupts, commits, creates) are aimed at it. Every server frame must be strict
JSON (no ``NaN``/``Infinity`` tokens).

:func:`run_batch` plays one batch over a fresh WebSocket (so batches are also fast reconnects),
ends it with a sentinel whose answer proves every earlier frame was handled (the session
processes its inbox in order), checks the session is still usable (``input_audio_buffer.clear``
-> ``input_audio_buffer.cleared``), then either closes politely or drops the socket.
:func:`check_batch` returns the violations of one batch. :func:`fuzz` runs ``examples`` batches
under hypothesis's engine (``@given``), so a failure is shrunk to a minimal frame list.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

STABLE_CODES = frozenset({
    "bad_audio", "bad_base64", "bad_event", "event_too_large", "input_audio_buffer_empty", "input_backpressure",
    "instructions_update_unsupported", "invalid_json", "invalid_video_frames", "missing_item_id",
    "native_text_append_unsupported", "playback_ack_too_late", "playback_item_not_found",
    "ref_audio_update_unsupported", "response_already_active", "response_create_without_input",
    "response_not_active", "session_not_configured", "unknown_event", "unsupported_audio_format",
    "unsupported_ref_audio_path", "unsupported_response_modality", "unsupported_session_resume",
    "invalid_image", "bad_image", "invalid_audio", "bad_data_url",
})
"""Error codes a client event may be answered with (``internal_error`` is a server bug, never here)."""

SENTINEL_CODE = "native_text_append_unsupported"
MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # configs/tiny.yaml duplex_session.max_message_bytes
_PAD = "<<pad>>"
_RID = "<<rid>>"

_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63), st.floats(allow_nan=False),
                       st.text(max_size=20))
_JSON = st.recursive(_JSON_LEAF, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                     max_leaves=8)


@dataclass
class Frame:
    """One client frame and what the server must answer.

    Attributes:
        data: the frame (``str`` text frame or ``bytes`` binary frame).
        event_id: the ``event_id`` the server can read from it (None: none readable).
        expect: ``must_error`` | ``may_error`` | ``ok`` (a well-formed event valid in any state).
        kind: the generator that made it (for the report).
    """

    data: str | bytes
    event_id: str | None
    expect: str
    kind: str
    pad: int = 0

    def wire(self, response_id: str = "") -> str | bytes:
        """The frame as sent: ``data`` with its padding (kept out of ``data`` so reprs stay short) and
        the live response's id in place of its placeholder."""
        if isinstance(self.data, bytes):
            return self.data
        return self.data.replace(_PAD, "x" * self.pad).replace(_RID, response_id)

    def __repr__(self) -> str:  # keep shrunk failures readable
        d = self.data if len(self.data) < 300 else f"<{len(self.data)} {type(self.data).__name__}>"
        return f"Frame({self.kind}, {self.expect}, {d!r}{f', pad={self.pad}' if self.pad else ''})"


def _pcm16_b64(ms: int, rate: int = 16000, loud: bool = False) -> str:
    n = max(0, rate * ms // 1000)
    if not loud:
        return base64.b64encode(b"\x00\x00" * n).decode()
    import numpy as np

    t = np.arange(n) / rate
    return base64.b64encode((np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()).decode()


def _valid_events() -> st.SearchStrategy[tuple[dict[str, Any], str]]:
    """(event without event_id, expect) of well-formed events."""
    append = st.builds(lambda ms, rate, loud: {"type": "input_audio_buffer.append", "audio": _pcm16_b64(ms, rate, loud),
                                               **({"sample_rate_hz": rate} if rate != 16000 else {})},
                       st.integers(0, 240), st.sampled_from([16000, 16000, 8000, 11025, 22050, 44100, 48000, 4000]),
                       st.booleans())
    fixed = st.sampled_from([
        ({"type": "session.heartbeat"}, "ok"),
        ({"type": "session.event_ack", "server_event_seq": 1}, "ok"),
        ({"type": "input_audio_buffer.clear"}, "ok"),
        ({"type": "output_audio_buffer.clear"}, "ok"),
        ({"type": "barge_in"}, "ok"),
        ({"type": "input.cancel"}, "ok"),
        ({"type": "turn.signal", "event": "barge_in"}, "ok"),
        ({"type": "turn.signal", "event": "something"}, "ok"),
        ({"type": "session.update", "session": {}}, "may_error"),
        ({"type": "session.update", "session": {"instructions": "Be brief."}}, "may_error"),
        ({"type": "input_audio_buffer.commit"}, "may_error"),
        ({"type": "input.commit", "is_speech": False}, "may_error"),
        ({"type": "response.cancel"}, "may_error"),
        ({"type": "response.create"}, "may_error"),
        ({"type": "playback.ack", "response_id": "resp_nope", "played_ms": 100}, "may_error"),
        ({"type": "playback.ack", "item_id": "item_nope", "played_ms": 0, "truncate": True}, "may_error"),
        ({"type": "audio.playback_ack", "played_ms": 1e12}, "may_error"),
    ])
    return st.one_of(append.map(lambda e: (e, "ok")), fixed)


def _bad_events() -> st.SearchStrategy[dict[str, Any]]:
    """Event dicts (without event_id) that every session state must refuse."""
    known = {"session.update", "input_audio_buffer.append", "input_audio_buffer.commit", "input.commit",
             "input_audio_buffer.clear", "response.cancel", "barge_in", "output_audio_buffer.clear", "input.cancel",
             "turn.signal", "response.create", "playback.ack", "audio.playback_ack", "session.heartbeat",
             "session.event_ack", "session.close", "close_session", "close", "input.text.append",
             "input_text.append", "push_text", "signal_turn", "session.resume"}
    unknown = st.one_of(st.text(max_size=30), st.sampled_from(["conversation.item.create", "conversation.item.truncate",
                                                              "response.output_audio.delta", "", "SESSION.UPDATE"]))
    return st.one_of(
        unknown.filter(lambda t: t not in known).map(lambda t: {"type": t}),
        st.just({}),  # no type at all
        _JSON.filter(lambda v: not isinstance(v, str)).map(lambda v: {"type": v}),  # wrong-typed type
        st.just({"type": "input_audio_buffer.append"}),  # missing audio
        _JSON.filter(lambda v: not isinstance(v, str)).map(lambda v: {"type": "input_audio_buffer.append", "audio": v}),
        st.sampled_from(["!!!!", "abcde", "a===", "ÿÿ", "AA=A", "data:audio/wav;base64,@@", "data:audio/wav,AAAA"]).map(
            lambda a: {"type": "input_audio_buffer.append", "audio": a}),  # bad base64
        st.one_of(st.integers(-10**12, 3999), st.integers(192001, 10**12), st.just(0)).map(
            lambda r: {"type": "input_audio_buffer.append", "audio": "AAAA", "sample_rate_hz": r}),  # odd rates
        st.text(min_size=1, max_size=12).filter(lambda f: f.lower() not in {"pcm16", "pcm_s16le", "s16le", "pcm_f32le", "f32le",
                                                                "g711_ulaw", "g711_alaw", "audio/pcm"}).map(
            lambda f: {"type": "input_audio_buffer.append", "audio": "AAAA", "format": f}),
        st.sampled_from([{"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01").decode()},
                         {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01" * 5).decode(),
                          "format": "pcm_f32le"}]),  # partial samples
        st.sampled_from([float("inf"), float("-inf"), float("nan")]).flatmap(lambda x: st.sampled_from([
            {"type": "playback.ack", "response_id": "resp_x", "played_ms": x},
            {"type": "input_audio_buffer.append", "audio": "AAAA", "sample_rate_hz": x},
        ])),  # NaN / Infinity literals (Python's json reads them)
        st.just({"type": "playback.ack"}),  # missing played_ms
        st.one_of(st.floats(max_value=-1e-9, allow_nan=False), st.just("ten"), st.just(None), st.just([])).map(
            lambda v: {"type": "playback.ack", "played_ms": v}),
        st.just({"type": "turn.signal"}),
        _JSON.filter(lambda v: not isinstance(v, dict)).map(lambda v: {"type": "session.update", "session": v}),
        st.just({"type": "input.text.append", "text": "hello"}),
        st.just({"type": "session.resume"}),
    )


def _with_id(obj: dict[str, Any], eid: str, id_mode: str) -> tuple[dict[str, Any], str | None]:
    if id_mode == "none":
        return obj, None
    if id_mode == "wrong_type":
        return {**obj, "event_id": 12345}, None
    return {**obj, "event_id": eid}, eid


def _mutate(obj: dict[str, Any], how: str, key_pick: int, value: Any) -> dict[str, Any]:
    keys = [k for k in obj if k != "event_id"]
    out = dict(obj)
    if how == "delete" and keys:
        out.pop(keys[key_pick % len(keys)])
    elif how == "retype" and keys:
        out[keys[key_pick % len(keys)]] = value
    else:
        out[f"x_{key_pick}"] = value
    return out


@st.composite
def frames(draw: Any, index: int = 0) -> Frame:
    """One client frame (see the module docstring); ``index`` makes the event_id unique."""
    eid = f"fz-{draw(st.integers(0, 2**31))}-{index}"
    kind = draw(st.sampled_from(["valid"] * 6 + ["bad"] * 5 + ["mutated"] * 4 + ["raw"] * 2 + ["huge"]))
    if kind == "valid":
        obj, expect = draw(_valid_events())
        obj, readable = _with_id(obj, eid, "ok")
        return Frame(json.dumps(obj), readable, expect, "valid")
    if kind == "bad":
        obj = draw(_bad_events())
        id_mode = draw(st.sampled_from(["ok", "ok", "ok", "none", "wrong_type"]))
        obj, readable = _with_id(obj, eid, id_mode)
        binary = draw(st.booleans()) and id_mode == "ok"
        text = json.dumps(obj)
        return Frame(text.encode() if binary else text, readable, "must_error", "bad")
    if kind == "mutated":
        obj, _ = draw(_valid_events())
        mutated = _mutate(obj, draw(st.sampled_from(["delete", "retype", "extra"])), draw(st.integers(0, 9)),
                          draw(_JSON))
        mutated, readable = _with_id(mutated, eid, "ok")
        # a mutation may still be valid (a stray key is allowed); a deleted ``type`` never is
        must = "type" not in mutated or not isinstance(mutated["type"], str)
        return Frame(json.dumps(mutated), readable, "must_error" if must else "may_error", "mutated")
    if kind == "raw":  # not an event object at all: nothing readable, so the error has event_id null
        data = draw(st.one_of(
            st.just(""), st.just(" "), st.just("{"), st.just("null"), st.just("[]"), st.just('"x"'), st.just("1e999"),
            _JSON.filter(lambda v: not isinstance(v, dict)).map(json.dumps),
            st.binary(max_size=64).filter(lambda b: not _is_object(b)),
            st.text(max_size=64).filter(lambda s: not _is_object(s)),
            st.integers(1000, 100_000).map(lambda d: '{"type": "session.update", "session": ' + "[" * d + "]" * d + "}"),
        ))
        return Frame(data, None, "must_error", "raw")
    # huge: just over the frame limit (refused before parsing, so no readable event_id), or large
    # but under it (a long stray field on an otherwise bad event)
    if draw(st.booleans()):
        text = json.dumps({"type": "input_audio_buffer.append", "event_id": eid, "audio": _PAD})
        return Frame(text, None, "must_error", "huge", pad=MAX_MESSAGE_BYTES + draw(st.integers(1, 4096)))
    text = json.dumps({"type": "no.such.event", "event_id": eid, "pad": _PAD})
    return Frame(text, eid, "must_error", "huge", pad=draw(st.integers(100_000, 1_000_000)))


def _is_object(data: str | bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False


@st.composite
def live_frames(draw: Any, index: int) -> Frame:
    """A frame aimed at a response that exists (its id filled in at send time): acks of any
    length, truncations, cancels of it and of others, interrupts, commits, creates, or a bad event."""
    eid = f"live-{draw(st.integers(0, 2**31))}-{index}"
    played = st.one_of(st.sampled_from([0, 1, 250, 999.5, 10_000, 1e9, 1e300]), st.floats(0, 1e6))
    obj = draw(st.one_of(
        st.builds(lambda ms, tr, by_item: {"type": "playback.ack", "played_ms": ms, "truncate": tr,
                                            **({"item_id": f"item_{_RID}"} if by_item else {"response_id": _RID})},
                  played, st.booleans(), st.booleans()),
        st.sampled_from([{"type": "response.cancel", "response_id": _RID}, {"type": "response.cancel"},
                         {"type": "response.cancel", "response_id": "resp_other"}, {"type": "barge_in"},
                         {"type": "output_audio_buffer.clear"}, {"type": "input_audio_buffer.commit"},
                         {"type": "response.create"}, {"type": "input_audio_buffer.clear"},
                         {"type": "playback.ack", "response_id": _RID, "played_ms": 100, "committed_ms": -5}]),
    ))
    obj, readable = _with_id(obj, eid, "ok")
    if draw(st.integers(0, 4)) == 0:  # now and then a broken one
        obj = _mutate(obj, "delete", draw(st.integers(0, 9)), None) if len(obj) > 2 else {**obj, "played_ms": "x"}
        return Frame(json.dumps(obj), readable, "may_error", "live_mutated")
    return Frame(json.dumps(obj), readable, "may_error", "live")


@st.composite
def batches(draw: Any, min_size: int, max_size: int, live_every: int = 0) -> tuple[list[Frame], str, list[Frame]]:
    """Frames (each with a unique event_id), how the batch ends (``close`` | ``drop``), and frames for
    a live response (empty unless drawn: one batch in ``live_every``; 0 = never)."""
    n = draw(st.integers(min_size, max_size))
    fuzzed = [draw(frames(i)) for i in range(n)]
    ending = draw(st.sampled_from(["close", "drop"]))
    live: list[Frame] = []
    if live_every and draw(st.integers(0, live_every - 1)) == 0:
        live = [draw(live_frames(i)) for i in range(draw(st.integers(3, 12)))]
    return fuzzed, ending, live


@dataclass
class BatchResult:
    """What the server sent back for one batch."""

    frames: list[Frame]
    events: list[dict[str, Any]] = field(default_factory=list)
    sentinel_answered: bool = False
    usable: bool = False
    closed_early: str | None = None
    wall_s: float = 0.0
    refusals: int = 0
    not_json: list[str] = field(default_factory=list)
    live_response: str | None = None


def run_batch(ws_url: str, batch: list[Frame], ending: str, live: list[Frame] = (), *, speech_b64: str = "",
              timeout_s: float = 60.0) -> BatchResult:
    """Play ``batch`` on a fresh session (see the module docstring); never raises on server behaviour.

    With ``live`` frames (and ``speech_b64``, a spoken question as base64 PCM16 16 kHz), the usable
    session is then asked the question (append + commit); once its response exists the ``live``
    frames go out with its id, followed by a second sentinel.
    """
    t0 = time.perf_counter()
    res = BatchResult(list(batch) + list(live))
    with _admitted(ws_url, res, timeout_s) as ws:
        for fr in batch:
            ws.send(fr.wire())
        sentinel = f"sentinel-{id(res)}"
        ws.send(json.dumps({"type": "input.text.append", "event_id": sentinel, "text": "sync"}))
        res.sentinel_answered = _read_until(ws, res, lambda e: _answers(e, sentinel), timeout_s)
        probe = f"probe-{id(res)}"
        ws.send(json.dumps({"type": "input_audio_buffer.clear", "event_id": probe}))
        res.usable = _read_until(ws, res, lambda e: e.get("type") == "input_audio_buffer.cleared", timeout_s)
        if live and speech_b64 and res.usable:
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": speech_b64}))
            ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            if _read_until(ws, res, lambda e: e.get("type") == "response.created", timeout_s):
                rid = next(e["response"]["id"] for e in reversed(res.events) if e.get("type") == "response.created")
                res.live_response = rid
                for fr in live:
                    ws.send(fr.wire(rid))
                again = f"sentinel2-{id(res)}"
                ws.send(json.dumps({"type": "input.text.append", "event_id": again, "text": "sync"}))
                res.sentinel_answered = _read_until(ws, res, lambda e: _answers(e, again), timeout_s)
            else:
                res.closed_early = res.closed_early or "no response to the spoken question"
        if ending == "close":
            ws.send(json.dumps({"type": "session.close"}))
            _read_until(ws, res, lambda e: e.get("type") == "session.closed", timeout_s)
    res.wall_s = time.perf_counter() - t0
    return res


def _admitted(ws_url: str, res: BatchResult, timeout_s: float) -> Any:
    """A socket whose session is configured; a ``resource_exhausted`` refusal (slots of dropped
    sockets wait out ``disconnect_grace_s``) is retried every 100 ms until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        ws = connect(f"{ws_url}/v1/realtime?duplex=1", max_size=None, open_timeout=30, close_timeout=5)
        first = json.loads(ws.recv(timeout=timeout_s))
        if first.get("type") == "error" and first.get("code") == "resource_exhausted" and time.monotonic() < deadline:
            ws.close()
            res.refusals += 1
            time.sleep(0.1)
            continue
        res.events.append(first)
        if first.get("type") != "session.updated":
            _read_until(ws, res, lambda e: e.get("type") == "session.updated", timeout_s)
        return ws


def strict_json(raw: str | bytes) -> Any:
    """``json.loads`` that refuses ``NaN``/``Infinity`` (not JSON: browsers' ``JSON.parse`` rejects them)."""
    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(raw, parse_constant=refuse)


def _answers(ev: dict[str, Any], event_id: str) -> bool:
    return ev.get("type") == "error" and ev.get("error", {}).get("event_id") == event_id


def _read_until(ws: Any, res: BatchResult, pred: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            raw = ws.recv(timeout=left)
        except TimeoutError:
            return False
        except Exception as exc:  # noqa: BLE001 - the socket closed (how is recorded)
            res.closed_early = res.closed_early or f"{type(exc).__name__}: {exc}"
            return False
        try:
            ev = strict_json(raw)
        except ValueError as exc:
            res.not_json.append(f"{exc}: {str(raw)[:200]}")
            ev = json.loads(raw)
        res.events.append(ev)
        if ev.get("type") in ("session.closed", "session.expired") and not pred(ev):
            res.closed_early = f"{ev['type']}: {ev.get('reason')}"
            return False
        if pred(ev):
            return True


def check_batch(res: BatchResult) -> list[str]:
    """Violations of one batch (empty when the server behaved)."""
    out: list[str] = []
    if res.closed_early:
        out.append(f"session ended early: {res.closed_early}")
    if not res.sentinel_answered:
        out.append("sentinel not answered: a frame was not handled")
    if not res.usable:
        out.append("session not usable after the batch (no input_audio_buffer.cleared)")
    out += [f"server frame is not strict JSON: {x}" for x in res.not_json]
    errors = [e for e in res.events if e.get("type") == "error"]
    by_id: dict[str | None, list[dict[str, Any]]] = {}
    for e in errors:
        err = e.get("error") or {}
        code = err.get("code")
        if code not in STABLE_CODES:
            out.append(f"unstable or internal error code {code!r}: {err.get('message')}")
        by_id.setdefault(err.get("event_id"), []).append(err)
    sent_ids = {fr.event_id for fr in res.frames if fr.event_id}
    for eid in by_id:
        if eid is not None and eid not in sent_ids and not str(eid).startswith(("sentinel", "probe-")):
            out.append(f"error answers an event_id never sent: {eid!r}")
    for fr in res.frames:
        if fr.expect == "must_error" and fr.event_id is not None and fr.event_id not in by_id:
            out.append(f"no error for {fr!r}")
        if fr.expect == "ok" and fr.event_id in by_id:
            codes = [e.get("code") for e in by_id[fr.event_id]]
            if codes != ["input_backpressure"]:
                out.append(f"error {codes} for a well-formed event {fr!r}")
    anonymous_frames = sum(1 for fr in res.frames if fr.event_id is None)
    anonymous_must = sum(1 for fr in res.frames if fr.event_id is None and fr.expect == "must_error")
    anonymous_errors = len(by_id.get(None, []))
    if anonymous_errors > anonymous_frames:
        out.append(f"{anonymous_errors} errors without event_id for {anonymous_frames} frames without one")
    if anonymous_errors < anonymous_must:
        out.append(f"only {anonymous_errors} errors without event_id for {anonymous_must} bad frames without one")
    return out


@dataclass
class FuzzStats:
    """Counters of a fuzz run."""

    batches: int = 0
    frames: int = 0
    errors: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    by_code: dict[str, int] = field(default_factory=dict)
    batch_wall_s: list[float] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    refusals: int = 0
    live_responses: int = 0

    def add(self, res: BatchResult, violations: list[str]) -> None:
        self.batches += 1
        self.frames += len(res.frames)
        for fr in res.frames:
            self.by_kind[fr.kind] = self.by_kind.get(fr.kind, 0) + 1
        for e in res.events:
            if e.get("type") == "error":
                self.errors += 1
                code = str((e.get("error") or {}).get("code"))
                self.by_code[code] = self.by_code.get(code, 0) + 1
        self.batch_wall_s.append(res.wall_s)
        self.refusals += res.refusals
        self.live_responses += res.live_response is not None
        self.violations.extend(violations)


def fuzz(ws_url: str, *, examples: int, min_frames: int = 20, max_frames: int = 60, seed: int | None = None,
         stats: FuzzStats | None = None, on_batch: Any = None, shrink: bool = True, speech_pcm16: bytes = b"",
         live_every: int = 4) -> FuzzStats:
    """Run ``examples`` hypothesis examples (one batch each) against ``ws_url``.

    With ``speech_pcm16`` (a spoken question, PCM16 16 kHz mono), one batch in ``live_every`` ends
    with a live phase: the question is asked and fuzzed acks/cancels/interrupts hit its response.

    Raises:
        AssertionError: a batch broke a rule (hypothesis shrinks it first; the message lists them).
    """
    stats = stats if stats is not None else FuzzStats()
    speech_b64 = base64.b64encode(speech_pcm16).decode() if speech_pcm16 else ""

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is None,
              suppress_health_check=list(HealthCheck), print_blob=True,
              phases=None if shrink else (Phase.explicit, Phase.reuse, Phase.generate))
    @given(batches(min_frames, max_frames, live_every if speech_pcm16 else 0))
    def one(drawn: tuple[list[Frame], str, list[Frame]]) -> None:
        batch, ending, live = drawn
        res = run_batch(ws_url, batch, ending, live, speech_b64=speech_b64)
        violations = check_batch(res)
        stats.add(res, violations)
        if on_batch is not None:
            on_batch(res)
        assert not violations, violations

    if seed is not None:
        from hypothesis import seed as hseed

        one = hseed(seed)(one)
    one()
    return stats


@dataclass
class HonestRun:
    """What an ordinary client got for one question: the reply's transcript and audio length."""

    transcript: str
    audio_ms: float
    errors: list[dict[str, Any]]
    status: str


async def honest_question(ws_url: str, pcm16: bytes, *, timeout_s: float = 120.0, admitted: Any = None,
                          delay_s: float = 0.0) -> HonestRun:
    """Ask one question the way an app does (stream 100 ms appends, commit) and return the answer.

    Args:
        admitted: a ``threading.Event`` set once the session holds its slot (so a fuzzer that
            starts then cannot take every slot first).
        delay_s: wait this long after admission before asking, seconds.
    """
    from app.client.duplex import DuplexClient

    async with DuplexClient(ws_url) as c:
        if admitted is not None:
            admitted.set()
        await asyncio.sleep(delay_s)
        await c.stream_pcm(pcm16, chunk_ms=100, realtime=False)
        await c.commit()
        done = await c.wait_for("response.done", timeout_s=timeout_s)
        rid = done["response_id"] if "response_id" in done else done["response"]["id"]
        return HonestRun(c.collector.response_text(rid), c.collector.audio_duration_ms(rid), c.collector.errors(),
                         done["response"]["status"])
