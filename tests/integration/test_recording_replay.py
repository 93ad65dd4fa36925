"""``serve --record-dir`` recordings and ``python -m app replay`` on a live server (real models, real clients)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import soundfile as sf

from app.client.demo import run_realtime_demo

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rec_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("recordings")


@pytest.fixture(scope="module")
def rec_server(make_server, rec_root):
    # The silence timer: unit decisions follow the media clock only (the learned detector holds input
    # while its score is computed, so under load a close can arrive before the last units closed).
    return make_server(recording={"dir": str(rec_root)}, turn_policy={"detector": "silence"})


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """A 4 s 2 fps clip (frames ride the appends as camera input)."""
    from fractions import Fraction

    import av
    import numpy as np

    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=2)
        stream.width, stream.height, stream.pix_fmt = 160, 120, "yuv420p"
        for i in range(8):
            frame = av.VideoFrame.from_ndarray(np.full((120, 160, 3), 30 * i, np.uint8), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 2)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


@pytest.fixture(scope="module")
def recording(rec_server, rec_root, question_wav, clip, tmp_path_factory) -> Path:
    before = set(rec_root.iterdir())
    result = run_realtime_demo(rec_server.base_url, question_wav, tmp_path_factory.mktemp("demo"), input_video=clip)
    assert result["ok"], result["errors"]
    (folder,) = set(rec_root.iterdir()) - before
    return folder


def test_a_session_folder_holds_every_artefact(recording, question_wav):
    config = json.loads((recording / "config.json").read_text())
    assert config["complete"] is True and config["format_version"] == 1 and config["closed_reason"] == "client_close"
    assert config["deploy_config"]["recording"]["dir"] == str(recording.parent)
    info_in, info_out = sf.info(recording / "input.wav"), sf.info(recording / "output.wav")
    assert (info_in.samplerate, info_in.channels, info_out.samplerate, info_out.channels) == (16000, 1, 24000, 1)
    assert abs(info_in.duration - sf.info(question_wav).duration) < 0.05  # every appended sample, once
    assert info_out.duration > 0.5
    rows = [json.loads(line) for line in (recording / "events.jsonl").read_text().splitlines()]
    assert {r["dir"] for r in rows} == {"client", "server"}
    assert all(a["t_s"] <= b["t_s"] for a, b in itertools.pairwise(rows))
    client = [r["event"]["type"] for r in rows if r["dir"] == "client"]
    server = [r["event"]["type"] for r in rows if r["dir"] == "server"]
    assert client[0] == "session.update" and "input_audio_buffer.commit" in client and "playback.ack" in client
    assert server[0] == "session.created" and server[-1] == "session.closed" and "response.done" in server
    deltas = [r["event"]["delta"] for r in rows if r["event"]["type"] == "response.output_audio.delta"]
    assert sum(deltas) == info_out.frames  # output.wav is the deltas, in order
    frames = sorted(p.name for p in (recording / "frames").iterdir())
    assert frames and frames[0] == "unit_00000_0.jpg" and all(p.endswith(".jpg") for p in frames)
    named = [n for r in rows if r["event"]["type"] == "input_audio_buffer.append"
             for n in r["event"].get("video_frames", [])]
    assert sorted(Path(n).name for n in named) == frames
    assert (recording / "frames" / frames[0]).read_bytes()[:3] == b"\xff\xd8\xff"


def test_replay_against_a_live_server_writes_artefacts_and_a_diff(recording, rec_server, tmp_path):
    out = tmp_path / "replay"
    proc = subprocess.run([sys.executable, "-m", "app", "replay", str(recording), "--url", rec_server.base_url,
                           "--output-dir", str(out), "--pace", "realtime"],
                          check=False, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("input.wav", "output.wav", "events.jsonl", "config.json", "diff.json", "result.json"):
        assert (out / name).is_file(), name
    assert sorted(p.name for p in (out / "frames").iterdir()) == sorted(p.name for p in (recording / "frames").iterdir())
    assert sf.info(out / "input.wav").frames == sf.info(recording / "input.wav").frames
    diff = json.loads((out / "diff.json").read_text())
    assert diff["units"]["compared"] >= 3 and diff["units"]["agreement"] is not None
    assert diff["recorded_responses"] >= 1 and diff["replayed_responses"] >= 1
    assert "paris" in diff["replies"][0]["recorded"].lower() and "paris" in diff["replies"][0]["replayed"].lower()
    assert diff["first_audio_ms"][0]["recorded"] > 0 and diff["first_audio_ms"][0]["replayed"] > 0
    result = json.loads((out / "result.json").read_text())
    assert result["ok"] and not result["errors"]


@pytest.mark.parametrize(("damage", "named"), [
    ("rm input.wav", "input.wav"), ("rm config.json", "config.json"), ("cut events.jsonl", "events.jsonl"),
    ("rm frame", "frames/unit_00000_0.jpg"), ("cut input.wav", "input.wav"),
])
def test_a_partial_or_corrupt_recording_names_the_bad_file(recording, tmp_path, damage, named):
    broken = tmp_path / "broken"
    shutil.copytree(recording, broken)
    action, target = damage.split()
    if target == "frame":
        (broken / named).unlink()
    elif action == "rm":
        (broken / target).unlink()
    else:
        data = (broken / target).read_bytes()
        (broken / target).write_bytes(data[: len(data) // 2 + (7 if target == "events.jsonl" else 0)])
    proc = subprocess.run([sys.executable, "-m", "app", "replay", str(broken), "--url", "http://127.0.0.1:9"],
                          check=False, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr and "Traceback" not in proc.stderr


def test_disk_use_is_bounded_oldest_first(tmp_path):
    from app.backend.duplex.recorder import RecordingStore

    cfg = SimpleNamespace(dir=str(tmp_path), max_total_mb=2.5 / 1024, max_age_days=None)  # 2.5 KiB
    store = RecordingStore(cfg, {}, 1000)
    for i in range(4):
        folder = tmp_path / f"2026010{i}T000000Z_s{i}"
        folder.mkdir()
        (folder / "input.wav").write_bytes(b"x" * 1024)
    gone = store.prune()
    assert [p.name[-2:] for p in gone] == ["s0", "s1"]
    assert [p.name[-2:] for p in store.sessions()] == ["s2", "s3"]
    old = tmp_path / "2026010" "2T000000Z_s2"
    os.utime(old, (time.time() - 3 * 86400,) * 2)
    aged = RecordingStore(SimpleNamespace(dir=str(tmp_path), max_total_mb=100.0, max_age_days=2), {}, 1000)
    assert [p.name[-2:] for p in aged.prune()] == ["s2"]
    live = store.open("live")  # a session still recording is never pruned, even over the bound
    store.max_bytes = 0
    assert live.folder not in store.prune() and live.folder.exists()
    from app.backend.protocol import events as E

    live.close(E.SessionClosed(session_id="live", reason="client_close"), {})
    assert store.prune() == [live.folder]


def test_recording_notice_and_page_badge(deploy_config):
    from app.backend.duplex.recorder import notice
    from app.server import build_app

    rec = deploy_config.recording.model_copy(update={"dir": "/tmp/rec"})
    assert "personal data" in notice(rec) and "/tmp/rec" in notice(rec)

    def badges(cfg) -> int:
        app = build_app(cfg, family=object(), with_ui=True)  # not started: only the page is built
        values = [getattr(b, "value", "") for b in app.state.ui["blocks"].blocks.values()]
        return sum('data-testid="recording"' in str(v) for v in values)

    assert badges(deploy_config.model_copy(update={"recording": rec})) == 1
    assert badges(deploy_config) == 0


def test_serve_record_dir_prints_the_notice_and_configures_the_engine(monkeypatch, tmp_path, capsys):
    import uvicorn

    from app.cli import main

    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.update(app=app, **kw))  # the network edge
    assert main(["serve", "--no-ui", "--record-dir", str(tmp_path / "rec"), "--port", "1"]) == 0
    printed = capsys.readouterr().out
    assert "recording is ON" in printed and "personal data" in printed and str(tmp_path / "rec") in printed
    assert served["app"].state.engine.config.recording.dir == str(tmp_path / "rec")
    assert main(["serve", "--no-ui", "--port", "1"]) == 0
    assert "recording" not in capsys.readouterr().out
