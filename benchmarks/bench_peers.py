"""Peers side by side: this app's page, a FastRTC ``ReplyOnPause`` cascade and Pipecat, one run (issue #26).

The same machine, the same fixtures, the same run, the rows taking turns in blocks of ``--block``
questions (one tab open at a time), every figure on the page's clock (Playwright + Debian Chromium,
fake devices, the scripted mic of ``e2e/hooks.js``; the remote audio metered in the page by the same
hooks):

* ``app-mic`` / ``app-camera``: this app's page at ``/`` (``python -m app serve``, its default
  config), the camera switch off / on, driven and measured exactly as ``bench_browser.py`` does
  (:func:`benchmarks.bench_browser._latency_turn`, ``_barge_turn``; one server for both rows);
* ``fastrtc``: ``benchmarks/peers/fastrtc_cascade.py``: FastRTC's ``ReplyOnPause`` (Silero VAD)
  -> the same Whisper -> the same Gemma -> the same Piper voice, in the app's venv;
* ``pipecat``: ``benchmarks/peers/pipecat_cascade.py``: ``pipecat-ai==1.14.0`` with SmallWebRTC,
  Silero VAD, Smart Turn v3 and the same three models, in its own venv ``.cache/pipecat-venv``
  (``--setup-pipecat`` makes it; never imported here nor installed in the app's venv);
* ``echo``: ``fastrtc_cascade.py --echo``: every mic frame straight back (the WebRTC floor).

The peers are measured with ``benchmarks/peers/client.html`` (a plain ``RTCPeerConnection``: mic out,
the stack's audio back) through :class:`PeerPage`.

What is measured, per row:

* **Ear-to-ear** (N = ``--n`` per row, default 20): from the end of the question's speech to the first
  50 ms poll at which the stack's answer is audible in the page (``bench_browser.py``'s definition,
  the same questions, the same Piper-voiced clips). For ``echo``: from the onset of the question's
  speech to the first poll at which its echo is audible (the round trip any stack pays).
* **Barge-in** (``--barge-n`` counted per row, where the stack interrupts: not ``echo``): in a new
  conversation, the long question; 0.6-1.2 s after its answer is audible, the interruption; from its
  speech onset to the start of a >= 600 ms silence in the page. A sample counts when the assistant
  was audible at the onset and the stack cut its reply: for the app its ``flush`` message (as in
  ``bench_browser.py``); for a peer its own cut (FastRTC: ``ReplyOnPause`` clearing its output queue;
  Pipecat: an ``InterruptionFrame``; stamped by the peer, :func:`peer_cut`) before that silence had
  lasted 600 ms (the reply's own pauses are shorter). The long question is "Okay, please count from
  one to twenty." (a ~12 s answer on every stack).
* **Ratios**: each app row's p50 / p95 over each peer's (below 1: the app is faster).
* **Server CPU**: each server's user + system CPU over its rows' latency blocks / their wall time.

Writes ``benchmarks/results/peers.json`` (``--out``) with per-sample rows and prints markdown
(:func:`render_markdown`, also used by ``report.py``).

Usage::

    .venv/bin/python benchmarks/bench_peers.py --setup-pipecat          # once: .cache/pipecat-venv
    .venv/bin/python benchmarks/bench_peers.py --n 2 --barge-n 1 --quick # sanity run
    .venv/bin/python benchmarks/bench_peers.py                           # N=20 a row, barge-in N=10
    .venv/bin/python benchmarks/bench_peers.py --rows app-mic,fastrtc,echo
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_browser import (
    ANSWER_TIMEOUT_S,
    INTERRUPT_AFTER_MS,
    INTERRUPTION,
    LONG_QUESTION,
    QUESTIONS,
    Row,
    _barge_turn,
    _connect,
    _counts,
    _latency_turn,
    _open,
    _process_cpu_s,
    _server,
    _settle,
    summarize_row,
)
from benchmarks.common import (
    PYTHON,
    ServerProcess,
    base_result,
    info_metric,
    now_iso,
    summarize,
    write_result,
)
from benchmarks.peers import setup_venv
from e2e.driver import (
    CHROMIUM,
    RMS_THRESHOLD,
    SILENCE_HOLD_MS,
    OmniPage,
    first_rise,
    launch,
    wait_until,
)
from e2e.media import speech_span, speech_wav

ROWS: dict[str, str] = {
    "app-mic": "this app's page, mic only",
    "app-camera": "this app's page, camera on",
    "fastrtc": "FastRTC ReplyOnPause cascade",
    "pipecat": "Pipecat (SmallWebRTC, Smart Turn v3)",
    "echo": "WebRTC echo floor (FastRTC echo)",
}
"""Row key -> label, in block order."""

APP_ROWS = ("app-mic", "app-camera")
PEER_ROWS = ("fastrtc", "pipecat")
BARGE_ROWS = ("app-mic", "app-camera", "fastrtc", "pipecat")
"""Rows whose stack interrupts its reply when the user talks over it (the echo has no reply)."""

OFFER_PATHS = {"fastrtc": "/webrtc/offer", "pipecat": "/api/offer", "echo": "/webrtc/offer"}
"""Each peer's offer route (FastRTC's ``Stream.mount``; Pipecat's ``SmallWebRTCRequestHandler`` in our bot)."""

