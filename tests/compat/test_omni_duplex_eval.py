"""vLLM-Omni's own Omni-DuplexEval code (from its wheel, see omni_duplex_eval.py) against our real server.

A local manifest of two short samples in the benchmark's row format (an ``RTD_OCR`` clip whose
frames show a word, a ``PR_correction`` clip), each with a spoken question, goes through
``generate_sample`` at real-time pace against ``ws://HOST:PORT/v1/realtime?duplex=1``, then
``evaluate_sample`` with this server's chat route as the judge, then ``summarize_scores``. The
harness is used as shipped: the tiny model cannot write the judge's JSON, so its scores come back
as parse errors (no score keys) or zeros, and the test asserts exactly that.

Skipped when the wheel is absent; the skip message gives the pip command.
"""

from __future__ import annotations

import asyncio
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tests.compat.vllm_omni_client import (
    skip_module_without_wheel,
    wheel_dir_from_env,
)
from tests.conftest import espeak_wav

skip_module_without_wheel()


def _clip(path: Path, word: str, seconds: int = 3) -> Path:
    """A ``seconds`` long 2 fps H.264 clip whose frames show ``word`` (PIL text, PyAV encode)."""
    import av
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (320, 240), "white")
    draw = ImageDraw.Draw(image)
    draw.text((40, 90), word, fill="black", font=ImageFont.load_default(size=48))
    frame_rgb = np.asarray(image)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=2)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        for i in range(seconds * 2):
            frame = av.VideoFrame.from_ndarray(frame_rgb, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 2)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


@pytest.fixture(scope="module")
def bench():
    from tests.compat.omni_duplex_eval import load_omni_duplex_eval

    return load_omni_duplex_eval(wheel_dir_from_env())


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ode")
    rows = [
        {"id": "ocr_1", "split": "RTD_OCR", "video": str(_clip(root / "ocr_1.mp4", "HELLO")),
         "question_audio": str(espeak_wav("What word do you see?", root / "q1.wav", lead_s=0.3, tail_s=1.2)),
         "question_text": "What word do you see?", "answer1": "HELLO"},
        {"id": "corr_1", "split": "PR_correction", "video": str(_clip(root / "corr_1.mp4", "PARIS")),
         "question_audio": str(espeak_wav("What is the capital of France?", root / "q2.wav", lead_s=0.3,
                                          tail_s=1.2)),
         "question_text": "What is the capital of France?", "answer1": "Paris"},
    ]
    path = root / "manifest.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def generated(bench, manifest, server, question_wav, tmp_path_factory):
    samples = bench.dataset.load_samples(str(manifest))
    root = tmp_path_factory.mktemp("responses")
    ws = f"ws://127.0.0.1:{server.port}/v1/realtime?duplex=1"

    async def run():
        return [await bench.runner.generate_sample(s, url=ws, model="tiny", ref_audio=question_wav, output_root=root,
                                                   pace="realtime") for s in samples]

    return samples, root, asyncio.run(run())


def test_manifest_rows_load_as_the_benchmark_reads_them(bench, manifest):
    samples = bench.dataset.load_samples(str(manifest))
    assert [(s.id, s.family, s.task_type) for s in samples] == [("ocr_1", "rtd", None),
                                                                 ("corr_1", "pr", "correction")]


def test_generate_sample_at_real_time_pace(generated):
    samples, root, results = generated
    for sample, result in zip(samples, results, strict=True):
        timed = json.loads(result.output.read_text())
        meta = json.loads(result.output.with_name(f"{sample.id}.meta.json").read_text())
        assert result.output == root / sample.split / f"{sample.id}.json"
        assert meta["clock"] == "media" and meta["pace"] == "realtime" and meta["response_done"] is True
        assert meta["drain_timeout"] is None and meta["close_timeout"] is None
        assert timed and all(row["sentence"].strip() and 0 <= row["start"] <= row["end"] for row in timed), timed
        assert result.request_metrics, "the harness's duplex metrics saw no request"
    corr = json.loads(results[1].output.read_text())
    assert "paris" in " ".join(r["sentence"] for r in corr).lower()


def test_no_error_event_during_generation(bench, manifest, server, question_wav, tmp_path):
    """Its runner acks playback every 250 ms while audio streams: none of that draws an ``error``."""
    seen: list[dict] = []
    client_cls = bench.runner.RealtimeDuplexClient
    original = client_cls.__aexit__

    async def keep_events(self, *exc):  # observe the client's own event log (no behaviour change)
        seen.extend(self.events.events)
        return await original(self, *exc)

    sample = bench.dataset.load_samples(str(manifest))[1]
    client_cls.__aexit__ = keep_events
    try:
        asyncio.run(bench.runner.generate_sample(sample, url=f"ws://127.0.0.1:{server.port}/v1/realtime?duplex=1",
                                                 model="tiny", ref_audio=question_wav, output_root=tmp_path))
    finally:
        client_cls.__aexit__ = original
    types = [e.get("type") for e in seen]
    assert "response.done" in types and "playback.acknowledged" in types
    assert "error" not in types, [e for e in seen if e.get("type") == "error"]


def test_evaluate_with_this_server_as_judge(bench, generated, server, tmp_path):
    samples, root, _ = generated
    requests_seen: list[dict] = []

    class ObservedJudge(bench.judge.DuplexJudge):  # records what the harness sends and gets back
        def chat(self, content, *, system=None, max_tokens=1200):
            answer = super().chat(content, system=system, max_tokens=max_tokens)
            images = sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url") \
                if isinstance(content, list) else 0
            requests_seen.append({"images": images, "answer": answer})
            return answer

    judge = ObservedJudge(server.base_url, "tiny", timeout=300)
    score_root = tmp_path / "scores"
    results = []
    for sample in samples:
        response = root / sample.split / f"{sample.id}.json"
        score_path = score_root / sample.split / f"{sample.id}.json"
        results.append(bench.eval.evaluate_sample(sample, response, score_path, judge, judge_video_mode="frame-sample"))
        assert score_path.exists()
    assert requests_seen and all(isinstance(r["answer"], str) and r["answer"].strip() for r in requests_seen)
    assert any(r["images"] > 0 for r in requests_seen), "judge requests carried no frames"
    rtd, pr = results
    # The tiny model answers in prose: no judge JSON, so each score is a parse error (no key) or 0.
    assert rtd["content"].get("content_score", 0.0) == 0.0
    for row in rtd["temporal"]["sentences"]:
        assert row.get("temporal_score", 0) == 0 and row.get("is_relevant", 0) == 0
    assert pr["pr"]["total_score"] == 0 and pr["pr"]["all_success"] is False
    assert all(e.get("success_score", 0) == 0 for e in pr["pr"]["events"])
    summary = bench.eval.summarize_scores(score_root)
    assert summary["samples"] == 2
    assert summary["rtd"]["mean_content_score"] == 0.0
    assert summary["pr"]["mean_all_success"] == 0.0
