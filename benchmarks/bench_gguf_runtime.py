"""GGUF runtime: ``xllamacpp`` (prebuilt wheel) against the compiled ``llama-cpp-python``, on our Gemma GGUF.

Issue #25 asks whether ``xllamacpp`` (MIT, a manylinux2014 abi3 wheel, no compile) can replace
``llama-cpp-python`` (built from source at set-up: minutes on a fresh machine) as the ``tiny``
family's GGUF runtime. Both run the same file (:func:`~app.backend.models.tiny.llm.gemma_gguf_path`,
sha256-checked) on 2 threads with the same prompts, in their own processes, one after the other:

* ``load_s``, RSS after load;
* ``cold_prompt``: our few-shot prompt (:func:`~app.backend.models.tiny.llm.build_prompt`) evaluated
  from an empty cache: ms, tokens, tokens/s;
* ``turns``: one question after another on the same context (the fixed prefix is reused, as every
  turn does): time to first token, reply, streamed with the app's stop strings (``llm.STOP``),
  greedy, ``repeat_penalty`` 1.1, 48 tokens;
* ``decode``: 64 tokens of free text after a warm prefix: decode tokens/s;
* ``early_stop``: the stream is abandoned after 3 pieces: how long until the call returns;
* ``count_tokens``: the prompt's token count and the time to get it;
* ``text_turn``: a second context (n_ctx 256) on the same file scoring utterance ends as
  :mod:`app.backend.models.tiny.text_turn` does (probability of a sentence-end token next).
  llama-cpp-python reads the full logits; xllamacpp returns only the top ``n_probs`` log-probs, so
  the probability is the sum over the end tokens among the top 100.

xllamacpp is installed in a throwaway venv (``.cache/xllamacpp-venv``: ``python3 -m venv`` +
``pip install xllamacpp``), never in the app's ``.venv``. Its ``Server`` always opens an HTTP
listener; here it is bound to a unix socket in a private temporary folder with a random API key.

Run on an idle machine: ``flock -x /tmp/team/cpu.lock .venv/bin/python benchmarks/bench_gguf_runtime.py``
(~1 min). Writes ``benchmarks/results/gguf_runtime.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NAME = "gguf_runtime"
TITLE = "GGUF runtime: xllamacpp wheel vs compiled llama-cpp-python on the Gemma 3 270M GGUF, 2 threads"
ROOT = Path(__file__).resolve().parents[1]
XVENV_PYTHON = ROOT / ".cache" / "xllamacpp-venv" / "bin" / "python"
N_THREADS = 2
QUESTIONS = ("What is the capital of France?", "How many planets are there in our solar system?",
             "What is the weather usually like in London?", "How long should I boil an egg?",
             "How many legs does a spider have?", "Is ice cold?", "What colour is the sky?",
             "What is six times seven?")
TURN_TEXTS = ("I would like to book a table", "I would like to book a table for two people tonight",
              "What is the capital of", "What is the capital of France", "Can you tell me how",
              "Can you tell me how to boil an egg")
DECODE_PROMPT = "Once upon a time, in a small village by the sea, there lived"
TOP_N = 100
"""Log-probs xllamacpp returns for the text end-of-turn score."""


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --------------------------------------------------------------------------- runtimes (children)
class LlamaCppPython:
    """The app's runtime, loaded as the app loads it (``llm.load_gemma``: AMX guard included)."""

    name = "llama-cpp-python"

    def __init__(self, path: str, n_ctx: int) -> None:
        sys.path.insert(0, str(ROOT))
        from app.backend.models.tiny.llm import load_gemma

        self.llm = load_gemma(Path(path), n_ctx=n_ctx, n_threads=N_THREADS, n_batch=min(512, n_ctx))

    def reset(self) -> None:
        self.llm.reset()

    def stream(self, prompt: str, max_tokens: int, stop: list[str], on_piece: Any,
               repeat_penalty: float = 1.1) -> dict[str, Any]:
        pieces = self.llm.create_completion(prompt, stream=True, max_tokens=max_tokens, temperature=0.0, top_k=0,
                                            top_p=1.0, min_p=0.0, repeat_penalty=repeat_penalty, seed=42, stop=stop)
        try:
            for piece in pieces:
                if on_piece(piece["choices"][0]["text"]):
                    break
        finally:
            pieces.close()
        return {}

    def count_tokens(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode(), add_bos=True))

    def end_probability(self, prompt: str, end_ids: list[int]) -> float:
        import llama_cpp
        import numpy as np

        self.llm.reset()
        self.llm.eval(self.llm.tokenize(prompt.encode(), add_bos=True))
        ptr = llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        logits = np.ctypeslib.as_array(ptr, shape=(self.llm.n_vocab(),)).astype(np.float64)
        p = np.exp(logits - logits.max())
        return float(p[end_ids].sum() / p.sum())

    def first_token_ids(self, strings: list[str]) -> list[int]:
        return sorted({self.llm.tokenize(s.encode(), add_bos=False)[0] for s in strings})

    def system_info(self) -> str:
        import llama_cpp

        return llama_cpp.llama_print_system_info().decode(errors="replace")