PEERS_DIR = ROOT / "benchmarks" / "peers"
ECHO_TIMEOUT_S = 10.0



# ----------------------------------------------------------------------------- pure parts
def parse_rows(text: str) -> list[str]:
    """Row keys from a comma list (order kept as in :data:`ROWS`, duplicates dropped).

    Raises:
        ValueError: an unknown key, or no key at all.
    """
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in ROWS]
    if bad or not keys:
        raise ValueError(f"--rows: a comma list of {', '.join(ROWS)} (got {text!r})")
    return [k for k in ROWS if k in keys]


def require_pipecat(rows: Iterable[str], venv: Path = setup_venv.VENV) -> None:
    """Stop before anything starts when a Pipecat row is asked for and its venv is not set up.

    Raises:
        SystemExit: with :func:`benchmarks.peers.setup_venv.missing_message` (names the set-up command).
    """
    if "pipecat" in rows and not setup_venv.is_ready(venv):
        raise SystemExit("bench_peers: " + setup_venv.missing_message(venv))


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` rounded to 3 places; None when either is missing or ``b`` is not positive."""
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 3)


def ratios(rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """This app's rows against each peer row present: ``[{"app", "peer", "p50", "p95", "barge_p50"}]``.

    Args:
        rows: row key -> row summary (``ear_to_ear.summary_ms`` and ``barge_in.summary_ms`` with
            ``p50``/``p95`` in ms, as :func:`summarize` gives).

    Returns:
        one entry per (app row, peer row) pair: app figure / peer figure (below 1: the app is faster;
        None where a side has no samples).
    """
    out = []
    for a in APP_ROWS:
        for p in PEER_ROWS:
            if a not in rows or p not in rows:
                continue
            ea, ep = rows[a]["ear_to_ear"]["summary_ms"], rows[p]["ear_to_ear"]["summary_ms"]
            ba, bp = rows[a]["barge_in"]["summary_ms"], rows[p]["barge_in"]["summary_ms"]
            out.append({"app": a, "peer": p, "p50": ratio(ea["p50"], ep["p50"]), "p95": ratio(ea["p95"], ep["p95"]),
                        "barge_p50": ratio(ba["p50"], bp["p50"])})
    return out


def peer_cut(events: list[dict[str, Any]], offset_s: float, onset_ms: float, silence_ms: float) -> dict[str, Any]:
    """Where a peer cut its reply in a barge-in, on the page clock.

    Args:
        events: the peer's ``GET /peer/turns`` ``events`` (``{"t": time.monotonic() s, "kind"}``).
        offset_s: ``time.monotonic() = performance.now() / 1000 + offset_s``.
        onset_ms: the interruption's speech onset (page ms).
        silence_ms: the start of the silence after it (page ms).

    Returns:
        ``{"cut_after_onset_ms": ms or None, "cut_kind": str or None, "cut_made_silence": bool}``:
        the first event at or after the onset; whether it came before the silence had lasted
        ``SILENCE_HOLD_MS`` (600 ms), i.e. the cut, not the reply's own end, made the silence. A cut may
        follow the silence's start: a reply's own pauses (the gaps between "1, 2, 3, ...", 300-550 ms
        with Piper joe) are shorter than the hold, so a pause that lasts it was made permanent by the cut;
        the barge-in figure stays what the page heard (onset -> the last sound), the cut is reported
        beside it.
    """
    after = sorted(((e["t"] - offset_s) * 1000.0, e.get("kind")) for e in events
                   if (e["t"] - offset_s) * 1000.0 >= onset_ms)
    if not after:
        return {"cut_after_onset_ms": None, "cut_kind": None, "cut_made_silence": False}
    t, kind = after[0]
    return {"cut_after_onset_ms": round(t - onset_ms, 1), "cut_kind": kind,
            "cut_made_silence": t < silence_ms + SILENCE_HOLD_MS}


def barge_counts(row_key: str, b: dict[str, Any]) -> bool:
    """Whether a barge-in sample counts: the assistant was audible at the onset and the stack cut its reply
    (the app: its flush, :func:`benchmarks.bench_browser._counts`; a peer: :func:`peer_cut` made the silence)."""
    if row_key in APP_ROWS:
        return _counts(b)
    return bool(b["assistant_audible_at_onset"] and b.get("cut_made_silence"))


def barge_summary(row_key: str, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The barge-in block of a row: samples, summary of the counted ones (onset -> silence, ms), exclusions."""
    counted = [b for b in samples if barge_counts(row_key, b)]
    out = {"samples": samples, "summary_ms": summarize(b["barge_in_ms"] for b in counted),
           "counted": len(counted),
           "excluded_not_speaking": sum(1 for b in samples if not b["assistant_audible_at_onset"]),
           "excluded_reply_ended_by_itself": sum(1 for b in samples if b["assistant_audible_at_onset"]
                                                 and not barge_counts(row_key, b))}
    if row_key in APP_ROWS:
        out["server_flush_summary_ms"] = summarize(b["server_flush_after_onset_ms"] for b in counted)
        out["page_mute_summary_ms"] = summarize(b.get("page_mute_after_onset_ms") for b in counted)
    else:
        out["cut_summary_ms"] = summarize(b.get("cut_after_onset_ms") for b in counted)
    return out


# ----------------------------------------------------------------------------- peer page
class PeerPage(OmniPage):
    """A tab on a peer's measurement page (:file:`peers/client.html`), driven like :class:`OmniPage`.

    The peers have no page state route, trace or local barge-in: :meth:`state` is ``{}``,
    :meth:`webrtc_id` None and :meth:`ducks` empty, so ``bench_browser``'s turn functions measure
    only the page side (the same hooks, the same clock).

    Args:
        browser: a Playwright browser.
        base_url: the peer's ``http://127.0.0.1:<port>``.
        offer_path: its offer route (:data:`OFFER_PATHS`).
    """

    def __init__(self, browser: Any, base_url: str, offer_path: str) -> None:
        super().__init__(browser, base_url, scripted_mic=True)
        self.offer_path = offer_path

    def open(self) -> PeerPage:
        """Load the page and wait for its script."""
        self.page.goto(self.base_url + "/", wait_until="networkidle")
        self.page.wait_for_function("() => window.__peerStart && window.__peer", timeout=30_000)
        return self

    def start(self, *, camera: bool = False) -> None:
        """Offer a call (mic only; ``camera`` must be False). Raises RuntimeError when the offer fails."""
        if camera:
            raise ValueError("the peer page is mic only")
        self.page.evaluate("(p) => window.__peerStart(p)", self.offer_path)
        err = self.page.evaluate("() => window.__peer.error")
        if err:
            raise RuntimeError(f"{self.base_url}: {err}")

    def stop(self) -> None:
        """Hang up (close the peer connection)."""
        self.page.evaluate("() => window.__peerStop && window.__peerStop()")

    def wait_session(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait until the connection is up and the stack's audio track has arrived."""
        return wait_until(lambda: self.page.evaluate(
            "() => window.__peer.state === 'connected' && window.__remoteTracks > 0 && {ok: true}"),
            timeout_s, what="the peer connection")

    def webrtc_id(self) -> str | None:
        return None

    def state(self) -> dict[str, Any] | None:
        return {}

    def ducks(self) -> list[dict[str, Any]]:
        return []


# ----------------------------------------------------------------------------- servers and turns
def peer_server(key: str) -> ServerProcess:
    """The server of peer row ``key`` (``fastrtc``, ``pipecat``, ``echo``) on a free port, bound to 0.0.0.0."""
    srv = ServerProcess()
    if key == "pipecat":
        python, script, extra = str(setup_venv.venv_python()), "pipecat_cascade.py", []
    else:
        python, script, extra = PYTHON, "fastrtc_cascade.py", (["--echo"] if key == "echo" else [])
    srv.args = [python, str(PEERS_DIR / script), "--port", str(srv.port), *extra]
    return srv


def _peer_json(tab: OmniPage) -> dict[str, Any]:
    try:
        r = httpx.get(f"{tab.base_url}/peer/turns", timeout=10)
    except httpx.HTTPError:
        return {}
    return r.json() if r.status_code == 200 else {}


def _peer_connect(tab: PeerPage) -> None:
    httpx.post(f"{tab.base_url}/peer/reset", timeout=10)
    tab.start()
    tab.wait_session(60)
    tab.sleep_until(tab.now_ms() + 1500)


def echo_turn(tab: OmniPage, clip: Path) -> dict[str, Any]:
    """One echo round trip: from the clip's speech onset (page ms) to the first 50 ms poll at which its echo is
    audible (``ear_to_ear_ms``, the headline's poll), and to the first 5 ms above the threshold
    (``echo_fine_ms``); then waits for the echo to end."""
    span = speech_span(clip)
    start, end = tab.say(clip)
    onset = start + span[0] * 1000.0
    try:
        rise = wait_until(lambda: first_rise(tab.rms_since(onset), onset), ECHO_TIMEOUT_S, every_s=0.1,
                          what="the echo")
    except TimeoutError:
        rise = None
    fine = next((r[1] for r in tab.rises_since(onset) if rise is not None and abs(r[0] - rise) < 1.0), None)
    tab.sleep_until(end + 300)
    try:
        _settle(tab, 20)
    except TimeoutError:
        pass
    return {"ear_to_ear_ms": None if rise is None else round(rise - onset, 1),
            "echo_fine_ms": None if fine is None else round(fine - onset, 1),
            "speech_s": round(span[1] - span[0], 3), "server_first_audio_ms": None, "heard": None}


class Clips(NamedTuple):
    """The spoken fixtures (Piper-voiced, as ``bench_browser.py`` makes them). A NamedTuple, not a dataclass:
    ``report.py`` loads this file under a module name ``sys.modules`` does not hold."""

    questions: list[Path]
    long: Path
    interrupt: Path

    @classmethod
    def make(cls, folder: Path) -> Clips:
        """The clips in ``folder`` (made once; 48 kHz mono PCM16 WAVs)."""
        return cls([speech_wav(q, folder / f"q{i}.wav", lead_s=0.2, tail_s=0.3) for i, q in enumerate(QUESTIONS)],
                   speech_wav(LONG_QUESTION, folder / "long.wav", lead_s=0.2, tail_s=0.3),
                   speech_wav(INTERRUPTION, folder / "interrupt.wav", lead_s=0.2, tail_s=0.3))


def _open_tab(browser: Any, row: Row) -> OmniPage:
    if row.key in APP_ROWS:
        tab = _open(browser, row.srv.base_url)
        _connect(tab, row.srv.base_url, row.camera)
        return tab
    tab = PeerPage(browser, row.srv.base_url, OFFER_PATHS[row.key]).open()
    _peer_connect(tab)
    return tab


def _turn(row: Row, clip: Path) -> dict[str, Any]:
    if row.key == "echo":
        return echo_turn(row.tab, clip)
    t0 = time.monotonic()
    s = _latency_turn(row.tab, clip)
    if row.key not in APP_ROWS:
        s["peer_turns"] = [t for t in _peer_json(row.tab).get("turns", []) if t.get("t", 0) >= t0]
        s["heard"] = s["peer_turns"][0].get("heard") if s["peer_turns"] else None
    return s


def _barge(row: Row, clips: Clips, after_ms: float) -> dict[str, Any]:
    offset, _ = row.tab.clock_offset_s()
    b = _barge_turn(row.tab, clips.long, clips.interrupt, after_ms)
    if row.key not in APP_ROWS:
        b.update(peer_cut(_peer_json(row.tab).get("events", []), offset, b["onset_page_ms"], b["silence_page_ms"]))
    return b


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in ("fastrtc", "aiortc", "playwright", "gradio"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    pc = setup_venv.installed_versions()
    for name in ("pipecat-ai", "aiortc", "onnxruntime", "faster-whisper", "llama_cpp_python", "piper-tts", "numpy"):
        out[f"pipecat-venv:{name}"] = pc.get(name)
    return out


# ----------------------------------------------------------------------------- run
def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the servers of ``args.rows``, run the blocks and the barge-ins, return the result (not written)."""
    from playwright.sync_api import sync_playwright

    result = base_result("peers", "Peers side by side: this app's page, FastRTC ReplyOnPause, Pipecat", "26",
                         quick=args.quick)
    clips = Clips.make(Path(tempfile.mkdtemp(prefix="omni-bench-peers-")))
    rows = [Row(k, None, "default" if k in APP_ROWS else "-", camera=k == "app-camera") for k in args.rows]
    barge_rows = [r for r in rows if r.key in BARGE_ROWS] if args.barge_n > 0 else []
    t0 = time.monotonic()
    deadline = t0 + args.budget_min * 60.0 if args.budget_min else float("inf")
    stopped: list[str] = []
    servers: list[ServerProcess] = []
    try:
        app: tuple[ServerProcess, float] | None = None
        for r in rows:
            if r.key in APP_ROWS:
                if app is None:  # both app rows share one server (no override: the default config), as
                    srv = _server(Row("app", None, "silence"), None, ())  # bench_browser's modes do
                    servers.append(srv)
                    app = (srv, round(srv.start(), 2))
                r.srv, r.ready_s = app
            else:
                r.srv = peer_server(r.key)
                servers.append(r.srv)
                r.ready_s = round(r.srv.start(timeout_s=300), 2)
            print(f"[{r.key}] server ready in {r.ready_s} s: {r.srv.command}", flush=True)
        with sync_playwright() as pw:
            browser = launch(pw)
            chromium_version = browser.version
            done = 0
            while done < args.n:
                if time.monotonic() > deadline:
                    stopped.append(f"latency blocks stopped by --budget-min after {done} turns a row")
                    break
                k = min(args.block, args.n - done)
                for r in rows:
                    r.tab = _open_tab(browser, r)
                    if r.warm is None:  # warm-up turn (first model calls and first connection are slower)
                        r.warm = _turn(r, clips.questions[0])
                    cpu0, wall0 = _process_cpu_s(r.srv.proc.pid), time.monotonic()
                    for i in range(done, done + k):
                        s = _turn(r, clips.questions[i % len(clips.questions)])
                        s["question"] = QUESTIONS[i % len(QUESTIONS)]
                        s["block"] = done // args.block
                        r.turns.append(s)
                        print(f"[{r.key}] latency {i + 1}/{args.n}: {s['ear_to_ear_ms']} ms (heard {s.get('heard')!r})",
                              flush=True)
                    r.cpu_s += _process_cpu_s(r.srv.proc.pid) - cpu0
                    r.busy_wall_s += time.monotonic() - wall0
                    r.tab.stop()
                    r.tab.close()
                done += k
            tries = 0
            while barge_rows and any(sum(barge_counts(r.key, b) for b in r.barge) < args.barge_n for r in barge_rows) \
                    and tries < 2 * args.barge_n:
                tries += 1
                for r in barge_rows:
                    if sum(barge_counts(r.key, b) for b in r.barge) >= args.barge_n:
                        continue
                    if time.monotonic() > deadline:
                        break
                    r.tab = _open_tab(browser, r)  # a new conversation each time (bench_browser's reason)
                    try:
                        b = _barge(r, clips, INTERRUPT_AFTER_MS[len(r.barge) % len(INTERRUPT_AFTER_MS)])
                    except TimeoutError as exc:
                        b = {"error": str(exc), "barge_in_ms": None, "assistant_audible_at_onset": False,
                             "server_flush_after_onset_ms": None, "interruption_answered": False}
                    r.barge.append(b)
                    print(f"[{r.key}] barge-in {len(r.barge)} ({sum(barge_counts(r.key, x) for x in r.barge)}/"
                          f"{args.barge_n} counted): {b['barge_in_ms']} ms (speaking at onset: "
                          f"{b['assistant_audible_at_onset']}, flush {b.get('server_flush_after_onset_ms')}, "
                          f"cut {b.get('cut_after_onset_ms')})", flush=True)
                    try:
                        _settle(r.tab, 90)
                    except TimeoutError:
                        pass
                    r.tab.stop()
                    r.tab.close()
                if time.monotonic() > deadline:
                    stopped.append(f"barge-ins stopped by --budget-min after {tries} rounds")
                    break
            browser.close()
    finally:
        for srv in servers:
            if srv.proc is not None:
                srv.stop()

    summaries: dict[str, dict[str, Any]] = {}
    for r in rows:
        s = summarize_row(r)
        s["label"] = ROWS[r.key]
        s["barge_in"] = barge_summary(r.key, r.barge)
        if r.key == "echo":
            s["echo_fine_summary_ms"] = summarize(t.get("echo_fine_ms") for t in r.turns)
        summaries[r.key] = s
    rat = ratios(summaries)
    result.update({
        "finished_at": now_iso(),
        "wall_s": round(time.monotonic() - t0, 1),
        "reproduce": ".venv/bin/python benchmarks/bench_peers.py",
        "versions_peers": _versions(),
        "workload": {
            "browser": f"{CHROMIUM} {chromium_version} headless, fake devices, scripted mic (WebAudio)",
            "rows": args.rows, "n": args.n, "block": args.block, "barge_n": args.barge_n,
            "budget_min": args.budget_min, "stopped": stopped,
            "questions": list(QUESTIONS), "long_question": LONG_QUESTION, "interruption": INTERRUPTION,
            "interrupt_after_ms": INTERRUPT_AFTER_MS, "rms_threshold": RMS_THRESHOLD,
            "silence_hold_ms": SILENCE_HOLD_MS, "poll_ms": 50, "answer_timeout_s": ANSWER_TIMEOUT_S,
            "inputs": "Piper en_US-joe-medium (phonemes by espeak-ng) -> sox 48 kHz, 0.2 s lead, 0.3 s tail",
            "servers": {r.key: r.srv.command for r in rows if r.srv is not None},
            "app_config": "configs/tiny.yaml as shipped (turn_policy.detector: smart_turn)",
            "peer_page": "benchmarks/peers/client.html (plain RTCPeerConnection, mic only)",
        },
        "rows": summaries,
        "ratios": rat,
        "metrics": _metrics(summaries, rat),
        "notes": [
            ("One run, one machine (2 cores shared by every server's models, Chromium and this script); the rows "
             "take turns in blocks, one tab open at a time; every server stays up for the whole run."),
            ("Ear-to-ear: end of the question's speech -> the first 50 ms poll at which the answer is audible in the "
             "page (bench_browser.py's definition, the same hooks and clips). The echo row: the question's speech "
             "onset -> its echo audible (the WebRTC round trip plus the same poll)."),
            ("Barge-in: interruption onset -> the start of >= 600 ms of silence in the page; counted when the stack "
             "was audible at the onset and cut its reply (app: flush; FastRTC: ReplyOnPause clears its output queue "
             "when it detects the pause after the interruption; Pipecat: InterruptionFrame at the user's turn start) "
             "before that silence had lasted 600 ms (the reply's own pauses between numbers are 300-550 ms, so a "
             "pause the cut lands in counts, measured from its start: what the page heard)."),
            ("The peers get the same Whisper (CTranslate2 int8), Gemma 3 270M (the app's prompt and greedy "
             "sampling) and Piper joe voice; FastRTC's ReplyOnPause uses the Silero v5 graph from Pipecat's wheel "
             "(its own default downloads one); the app runs its own page, turn-taking and streaming."),
        ],
    })
    return result


def _metrics(rows: dict[str, dict[str, Any]], rat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Headline numbers (no targets: the issue asks for the comparison): p50 per row, then ratios, p95, barge-in."""
    out = []
    for k in ("app-mic", "fastrtc", "pipecat", "echo", "app-camera"):
        if k in rows:
            e = rows[k]["ear_to_ear"]["summary_ms"]
            what = "echo round trip" if k == "echo" else "ear-to-ear"
            out.append(info_metric(f"peers_{k}_p50", f"[{ROWS[k]}] {what} p50", e["p50"], "ms", n=e["n"]))
    for r in rat:
        out.append(info_metric(f"peers_{r['app']}_over_{r['peer']}_p50",
                               f"[{ROWS[r['app']]}] / [{ROWS[r['peer']]}] ear-to-ear p50 ratio", r["p50"], "x",
                               n=min(rows[r["app"]]["ear_to_ear"]["summary_ms"]["n"],
                                     rows[r["peer"]]["ear_to_ear"]["summary_ms"]["n"])))
    for k in rows:
        e, b = rows[k]["ear_to_ear"]["summary_ms"], rows[k]["barge_in"]["summary_ms"]
        out.append(info_metric(f"peers_{k}_p95", f"[{ROWS[k]}] p95", e["p95"], "ms", n=e["n"]))
        if b["n"]:
            out.append(info_metric(f"peers_{k}_barge_p50", f"[{ROWS[k]}] barge-in p50", b["p50"], "ms", n=b["n"]))
    return out


# ----------------------------------------------------------------------------- markdown
def _f(v: Any, unit: str = "") -> str:
    return "–" if v is None else f"{v:.0f}{unit}"


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x"


def render_markdown(result: dict[str, Any]) -> str:
    """The rows (ear-to-ear p50 / p95 / min / max and N, barge-in p50 / p95 and N counted of tried, server
    cores), then this app's rows over each peer's (ratios), then the notes; ms on the page's clock."""
    rows = result.get("rows") or {}
    if not rows:
        return "_No rows measured yet._\n"
    w = result.get("workload") or {}
    out = [(f"N = {w.get('n')} latency turns a row in blocks of {w.get('block')}, barge-ins up to "
           f"{w.get('barge_n')} counted a row; {'a `--quick` sanity run; ' if result.get('quick') else ''}"
           "ms on the page's clock."
           + "".join(f" Cut short: {x}." for x in w.get("stopped") or [])), "",
           "| row | N | ear-to-ear p50 | p95 | min | max | barge-in p50 / p95 (counted / tried) | server cores |",
           "|---|---|---|---|---|---|---|---|"]
    for k, r in rows.items():
        e, b = r["ear_to_ear"]["summary_ms"], r["barge_in"]
        bs = b["summary_ms"]
        barge = (f"{_f(bs['p50'])} / {_f(bs['p95'])} ({b.get('counted', bs['n'])} / {len(b['samples'])})"
                 if b["samples"] else "–")
        name = r.get("label", k) + (" (onset -> echo)" if k == "echo" else "")
        cores = "–" if r.get("server_cores") is None else f"{r['server_cores']:.2f}"
        out.append(f"| {name} | {e['n']} | {_f(e['p50'])} | {_f(e['p95'])} | {_f(e['min'])} | {_f(e['max'])} | "
                   f"{barge} | {cores} |")
    rat = result.get("ratios") or []
    if rat:
        out += ["", "| this app's row / peer | ear-to-ear p50 | p95 | barge-in p50 |", "|---|---|---|---|"]
        for x in rat:
            out.append(f"| {ROWS.get(x['app'], x['app'])} / {ROWS.get(x['peer'], x['peer'])} | {_x(x['p50'])} | "
                       f"{_x(x['p95'])} | {_x(x['barge_p50'])} |")
    v = result.get("versions_peers") or {}
    out += ["", (f"fastrtc {v.get('fastrtc')}, pipecat-ai {v.get('pipecat-venv:pipecat-ai')} (own venv), "
            f"aiortc {v.get('aiortc')}, Chromium {str(w.get('browser', '')).split(' headless')[0].split(' ')[-1]}.")]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup-pipecat", action="store_true",
                    help=f"make {setup_venv.VENV.relative_to(ROOT)} (pipecat-ai=={setup_venv.PIPECAT_VERSION}) and exit")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma list of rows (default all: {','.join(ROWS)})")
    ap.add_argument("--n", type=int, default=20, help="latency turns per row (default 20)")
    ap.add_argument("--barge-n", type=int, default=10, help="counted barge-ins per row (default 10; 0 = none)")
    ap.add_argument("--block", type=int, default=5, help="turns per row before the next row's turn (default 5)")
    ap.add_argument("--budget-min", type=float, default=0.0,
                    help="stop starting latency blocks, then barge-ins, after this many minutes (0: no limit); "
                    "what was measured is written and the cut is recorded (workload.stopped)")
    ap.add_argument("--out", default="peers", help="result name: benchmarks/results/<out>.json (default peers)")
    ap.add_argument("--quick", action="store_true", help="mark the result as a sanity run")
    args = ap.parse_args(argv)
    if args.setup_pipecat:
        print(f"wrote {setup_venv.setup()}")
        return 0
    try:
        args.rows = parse_rows(args.rows)
    except ValueError as exc:
        ap.error(str(exc))
    require_pipecat(args.rows)
    args.n, args.barge_n, args.block = max(1, args.n), max(0, args.barge_n), max(1, args.block)
    result = run(args)
    path = write_result(args.out, result)
    print(render_markdown(result))
    print(f"\nwrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
