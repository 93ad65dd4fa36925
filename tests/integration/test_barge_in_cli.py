"""``python -m app barge-in-check`` against a live server (subprocess, as a user runs it), and its scorer."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.client.barge_in import score_events

REPO = Path(__file__).resolve().parents[2]

# Checks whose outcome depends on how fast the tiny models run on a loaded 2-core machine (when
# the first answer starts relative to the interrupting question and to the end of the WAV, when
# the second one is ready). Seen failing at load average 9 on 2 cores; they pass on an idle one.
TIMING_CHECKS = {"first_response_before_final_commit", "second_response_before_final_commit",
                 "second_response_contains", "second_response_transcript", "min_responses",
                 "audio_deltas_per_response"}
PROTOCOL_CHECKS = {"demo_ok", "no_error_cancel_truncate_events", "no_cancelled_response_done", "lifecycle_invariants",
                   "soft_interrupts_at_unit_boundary", "playback_ack_consistent", "no_stray_responses"}


def _check_report(proc: subprocess.CompletedProcess, out: Path) -> dict:
    """The exit code follows the report; the protocol side holds whatever the machine's load."""
    report = json.loads((out / "summary.json").read_text())
    assert (out / "events.jsonl").stat().st_size > 0
    assert proc.returncode == (0 if report["ok"] else 1), proc.stdout + proc.stderr
    names = {c["name"] for c in report["checks"]}
    assert PROTOCOL_CHECKS <= names
    assert not set(report["failed"]) - TIMING_CHECKS, report["checks"]
    return report


@pytest.fixture(scope="module")
def barge_server(make_server):
    """The set-up of scripts/barge_in_serve.sh: silence-timer turns, no resume window."""
    return make_server(turn_policy={"detector": "silence", "resume_window_ms": 0, "barge_in_ms": 300})


@pytest.fixture(scope="module")
def barge_wav(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("barge") / "barge_in.wav"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "make_barge_in_wav.py"), str(out)],
                          check=True, capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout)


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "barge-in-check", *args], check=False,
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_response_required_on_the_two_response_wav(barge_server, barge_wav, tmp_path):
    out = tmp_path / "rr"
    proc = _run(["--url", barge_server.base_url, "--input-wav", barge_wav["path"], "--output-dir", str(out),
                 "--validation-mode", "response-required", "--input-sha256", barge_wav["sha256"],
                 "--expect-second-response-substring", "rome"])
    report = _check_report(proc, out)
    assert report["input_sha256"] == barge_wav["sha256"] and report["validation_mode"] == "response-required"
    assert "second_response_contains" in {c["name"] for c in report["checks"]}
    first = report["responses"][0]
    if first["reason"] == "user_overlap":  # the second question came before "Paris" was spoken (a late start)
        assert "capital" in first["transcript"].lower() or "france" in first["transcript"].lower() \
            or "paris" in first["transcript"].lower(), first
    else:
        assert "paris" in first["transcript"].lower(), first
    if report["ok"]:
        assert "rome" in report["responses"][1]["transcript"].lower()


def test_model_policy_default_mode(barge_server, barge_wav, tmp_path):
    out = tmp_path / "mp"
    proc = _run(["--url", barge_server.base_url, "--input-wav", barge_wav["path"], "--output-dir", str(out)])
    report = _check_report(proc, out)
    assert report["validation_mode"] == "model-policy"
    assert "second_response_contains" not in {c["name"] for c in report["checks"]}
    assert report["responses"], "no response at all"


def test_wrong_sha256_is_refused_before_anything_is_sent(barge_wav, tmp_path):
    with socket.socket() as listener:  # a port that records connection attempts
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        proc = _run(["--url", f"http://127.0.0.1:{port}", "--input-wav", barge_wav["path"], "--output-dir",
                     str(tmp_path / "x"), "--validation-mode", "response-required", "--input-sha256", "0" * 64,
                     "--expect-second-response-substring", "rome"], timeout=60)
        assert proc.returncode == 1
        assert "refus" in json.loads(proc.stdout.strip().splitlines()[-1])["refused"]
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody connected
    assert not (tmp_path / "x" / "events.jsonl").exists()


def test_response_required_needs_sha_and_substring(barge_wav):
    proc = _run(["--input-wav", barge_wav["path"], "--validation-mode", "response-required"], timeout=60)
    assert proc.returncode == 2 and "--input-sha256" in proc.stderr


# -- the scorer on small hand-made logs: each rule can fail ---------------------------------------

def _response(rid: str, *, reason=None, deltas=2, text="Paris.", listen=False, unit=3):
    ev = [{"type": "response.created", "response_id": rid, "response": {"id": rid}}]
    for i in range(deltas):
        ev += [{"type": "response.output_audio.delta", "response_id": rid, "delta": "AAAA" * 100},
               {"type": "response.output_audio_transcript.delta", "response_id": rid, "delta": text if i == 0 else ""}]
    ev += [{"type": "response.done", "response_id": rid,
            "response": {"id": rid, "status": "completed",
                         "status_details": {"type": "completed", "reason": reason} if reason else None}},
           {"type": "rate_limits.updated"}]
    if listen:
        ev.append({"type": "response.listen", "response_id": rid,
                   "response": {"status": "listening", "metadata": {"reason": "user_overlap", "unit_index": unit}}})
    return ev


def _log(*parts):
    turn = [{"type": "input_audio_buffer.speech_stopped"}]
    ev = [{"type": "session.created"}]
    for part in parts:
        ev += turn + part
    return ev + [{"type": "input_audio_buffer.committed"}, {"type": "session.closed"}]


def test_scorer_passes_a_good_soft_interrupt_and_flags_each_fault():
    good = _log(_response("r1", reason="user_overlap", listen=True, deltas=1), _response("r2", text="Rome."))
    commit = len(good) - 2
    ok, checks, rows = score_events(good, mode="response-required", commit_index=commit,
                                    expect_second_substring="rome")
    assert ok, checks
    assert [r["reason"] for r in rows] == ["user_overlap", None]

    def failed(events, **kw):
        kw.setdefault("commit_index", len(events) - 2)
        return {c["name"] for c in score_events(events, **kw)[1] if not c["ok"]}

    no_listen = _log(_response("r1", reason="user_overlap", listen=False), _response("r2"))
    assert failed(no_listen) == {"soft_interrupts_at_unit_boundary"}
    stray = _log(_response("r1"))[:-2] + _response("r2") + good[-2:]
    assert "no_stray_responses" in failed(stray)
    assert "second_response_contains" in failed(good, mode="response-required", expect_second_substring="madrid")
    assert "first_response_before_final_commit" in failed(good, commit_index=1)
    cancelled = [dict(e) for e in good]
    cancelled.insert(3, {"type": "error", "error": {"code": "x"}})
    assert "no_error_cancel_truncate_events" in failed(cancelled)
    late_audio = good[:-2] + [{"type": "response.output_audio.delta", "response_id": "r1", "delta": "AAAA"}] + good[-2:]
    assert "lifecycle_invariants" in failed(late_audio)
    bad_ack = good[:-2] + [{"type": "playback.acknowledged", "response_id": "r2",
                            "event": {"played_ms": 99999, "committed_ms": 99999, "truncate": False}}] + good[-2:]
    assert failed(bad_ack) == {"playback_ack_consistent"}
