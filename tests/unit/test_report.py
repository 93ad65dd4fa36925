"""``benchmarks/report.py``: BENCHMARKS.md and benchmarks/history/ are what it generates from the result files,
the page stays within its line budget, and a benchmark added by other work appears once its file exists."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def report():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("benchmarks_report_under_test", BENCH / "report.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _generate(report, results: Path, tmp: Path) -> tuple[str, dict[str, str]]:
    out, hist = tmp / "BENCHMARKS.md", tmp / "benchmarks" / "history"
    assert report.main(["--results", str(results), "--out", str(out), "--history", str(hist)]) == 0
    return out.read_text(encoding="utf-8"), {p.name: p.read_text(encoding="utf-8") for p in hist.glob("*.md")}


def test_benchmarks_md_and_history_are_what_report_py_generates(report, tmp_path):
    page, history = _generate(report, BENCH / "results", tmp_path)
    committed = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert committed == page, (
        "BENCHMARKS.md is stale: run `.venv/bin/python benchmarks/report.py` and commit what it writes")
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in (BENCH / "history").glob("*.md")}
    assert on_disk == history, "benchmarks/history/ is stale: run `.venv/bin/python benchmarks/report.py`"
    assert len(committed.splitlines()) <= report.MAX_LINES


def test_first_screen_names_figure_machine_and_commit(report, tmp_path):
    page, _ = _generate(report, BENCH / "results", tmp_path)
    first = page.splitlines()[:40]
    header = next(line for line in first if line.startswith("| benchmark |"))
    for column in ("measured", "target", "compared to", "N", "machine", "commit", "date"):
        assert f" {column} " in header
    realtime = json.loads((BENCH / "results" / "duplex_floor_check.json").read_text())
    p50 = next(m for m in realtime["metrics"] if "p50" in m["name"])
    row = next(line for line in first if line.startswith("| [realtime]"))
    assert f"**{round(p50['value'])} ms**" in row and realtime["versions"]["git_commit"][:7] in row


def test_busy_and_older_runs_stay_out_of_the_table(report, tmp_path):
    page, history = _generate(report, BENCH / "results", tmp_path)
    table = [line for line in page.splitlines() if line.startswith("| [")]
    busy = json.loads((BENCH / "results" / "browser_camera_bg.json").read_text())
    assert not any(str(busy["versions"]["git_commit"])[:7] in line for line in table)
    assert "browser_camera_bg" in history["page.md"] and "busy machine" in history["page.md"]
    assert "### duplex_s11" in history["realtime.md"]


def _results_subset(tmp: Path, *stems: str) -> Path:
    res = tmp / "results"
    res.mkdir()
    for s in stems:
        shutil.copy(BENCH / "results" / f"{s}.json", res / f"{s}.json")
    return res


def test_a_plugin_benchmark_appears_once_its_result_file_exists(report, tmp_path):
    res = _results_subset(tmp_path, "floor")
    page, history = _generate(report, res, tmp_path / "before")
    assert "## answers" not in page and "answers.md" not in history
    assert "Peers (a FastRTC cascade, Pipecat) on the same machine: not measured yet" in page
    (res / "answers.json").write_text(json.dumps({
        "benchmark": "answers", "title": "t", "finished_at": "2026-12-05T10:00:00Z",
        "machine": {"cpu_model": "Some CPU", "cores_usable": 2},
        "versions": {"git_commit": "abcdef0123456789"},
        "metrics": [{"name": "useful answers", "value": 0.61, "unit": "", "target": ">= 0.5", "pass": True,
                     "n": 40}]}))
    page, history = _generate(report, res, tmp_path / "after")
    row = next(line for line in page.splitlines() if line.startswith("| [answers]"))
    assert "useful answers" in row and "`abcdef0`" in row and "Some CPU, 2 cores" in row and "| 40 |" in row
    assert "## answers" in page and "answers.md" in history


def test_the_page_stays_within_its_line_budget_and_keeps_the_table(report, tmp_path):
    big = "turn_decisions_test"
    res = _results_subset(tmp_path, big, "floor")
    for stem in ("answers", "vision", "llm_candidates", "gguf_runtime", "peers", "browser_camera_cost"):
        shutil.copy(res / f"{big}.json", res / f"{stem}.json")
    page, _ = _generate(report, res, tmp_path / "out")
    assert len(page.splitlines()) <= report.MAX_LINES
    assert sum(line.startswith("| [") for line in page.splitlines()) >= 7


def test_unreadable_and_unclaimed_files_are_said(report, tmp_path):
    res = _results_subset(tmp_path, "floor")
    (res / "broken.json").write_text("{not json")
    (res / "mystery.json").write_text(json.dumps({"benchmark": "mystery", "metrics": []}))
    page, history = _generate(report, res, tmp_path / "out")
    assert "`broken.json`: unreadable" in page
    assert "`mystery`" in page and "other.md" in history


def test_a_plugin_script_render_markdown_renders_its_section(report, tmp_path, monkeypatch):
    fake_root = tmp_path / "repo"
    (fake_root / "benchmarks").mkdir(parents=True)
    (fake_root / "benchmarks" / "bench_answers.py").write_text(
        "def render_markdown(result):\n"
        "    if result.get('boom'):\n"
        "        raise ValueError('bad result')\n"
        "    return '| item | score |\\n|---|---|\\n| ' + result['item'] + ' | 1 |'\n")
    monkeypatch.setattr(report, "ROOT", fake_root)
    res = _results_subset(tmp_path, "floor")
    (res / "answers.json").write_text(json.dumps({"benchmark": "answers", "item": "capital of France"}))
    page, history = _generate(report, res, tmp_path / "ok")
    assert "| capital of France | 1 |" in page and "| capital of France | 1 |" in history["answers.md"]
    (res / "answers.json").write_text(json.dumps({"benchmark": "answers", "boom": True}))
    page, _ = _generate(report, res, tmp_path / "boom")
    assert "render_markdown failed on this result: ValueError: bad result" in page