class XLlamaCpp:
    """``xllamacpp.Server`` in-process, its HTTP listener on a private unix socket with an API key."""

    name = "xllamacpp"

    def __init__(self, path: str, n_ctx: int, swa_full: bool = True) -> None:
        import xllamacpp as xlc

        self.xlc = xlc
        self.dir = tempfile.mkdtemp(prefix="xllamacpp-")
        os.chmod(self.dir, 0o700)
        self.key = secrets.token_hex(16)
        p = xlc.CommonParams()
        p.model.path = path
        p.n_ctx = n_ctx
        p.n_batch = min(512, n_ctx)
        p.n_parallel = 1
        p.cpuparams.n_threads = N_THREADS
        p.cpuparams_batch.n_threads = N_THREADS
        p.verbosity = 0
        p.hostnames = [os.path.join(self.dir, "http.sock")]
        p.api_keys = [self.key]
        p.endpoint_metrics = False
        p.swa_full = swa_full  # (Gemma 3's sliding-window layers: without it no prompt prefix is reused)
        self.server = xlc.Server(p)
        self.listening = self.server.listening_address

    def reset(self) -> None:
        pass  # (per request: "cache_prompt": False)

    def stream(self, prompt: str, max_tokens: int, stop: list[str], on_piece: Any,
               cache_prompt: bool = True, repeat_penalty: float = 1.1) -> dict[str, Any]:
        last: dict[str, Any] = {}

        def cb(chunk: dict[str, Any]) -> bool:
            last.update(chunk)
            text = chunk["choices"][0].get("text") or ""
            return bool(text) and bool(on_piece(text))

        self.server.handle_completions({"prompt": prompt, "max_tokens": max_tokens, "stream": True,
                                        "temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                                        "repeat_penalty": repeat_penalty, "seed": 42, "stop": stop,
                                        "cache_prompt": cache_prompt}, cb)
        return last.get("timings", {})

    def _http(self, route: str, body: dict[str, Any]) -> Any:
        import http.client
        import socket

        sock_path = self.server.listening_address.removeprefix("unix://")

        class Conn(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.connect(sock_path)

        conn = Conn("localhost")
        conn.request("POST", route, json.dumps(body), {"Content-Type": "application/json",
                                                         "Authorization": f"Bearer {self.key}"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())

    def count_tokens(self, text: str) -> int:
        status, body = self._http("/tokenize", {"content": text, "add_special": True})
        if status != 200:
            raise RuntimeError(f"/tokenize answered {status}: {body}")
        return len(body["tokens"])

    def end_probability(self, prompt: str, end_ids: list[int]) -> float:
        r = self.server.handle_completions({"prompt": prompt, "max_tokens": 1, "n_probs": TOP_N,
                                            "temperature": 0.0, "post_sampling_probs": False})
        top = r["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        return float(sum(math.exp(t["logprob"]) for t in top if t["id"] in end_ids))

    def first_token_ids(self, strings: list[str]) -> list[int]:
        ids = set()
        for s in strings:
            _, body = self._http("/tokenize", {"content": s, "add_special": False})
            ids.add(body["tokens"][0])
        return sorted(ids)

    def system_info(self) -> str:
        return self.xlc.get_system_info()


def run_child(runtime: str, work: dict[str, Any]) -> dict[str, Any]:
    """All measurements of one runtime (in this process)."""
    t0 = time.perf_counter()
    cls = LlamaCppPython if runtime == "llama-cpp-python" else XLlamaCpp
    rt = cls(work["gguf"], work["n_ctx"])
    out: dict[str, Any] = {"runtime": runtime, "load_s": time.perf_counter() - t0, "rss_after_load_mib": _rss_mib(),
                           "system_info": rt.system_info()}
    if isinstance(rt, XLlamaCpp):
        out["http_listener"] = rt.listening
    stop = work["stop"]

    def timed(prompt: str, max_tokens: int, stop: list[str], cut_after: int | None = None,
              **kw: Any) -> dict[str, Any]:
        marks: list[float] = []
        text: list[str] = []
        t = time.perf_counter()

        def on_piece(piece: str) -> bool:
            marks.append(time.perf_counter())
            text.append(piece)
            return cut_after is not None and len(marks) >= cut_after

        timings = rt.stream(prompt, max_tokens, stop, on_piece, **kw)
        end = time.perf_counter()
        n = len(marks)
        return {"ttft_s": marks[0] - t if marks else None, "n_pieces": n, "text": "".join(text),
                "decode_tps": (n - 1) / (marks[-1] - marks[0]) if n > 1 and marks[-1] > marks[0] else None,
                "return_after_last_s": end - marks[-1] if marks else None, "wall_s": end - t,
                "server_timings": timings or None}

    # cold prompt: the first question's full prompt from an empty cache, one token out
    rt.reset()
    kw = {"cache_prompt": False} if isinstance(rt, XLlamaCpp) else {}
    first = timed(work["prompts"][0], 1, stop, **kw)
    n_prompt = rt.count_tokens(work["prompts"][0])
    out["cold_prompt"] = {"tokens": n_prompt, "ttft_s": first["ttft_s"],
                          "prompt_tps": n_prompt / first["ttft_s"] if first["ttft_s"] else None,
                          "server_timings": first["server_timings"]}
    # turns: one question after another, the fixed prefix kept
    rt.reset()
    timed(work["prompts"][-1], 4, stop)  # warm-up: the fixed prefix enters the cache
    out["turns"] = [dict(timed(p, 48, stop), question=q) for q, p in zip(work["questions"], work["prompts"])]
    out["turns_repeat_penalty_1"] = [dict(timed(p, 48, stop, repeat_penalty=1.0), question=q)
                                     for q, p in zip(work["questions"], work["prompts"])]
    out["decode"] = [timed(work["decode_prompt"], 64, []) for _ in range(3)]
    out["early_stop"] = [timed(work["decode_prompt"], 64, [], cut_after=3) for _ in range(3)]
    t = time.perf_counter()
    counts = [rt.count_tokens(p) for p in work["prompts"]]
    out["count_tokens"] = {"counts": counts, "ms_per_call": (time.perf_counter() - t) * 1000 / len(counts)}
    if isinstance(rt, XLlamaCpp):  # the same turns on a server left at swa_full = False (its default)
        plain = XLlamaCpp(work["gguf"], work["n_ctx"], swa_full=False)
        saved, rt = rt, plain
        timed(work["prompts"][-1], 4, stop)
        out["turns_swa_full_off"] = [dict(timed(p, 48, stop), question=q)
                                     for q, p in zip(work["questions"][:3], work["prompts"][:3])]
        rt = saved
        del plain
    # text end-of-turn context: a second context on the same file
    rss = _rss_mib()
    t = time.perf_counter()
    turn = cls(work["gguf"], 256)
    out["text_turn"] = {"load_s": time.perf_counter() - t, "rss_added_mib": _rss_mib() - rss}
    end_ids = turn.first_token_ids(work["end_strings"])
    probs, times = [], []
    for prompt in work["turn_prompts"]:
        t = time.perf_counter()
        probs.append(turn.end_probability(prompt, end_ids))
        times.append(time.perf_counter() - t)
    out["text_turn"].update({"end_ids": end_ids, "texts": work["turn_texts"], "end_probability": probs,
                             "ms_per_call": [x * 1000 for x in times]})
    return out


# --------------------------------------------------------------------------- parent
def _workload() -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from app.backend.models.tiny import llm, text_turn
    from app.backend.pipeline.stages import ThinkerPrompt
    from app.constants import DEFAULT_INSTRUCTIONS

    return {"gguf": str(llm.gemma_gguf_path()), "n_ctx": llm.N_CTX, "stop": list(llm.STOP),
            "questions": list(QUESTIONS),
            "prompts": [llm.build_prompt(ThinkerPrompt(DEFAULT_INSTRUCTIONS, [], q)) for q in QUESTIONS],
            "decode_prompt": DECODE_PROMPT, "end_strings": list(text_turn.END_STRINGS),
            "turn_texts": list(TURN_TEXTS), "turn_prompts": [text_turn.PROMPT.format(text=t) for t in TURN_TEXTS]}


def _p50(values: list[float | None]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def summary(res: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers of one runtime's result."""
    return {"load_s": res["load_s"], "rss_after_load_mib": res["rss_after_load_mib"],
            "cold_prompt_tokens": res["cold_prompt"]["tokens"], "cold_prompt_tps": res["cold_prompt"]["prompt_tps"],
            "turn_ttft_p50_s": _p50([t["ttft_s"] for t in res["turns"]]),
            "turn_decode_tps_p50": _p50([t["decode_tps"] for t in res["turns"]]),
            "decode_tps_p50": _p50([d["decode_tps"] for d in res["decode"]]),
            "early_stop_return_p50_s": _p50([e["return_after_last_s"] for e in res["early_stop"]]),
            "count_tokens_ms": res["count_tokens"]["ms_per_call"],
            "text_turn_ms_p50": _p50(res["text_turn"]["ms_per_call"]),
            "turn_ttft_p50_swa_full_off_s": _p50([t["ttft_s"] for t in res.get("turns_swa_full_off", [])])}


_ROWS = (("load_s", "load, s"), ("rss_after_load_mib", "RSS after load, MiB"),
         ("cold_prompt_tps", "cold prompt eval (391 tokens), tokens/s"),
         ("turn_ttft_p50_s", "turn: time to first token p50, s (prefix kept)"),
         ("turn_ttft_p50_swa_full_off_s", "turn: time to first token p50, s, swa_full off"),
         ("turn_decode_tps_p50", "turn: decode tokens/s p50"), ("decode_tps_p50", "64-token decode, tokens/s p50"),
         ("count_tokens_ms", "count tokens, ms a call"), ("text_turn_ms_p50", "text end-of-turn score, ms p50"))


def render_markdown(result: dict[str, Any]) -> str:
    """The runtimes side by side (mean over rounds), for BENCHMARKS.md."""
    runtimes = list(result.get("summary", {}))
    lines = ["| | " + " | ".join(runtimes) + " |", "|---|" + "---|" * len(runtimes)]
    for key, label in _ROWS:
        cells = []
        for rt in runtimes:
            vals = [r.get(key) for r in result["summary"][rt] if r.get(key) is not None]
            cells.append(f"{sum(vals) / len(vals):.3g}" if vals else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    same = result.get("same_greedy_replies", {})
    same1 = result.get("same_greedy_replies_repeat_penalty_1", {})
    lines += ["", (f"Same greedy first line of reply: {same.get('same')}/{same.get('of')} with repeat penalty 1.1, "
              f"{same1.get('same')}/{same1.get('of')} with 1.0 (xllamacpp {result.get('xllamacpp_version')}; "
              f"2 threads; rounds alternate).")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", choices=("llama-cpp-python", "xllamacpp"), help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of both runtimes")
    args = ap.parse_args(argv)
    if args.child:
        work = json.loads(Path(args.work).read_text())
        Path(args.out).write_text(json.dumps(run_child(args.child, work)))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import common as C

    if not XVENV_PYTHON.exists():
        raise SystemExit(f"{XVENV_PYTHON} is missing: python3 -m venv .cache/xllamacpp-venv && "
                         ".cache/xllamacpp-venv/bin/pip install xllamacpp")
    work = _workload()
    tmp = Path(tempfile.mkdtemp(prefix="gguf-runtime-"))
    (tmp / "work.json").write_text(json.dumps(work))
    pythons = {"llama-cpp-python": C.PYTHON, "xllamacpp": str(XVENV_PYTHON)}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in pythons}
    for r in range(args.rounds):
        for runtime, python in pythons.items():
            out = tmp / f"{runtime}-{r}.json"
            t = time.perf_counter()
            subprocess.run([python, __file__, "--child", runtime, "--work", str(tmp / "work.json"), "--out", str(out)],
                           check=True, timeout=600, stderr=subprocess.DEVNULL)
            res = json.loads(out.read_text())
            res["process_wall_s"] = time.perf_counter() - t
            runs[runtime].append(res)
            print(runtime, r, json.dumps(C.round_floats(summary(res), 4)))
    xver = subprocess.run([str(XVENV_PYTHON), "-c", "import xllamacpp; print(xllamacpp.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    data = C.base_result(NAME, TITLE, "#25", quick=args.rounds < 2)
    data["xllamacpp_version"] = xver
    data["gguf"] = {"path": work["gguf"], "sha256_checked": True}
    data["summary"] = {k: [summary(r) for r in v] for k, v in runs.items()}
    data["same_greedy_replies_repeat_penalty_1"] = {"same": sum(
        a["text"].split("\n")[0] == b["text"].split("\n")[0]
        for a, b in zip(runs["llama-cpp-python"][0]["turns_repeat_penalty_1"], runs["xllamacpp"][0]["turns_repeat_penalty_1"])),
        "of": len(QUESTIONS)}
    same = [a["text"].split("\n")[0] == b["text"].split("\n")[0] for a, b in zip(runs["llama-cpp-python"][0]["turns"], runs["xllamacpp"][0]["turns"])]
    data["same_greedy_replies"] = {"same": sum(same), "of": len(same)}
    data["runs"] = runs
    path = C.write_result(NAME, C.round_floats(data, 5))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
