"""Which model calls get cheaper when several sessions' work runs as one batch, on these cores.

Issue #27 asks for cross-session batching of every stage, because batched calls may share the weight
reads of CPU inference. This measures, in one process on an idle machine, what one call costs for
1..6 items of each kind the ``tiny`` family runs per session:

* ``thinker_step``: one ``llama_decode`` writing the next token of N replies (Gemma 3 270M Q4_K_M,
  N sequences of one unified KV cache, as :class:`~app.backend.models.tiny.reply_batch.ReplyBatcher`
  runs it), after a 24-token prompt each;
* ``thinker_replies``: four replies to fixed questions written one after another, then all four at
  once, through the batcher (greedy; the texts must be the same);
* ``smart_turn``: Smart Turn v3.2 on N 8 s clips in one ONNX call;
* ``whisper_encode``: Whisper base's encoder (CTranslate2, int8) on N 3 s windows in one call;
* ``code2wav``: the HiFi-GAN decoder on N chunks of 43 codec frames (one ONNX call with a batch of N
  when the graph takes one, else N calls).

Per item cost = call time / N; ``gain`` = N x (one item alone) / (call time): above 1, batching pays.

Run: ``.venv/bin/python benchmarks/bench_batching.py`` (~1 min; ``--quick``: fewer repeats).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C

NAME = "batching"
SIZES = (1, 2, 3, 4, 6)
QUESTIONS = ("What is the capital of France?", "How many legs does a spider have?",
             "What is seven plus five?", "Who wrote Romeo and Juliet?")


def _time(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after one unmeasured call."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _rows(kind: str, costs: dict[int, float | None], what: str) -> list[dict[str, Any]]:
    one = costs.get(1)
    rows = []
    for n, s in costs.items():
        rows.append({"kind": kind, "n": n, "call_ms": None if s is None else 1000 * s,
                     "per_item_ms": None if s is None else 1000 * s / n,
                     "gain": None if s is None or not one else n * one / s, "what": what})
    return rows


def thinker_steps(repeats: int) -> list[dict[str, Any]]:
    import llama_cpp
    from llama_cpp import _internals

    from app.backend.models.tiny.llm import load_gemma

    llm = load_gemma(n_ctx=64, n_threads=2)
    params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
    params.n_ctx, params.n_seq_max, params.kv_unified = 512 * max(SIZES), max(SIZES), True
    params.n_batch = params.n_ubatch = 512
    ctx = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
    batch = _internals.LlamaBatch(n_tokens=512, embd=0, n_seq_max=1, verbose=False)
    b = batch.batch
    prompt = llm.tokenize(b"User: What is the capital of France?\nOmni: The capital of France is", add_bos=True)
    for seq in range(max(SIZES)):
        batch.reset()
        batch.add_sequence(prompt, seq, False)
        assert llama_cpp.llama_decode(ctx.ctx, b) == 0
    costs: dict[int, float | None] = {}
    for n in SIZES:
        pos = [len(prompt)]

        def step(n: int = n, pos: list[int] = pos) -> None:
            b.n_tokens = n
            for i in range(n):
                b.token[i], b.pos[i], b.seq_id[i][0], b.n_seq_id[i], b.logits[i] = 235265, pos[0], i, 1, True
            assert llama_cpp.llama_decode(ctx.ctx, b) == 0
            pos[0] += 1

        costs[n] = _time(step, repeats)
        for seq in range(max(SIZES)):
            llama_cpp.llama_memory_seq_rm(ctx.memory, seq, len(prompt), -1)
    return _rows("thinker_step", costs, "one llama_decode: the next token of N replies")


def thinker_replies() -> dict[str, Any]:
    from app.backend.models.tiny.llm import GemmaLlm
    from app.backend.pipeline.stages import SamplingParams, ThinkerPrompt

    llm = GemmaLlm(batch_replies=len(QUESTIONS))
    params = SamplingParams(temperature=0.0, max_tokens=48)

    def reply(q: str) -> str:
        return llm.generate_reply(ThinkerPrompt("", [], q), params).text

    for q in QUESTIONS:  # (every sequence holds the few-shot start)
        reply(q)
    t0 = time.perf_counter()
    alone = [reply(q) for q in QUESTIONS]
    serial_s = time.perf_counter() - t0
    together: list[str] = [""] * len(QUESTIONS)
    gate = threading.Barrier(len(QUESTIONS))

    def write(i: int) -> None:
        gate.wait()
        together[i] = reply(QUESTIONS[i])

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(QUESTIONS))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    batched_s = time.perf_counter() - t0
    stats = llm.batcher.stats()
    return {"questions": list(QUESTIONS), "one_after_another_ms": 1000 * serial_s, "at_once_ms": 1000 * batched_s,
            "gain": serial_s / batched_s, "same_texts": alone == together, "texts_alone": alone,
            "texts_together": together, "max_batch": stats.max_batch, "batch_sizes": stats.batch_sizes}


def smart_turn(repeats: int) -> list[dict[str, Any]]:
    from app.backend.models.tiny.smart_turn import SmartTurnModel

    model = SmartTurnModel()
    clip = (0.1 * np.sin(np.arange(8 * 16_000) / 16_000 * 2 * np.pi * 220)).astype(np.float32)
    costs = {n: _time(lambda n=n: model.predict([clip] * n), repeats) for n in SIZES}
    return _rows("smart_turn", costs, "Smart Turn v3.2 on N 8 s clips, one ONNX call")


def whisper_encode(repeats: int) -> list[dict[str, Any]]:
    import ctranslate2

    from app.backend.models.tiny.asr import WhisperAsr

    asr = WhisperAsr()
    m = asr._model
    x = (0.1 * np.sin(np.arange(3 * 16_000) / 16_000 * 2 * np.pi * 220)).astype(np.float32)
    feats = m.feature_extractor(x, padding=0)[:, : 3 * 16_000 // m.feature_extractor.hop_length]

    def encode(n: int) -> None:
        batch = np.ascontiguousarray(np.stack([feats] * n), dtype=np.float32)
        m.model.encode(ctranslate2.StorageView.from_array(batch), to_cpu=True)

    costs = {n: _time(lambda n=n: encode(n), repeats) for n in SIZES}
    return _rows("whisper_encode", costs, "Whisper base encoder on N 3 s windows, one CTranslate2 call")


def code2wav(repeats: int) -> tuple[list[dict[str, Any]], str]:
    from app.backend.models.tiny.code2wav import DECODER_OUTPUT, SPLIT_TENSOR
    from app.backend.models.tiny.runtime import ort_session
    from app.backend.models.tiny.voice import load_piper_split

    split = load_piper_split()
    session = ort_session(split.decoder_path, 2)
    z = np.random.default_rng(0).standard_normal((1, 192, 43)).astype(np.float32)
    try:
        session.run([DECODER_OUTPUT], {SPLIT_TENSOR: np.concatenate([z, z])})
        how = "one ONNX call with a batch of N"

        def call(n: int) -> None:
            session.run([DECODER_OUTPUT], {SPLIT_TENSOR: np.concatenate([z] * n)})
    except Exception as exc:  # noqa: BLE001 - the graph has no batch dimension: N calls
        how = f"N calls (the graph takes no batch: {type(exc).__name__})"

        def call(n: int) -> None:
            for _ in range(n):
                session.run([DECODER_OUTPUT], {SPLIT_TENSOR: z})
    costs = {n: _time(lambda n=n: call(n), repeats) for n in SIZES}
    return _rows("code2wav", costs, f"HiFi-GAN decoder on N chunks of 43 codec frames, {how}"), how


def render_markdown(result: dict[str, Any]) -> str:
    """The tables of a result of this script (``benchmarks/report.py`` shows them)."""
    lines = ["Cost of one call on N items (per item = call / N; gain = N x one alone / call; above 1 batching pays):",
             "", "| call | " + " | ".join(f"N={n}" for n in SIZES) + " |", "|---|" + "---|" * len(SIZES)]
    kinds: dict[str, dict[int, dict[str, Any]]] = {}
    for row in result.get("rows", []):
        kinds.setdefault(row["kind"], {})[row["n"]] = row
    for kind, by_n in kinds.items():
        cells = []
        for n in SIZES:
            r = by_n.get(n)
            cells.append("" if not r or r["per_item_ms"] is None else
                         f"{r['per_item_ms']:.1f} ms/item, x{r['gain']:.2f}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    rep = result.get("thinker_replies") or {}
    if rep:
        lines += ["", (f"Four replies through the batcher: one after another {rep['one_after_another_ms']:.0f} ms, "
                       f"all at once {rep['at_once_ms']:.0f} ms (x{rep['gain']:.2f}); same texts: "
                       f"{'yes' if rep['same_texts'] else 'NO'}; most replies in one step {rep['max_batch']}.")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="3 repeats per size instead of 15")
    p.add_argument("--result-name", default=NAME)
    args = p.parse_args(argv)
    repeats = 3 if args.quick else 15
    t0 = time.monotonic()
    result = C.base_result(NAME, "Batching model calls across sessions: cost per item on these cores", "#27",
                           quick=args.quick)
    result["reproduce"] = ".venv/bin/python benchmarks/bench_batching.py"
    rows = thinker_steps(repeats * 2) + smart_turn(repeats) + whisper_encode(repeats)
    c2w, how = code2wav(repeats)
    rows += c2w
    result["rows"] = rows
    result["thinker_replies"] = thinker_replies()
    gains = {(r["kind"], r["n"]): r["gain"] for r in rows}
    result["metrics"] = [C.info_metric(f"{kind}_gain4", f"{kind}: 4 items in one call vs one at a time",
                                       gains.get((kind, 4)), "x", detail=next(r["what"] for r in rows
                                                                             if r["kind"] == kind))
                         for kind in ("thinker_step", "smart_turn", "whisper_encode", "code2wav")]
    rep = result["thinker_replies"]
    result["metrics"].append(C.metric("thinker_same_texts", "Replies written together are the replies written alone",
                                      1.0 if rep["same_texts"] else 0.0, "", ">=", 1.0, n=len(QUESTIONS),
                                      detail=f"4 greedy replies; at once x{rep['gain']:.2f} faster"))
    result["notes"] = [f"code2wav: {how}."]
    result["wall_s"] = time.monotonic() - t0
    result["finished_at"] = C.now_iso()
    path = C.write_result(args.result_name, C.round_floats(result))
    print(render_markdown(result))
    print(f"[batching] wrote {path.relative_to(C.ROOT)} in {result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
