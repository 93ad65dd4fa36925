"""Render ``benchmarks/results/*.json`` into ``BENCHMARKS.md`` and ``benchmarks/history/*.md`` (both overwritten).

``BENCHMARKS.md`` is for readers: first one table of the current figure of each benchmark (with machine,
commit, N and date), then one short section per benchmark (what it measures, the exact command, the current
run's main tables). Everything else (per-sample rows, older runs and their notes, runs made on a busy machine)
goes to ``benchmarks/history/<benchmark>.md``, linked from each section.

Which result file is *current* and which is *history* is decided here, per file, in ``REGISTRY`` (the current
picks) and ``VERDICTS`` (why an older file is history), from what the files record (machine, commit, date, load
average at start, notes). A result file no entry claims is listed under "Other result files".

Adding a benchmark is one line in ``REGISTRY``::

    plugin("answers", "Answers a person can use", "bench_answers.py", "answers", "one-line summary"),

The entry appears only when ``results/answers.json`` exists; its tables come from the script's
``render_markdown(result) -> str`` when it has one (else the generic renderer), its top-table rows from the
result's ``metrics`` list (``{name, value, unit, target, pass, n}``).

Usage::

    .venv/bin/python benchmarks/report.py [--results DIR] [--out BENCHMARKS.md] [--history DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report_blocks as rb
from report_sections import num

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "BENCHMARKS.md"
HISTORY = ROOT / "benchmarks" / "history"
MAX_LINES = rb.MAX_LINES
"""``BENCHMARKS.md`` stays at or under this many lines (issue #26); sections are cut to fit, never the table."""

Renderer = Callable[[dict[str, Any]], list[str]]


@dataclass(frozen=True)
class Pick:
    """One current result file and which of its metrics go to the top table (substrings of the metric names;
    empty: its first four metrics)."""

    stem: str
    metrics: tuple[str, ...] = ()
    versus: Callable[[dict[str, dict[str, Any]]], str] | None = None
    """What these figures are compared to, from all loaded results (the top table's "compared to")."""
    note: str = ""
    """Said beside the file in its section (e.g. why its load average at start does not matter)."""


@dataclass(frozen=True)
class Bench:
    """One benchmark as ``BENCHMARKS.md`` shows it.

    key: section id and history file name (``benchmarks/history/<key>.md``).
    title, summary: the section heading and one line of what it measures.
    reproduce: the exact command (the current run's recorded ``command`` is shown as well where it differs).
    current: the result files whose figures are current, with their top-table metrics.
    history: glob patterns of the result stems kept as this benchmark's history.
    brief: compact tables of the first current file for BENCHMARKS.md (every table goes to the history file).
    headline: rows for the top table when the result has no ``metrics`` list (``{name, value, unit, target,
        pass, n}``).
    gaps: figures with no current run, each said with why (shown under the top table); a ``(text, stem)`` pair
        is shown only while ``results/<stem>.json`` does not exist (the run that will fill the gap).
    optional: the entry only appears once its current file exists (benchmarks other work adds).
    module: a script under ``benchmarks/`` whose ``render_markdown(result) -> str`` renders its results.
    """

    key: str
    title: str
    summary: str
    reproduce: str
    current: tuple[Pick, ...]
    history: tuple[str, ...] = ()
    brief: Renderer | None = None
    headline: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None
    gaps: tuple[str | tuple[str, str], ...] = ()
    optional: bool = False
    module: str | None = field(default=None)


def _script_renderer(script: str) -> Renderer | None:
    """``render_markdown(result) -> str`` of ``benchmarks/<script>`` as a renderer, or None when the script is
    missing, fails to import or has no such function."""
    path = ROOT / "benchmarks" / script
    if not path.is_file():
        return None
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - a broken script must not stop the report
        return None
    fn = getattr(mod, "render_markdown", None)
    if not callable(fn):
        return None

    def render(data: dict[str, Any]) -> list[str]:
        try:
            return str(fn(data)).rstrip().splitlines() + [""]
        except Exception as exc:  # noqa: BLE001 - a renderer that fails on a result must not stop the report
            return [f"(`{script}` render_markdown failed on this result: {type(exc).__name__}: {exc})", ""]
    return render


def plugin(key: str, title: str, script: str, stem: str, summary: str, *, reproduce: str | None = None,
           metrics: tuple[str, ...] = ()) -> Bench:
    """A benchmark added by other work in one line: shown once ``results/<stem>.json`` exists, rendered by the
    script's ``render_markdown`` when it has one; history: ``<stem>_*`` files."""
    return Bench(key, title, summary, reproduce or f".venv/bin/python benchmarks/{script}",
                 (Pick(stem, metrics),), history=(f"{stem}_*",), optional=True, module=script)


def _floor(loaded: dict[str, dict[str, Any]]) -> str:
    m = rb.metric(loaded.get("floor"), "design as built")
    return f"compute floor {num(m['value'], 'ms')} p50 (`floor`)" if m else ""


def _page_floor(loaded: dict[str, dict[str, Any]]) -> str:
    m = rb.metric(loaded.get("floor"), "design as built")
    return f"compute floor {num(m['value'], 'ms')} + page ~130 ms (`floor`)" if m else ""


REGISTRY: list[Bench] = [
    Bench("realtime", "Realtime route: end of speech -> first audio",
          "`WS /v1/realtime?duplex=1`: a spoken question streamed at real time, time from the end of the user's "
          "speech to the first `response.output_audio.delta`; also concurrent sessions and barge-in.",
          ".venv/bin/python benchmarks/bench_duplex.py --parts a --units 1000 --n 20",
          (Pick("duplex_floor_check", ("p50",), _floor,
                "its load came from bench_floor's run a minute before, same session, machine otherwise idle (its "
                "notes)"),
           Pick("duplex_stranded", ("preposition, p50", "preposition, baseline"), note="questions that end on a preposition (`--question-set stranded`), "
                                                   "this tree beside 6e974a1, paired sample by sample")),
          history=("duplex*",), brief=rb.brief_duplex,
          gaps=("Realtime barge-in stop time: `duplex.json` (2026-12-01) predates the overlap reads; see `turns`.",)),
    Bench("concurrency", "Several sessions at once",
          "K realtime sessions streaming at real time on one server, a question every 8 s each: first audio "
          "per K beside K=1, units on time, and where the model calls waited for the cores; this tree beside a "
          "baseline tree in one run.",
          ".venv/bin/python benchmarks/bench_duplex.py --parts b --k 1,4,6 --baseline-tree /work/wt-base "
          "--result-name duplex_k_batch",
          (Pick("duplex_k_batch", ("=First audio p95 at K=4 / at K=1", "=First audio p95 at K=6 / at K=1",
                                   "=First audio p95 at K=4 / at K=1 (baseline)",
                                   "=First audio p95 at K=6 / at K=1 (baseline)")),
           Pick("duplex_batch_k1", ("units, p50",), note="one session: the batched tree beside the baseline, "
                                                         "paired sample by sample")),
          history=("duplex_k*", "duplex_batch*"), brief=rb.brief_concurrency),
    plugin("batching", "Batching model calls across sessions", "bench_batching.py", "batching",
           "What one call on N items of each kind (Thinker token, Smart Turn, Whisper encoder, Code2Wav) costs on "
           "these cores, against N calls."),
    plugin("asr_retry", "Suspect Whisper decodes: a longer window before the 30 s path", "bench_asr_retry.py",
           "asr_retry", "What a short-window decode that looks repeated costs, redone on the 30 s path (before) or "
           "decoded again in a longer window (now), on the clips live sessions transcribe in the overlap dialogues."),
    Bench("page", "Browser page: ear-to-ear",
          "The WebRTC page in Chromium with a fake microphone: end of the question -> the answer audible in the "
          "page (one clock), where the time goes, and barge-in (onset -> silence in the page).",
          ".venv/bin/python benchmarks/bench_browser.py --n 10 --block 5 --barge-n 0 --detectors smart_turn",
          (Pick("browser_floor_check", ("p50", "p95"), _page_floor),
           Pick("browser_lead", ("Barge-in",), note="the latest run with barge-ins: its barge-in figure only")),
          history=("browser*",), brief=rb.brief_browser,
          gaps=((("Camera on: `browser_camera_bg` (4.1 s p50, 2026-12-02) started on a busy machine (load 1.9 on "
                "2 cores) and `browser_camera` ran older code; neither is current."), "browser_camera_cost"),)),
    # Compared to what: right after the page, so the first screen answers it.
    plugin("peers", "Peers side by side", "bench_peers.py", "peers",
           "This app's page beside a FastRTC ReplyOnPause cascade and Pipecat on the same models, one run.",
           metrics=tuple(f"={row}] {what}" for row in ("[this app's page, mic only", "[this app's page, camera on",
                                                       "[FastRTC ReplyOnPause cascade",
                                                       "[Pipecat (SmallWebRTC, Smart Turn v3)")
                         for what in ("ear-to-ear p50", "barge-in p50")) + ("echo round trip p50",)),
    Bench("floor", "Compute floor of a spoken reply",
          "Every model call of a reply's critical path timed alone in one process, and the floors they add up to.",
          ".venv/bin/python benchmarks/bench_floor.py", (Pick("floor", ("design as built", "one Smart Turn")),),
          history=("floor_*",), brief=rb.brief_generic),
    Bench("chat", "Chat completions: first audio, RTF, cold start, memory",
          "`POST /v1/chat/completions` streaming a spoken answer: time to the first audio chunk; Talker + Code2Wav "
          "real-time factor; cold start to `/health` 200; peak RSS.",
          ".venv/bin/python benchmarks/bench_chat.py", (Pick("chat", note="its load came from the same session's four chat runs just before (its notes)"),),
          history=("chat_*",), brief=rb.brief_chat),
    Bench("turns", "Turn-taking in live sessions",
          "A generated dialogue set (pauses, hesitations, backchannels, barge-ins, non-speech, ...) played into "
          "live sessions: premature takeovers, missed turns, false stops, barge-in success.",
          ".venv/bin/python benchmarks/bench_turns.py --detectors smart_turn --categories backchannel,barge_in "
          "--per-category 30 --split test",
          (Pick("turns_asr_retry", ("[smart_turn] backchannel", "[smart_turn] barge-in")),
           Pick("turns_nonspeech", ("[smart_turn] replies",))),
          history=("turns*",), brief=rb.brief_turns),
    Bench("turn_decisions", "End-of-turn decisions replayed offline",
          "The dialogue set's turn ends replayed on the media clock against each detector setting (dev: tune, "
          "test: report): premature ends at pauses and hesitations, decision time.",
          ".venv/bin/python benchmarks/tune_turns.py --split test --grid",
          (Pick("turn_decisions_test", ("smart_turn:default: premature turn ends, pause",
                                        "smart_turn:default: speech end"),
                note="replayed offline on the media clock: the load does not move its decisions"),),
          history=("turn_decisions*",), brief=rb.brief_decisions),
    Bench("echo", "Echo gate", "The assistant's own voice fed back into the microphone (45 cells: lead, level, "
          "room): false barge-ins and answers with the gate and without it; a real barge-in still heard.",
          ".venv/bin/python benchmarks/bench_echo.py", (Pick("echo", note="offline, on the media clock: the load does not move its figures"),), history=("echo_*",),
          brief=rb.brief_echo, headline=rb.headline_echo),
    Bench("remote", "Front in front of a remote backend",
          "What this app adds as a front for a remote server (`configs/remote.yaml`): time to first audio and "
          "per-event hop, direct vs through the front.", ".venv/bin/python benchmarks/bench_remote.py --runs 5",
          (Pick("remote"),), history=("remote_*",), brief=rb.brief_remote, headline=rb.headline_remote),
    Bench("scale", "Front over a pool of backends",
          "Admission, all-full refusal, spill-over and the added hop of the front over 4 stand-in backends.",
          ".venv/bin/python benchmarks/bench_scale.py", (Pick("scale", ("front, p50", "adds per event")),),
          history=("scale_*",), brief=rb.brief_generic),
    Bench("soak", "Soak: 4 sessions x 60 min",
          "Four real-time sessions for an hour, a question every 20 s: RSS, unit-lag drift, unanswered questions.",
          ".venv/bin/python benchmarks/bench_soak.py --minutes 60", (Pick("soak", ("steady-state", "unanswered")),),
          history=("soak_*",), brief=rb.brief_generic),
    Bench("fuzz", "Protocol fuzzing", "Hypothesis-made client events against `/v1/realtime`: rule violations, "
          "crashes, an honest session's answers during the fuzz.", ".venv/bin/python benchmarks/bench_fuzz.py",
          (Pick("fuzz", ("rule violations", "honest answers")),), history=("fuzz_*",),
          brief=rb.brief_generic),
    # Added by other work; each appears once its result file exists.
    plugin("answers", "Answers a person can use", "bench_answers.py", "answers",
           "The embedded family's spoken answers to everyday questions, scored."),
    plugin("vision", "What the camera sees", "bench_vision.py", "vision",
           "Camera frames and images described or read by the embedded family, scored."),
    plugin("browser_camera_cost", "Camera on: cost in the page", "bench_browser.py", "browser_camera_cost",
           "The page's ear-to-ear with the camera on against mic only, same run."),
    plugin("llm_candidates", "Reply-model candidates", "eval_llm_candidates.py", "llm_candidates",
           "Small GGUF reply models compared on answers and speed on these cores."),
    plugin("gguf_runtime", "GGUF runtime", "bench_gguf_runtime.py", "gguf_runtime",
           "llama.cpp runtime settings for the reply model: tokens per second, first token."),
]
"""Every benchmark, in the order of ``BENCHMARKS.md``."""

VERDICTS: dict[str, str] = {
    "duplex_k6": "busy machine: 1-min load 2.1 at start on 2 cores; session offsets not aligned to VAD windows",
    "duplex_k6_base": "busy machine: 1-min load 2.2 at start on 2 cores",
    "duplex_first_chunk": "older code; the machine was ~30 % slower that session (its notes)",
    "duplex_check": "older code; a check of the machine, ~30 % slower that session (its notes)",
    "duplex_silence": "older code, the `silence` detector; load 2.0 at start",
    "browser_camera_bg": "busy machine: 1-min load 1.9 at start on 2 cores",
    "browser_camera": "older code than `browser_camera_bg`",
    "browser_camera_cost_c0bcca4": "older code (c0bcca4): `browser_camera_cost` measured d72bfdc and 7741772 side by side",
    "browser_camera_cost_pausehold": "a variant not kept (284ed0e, reverted: no gain, its notes); its old rows repeat d72bfdc",
    "browser_mic_epyc": "busy machine: 1-min load 2.9 at start on 2 cores (see `browser_floor_check`'s notes)",
    "browser": "older code; busy machine (load 3.0 at start)",
    "browser_first_segment": "a `--quick` run",
    "browser_lead": "current for the page's barge-in only (the latest run with barge-ins); its ear-to-ear is older",
    "turns_stop_words_v1": "a first version not kept (its notes); `turns_stop_words` replaced it",
    "turns_stop_words": "older code (35dbe37) on other generated dialogues (its dataset sha256); `turns_urgent_reads` replaced it",
    "turn_decisions_dev": "the tuning split: the test split is the figure",
    "turns_urgent_reads": "older code (1026119 beside 23230bd); `turns_resume_release` replaced it (same dialogues)",
    "turns_resume_release": "older code (3681ad8 beside 18b9b78, AMD EPYC); `turns_asr_retry` replaced it (same "
                            "dialogues; eca8e14 beside ead84e1 on an Intel Xeon)",
}
"""Why a result file is history (or only partly current); files not listed are older runs of their benchmark."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--history", type=Path, default=HISTORY)
    args = p.parse_args(argv)
    page, history = rb.render_all(REGISTRY, VERDICTS, args.results, history_link=_rel(args.history, args.out),
                                  script_renderer=_script_renderer)
    args.history.mkdir(parents=True, exist_ok=True)
    for old in args.history.glob("*.md"):
        if old.name not in history and rb.GENERATED in old.read_text(encoding="utf-8"):
            old.unlink()
    for name, text in history.items():
        (args.history / name).write_text(text, encoding="utf-8")
    args.out.write_text(page, encoding="utf-8")
    print(f"wrote {args.out} ({len(page.splitlines())} lines) and {len(history)} files in {args.history}")
    return 0


def _rel(history: Path, out: Path) -> str:
    try:
        return history.resolve().relative_to(out.resolve().parent).as_posix()
    except ValueError:
        return history.resolve().as_posix()


def render(results: Path) -> str:
    """``BENCHMARKS.md`` for ``results`` (the history files are not written)."""
    return rb.render_all(REGISTRY, VERDICTS, results, history_link="benchmarks/history",
                         script_renderer=_script_renderer)[0]


if __name__ == "__main__":
    sys.exit(main())
