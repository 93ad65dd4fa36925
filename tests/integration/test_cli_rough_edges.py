"""CLI rough edges a new user hits (issue 11 part 7): ``realtime-demo`` against a dead server says why
it failed and does not call it "protocol ok"."""

from __future__ import annotations

import json

from app.client.demo import main_realtime_demo
from tests.live_server import free_port


def test_realtime_demo_against_a_dead_server_prints_the_reason(question_wav, tmp_path, capsys):
    port = free_port()  # nothing listens there
    rc = main_realtime_demo(["--url", f"http://127.0.0.1:{port}", "--input-wav", str(question_wav),
                             "--output-dir", str(tmp_path), "--no-realtime-pacing"])
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert rc == 1 and summary["ok"] is False
    assert summary["protocol_ok"] is False  # nothing connected is not "protocol ok"
    assert "DuplexConnectionError" in summary["reason"] and str(port) in summary["reason"]
    assert "realtime-demo failed: DuplexConnectionError" in captured.err
    assert json.loads((tmp_path / "result.json").read_text())["reason"] == summary["reason"]


def test_realtime_demo_with_a_missing_or_undecodable_input_says_so_in_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.wav"
    bad.write_text("not audio")
    for path, words in ((tmp_path / "nope.wav", "No such file"), (bad, "could not decode audio")):
        try:
            main_realtime_demo(["--url", "http://127.0.0.1:9", "--input-wav", str(path), "--output-dir", str(tmp_path)])
        except SystemExit as exc:  # argparse's usage error, no traceback
            assert exc.code == 2
        else:
            raise AssertionError("no usage error")
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("realtime-demo: error:") and words in err, err
