"""``python -m app realtime-demo`` against a live server (a subprocess, as a user runs it)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_realtime_demo_cli(server, question_wav, tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run(
        [sys.executable, "-m", "app", "realtime-demo", "--url", server.base_url, "--input-wav", str(question_wav),
         "--output-dir", str(out), "--no-realtime-pacing", "--require-audio"],
        check=False, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["ok"] and result["model_decision"] == "speak"
    assert "paris" in result["transcript"].lower()
    assert result["audio_duration_s"] > 0.5
