"""Shared helpers of ``bench_chat.py`` and ``bench_duplex.py``.

* machine and version facts written into every result file;
* ``p50``/``p95``/``mean``/``min``/``max`` summaries;
* a server subprocess (``python -m app serve --no-ui --host 127.0.0.1 --port <free>``, env
  ``HF_HUB_OFFLINE=1``) that is started, polled on ``/health`` and stopped;
* a temporary deploy YAML overlaying ``configs/tiny.yaml`` (``base_config``);
* peak-RSS probes of a process (``/proc/<pid>/status`` ``VmHWM``/``VmRSS``; ``psutil`` when
  installed);
* spoken test inputs made with Debian's espeak-ng (voice ``en``, 160 wpm: the same recipe as
  ``tests/conftest.py::espeak_wav``), cached in the system temp folder;
* writing ``benchmarks/results/<name>.json``.

Everything talks to ``127.0.0.1`` only. Times are ``time.monotonic()`` / ``time.perf_counter()``
seconds unless a name ends in ``_ms``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Self

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable))
SPEECH_CACHE = Path(tempfile.gettempdir()) / "omni-bench-speech"
TINY_YAML = ROOT / "configs" / "tiny.yaml"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Loopback only: never let an inherited proxy setting route 127.0.0.1 traffic elsewhere.
for _var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
    os.environ.pop(_var, None)
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

KEY_PACKAGES = (
    "onnxruntime",
    "ctranslate2",
    "faster-whisper",
    "llama-cpp-python",
    "piper-tts",
    "fastapi",
    "uvicorn",
    "numpy",
    "websockets",
    "httpx",
    "soxr",
    "psutil",
)


# --------------------------------------------------------------------------- facts
def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _meminfo_kib(key: str) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def _os_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    return platform.system()


def machine_info() -> dict[str, Any]:
    """CPU model, cores, RAM, OS, kernel, and the load average when the run started."""
    total = _meminfo_kib("MemTotal")
    avail = _meminfo_kib("MemAvailable")
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        load = None
    return {
        "cpu_model": _cpu_model(),
        "cores_logical": os.cpu_count(),
        "cores_usable": usable,
        "ram_total_gib": round(total / 1024 / 1024, 2) if total else None,
        "ram_available_gib_at_start": round(avail / 1024 / 1024, 2) if avail else None,
        "os": _os_name(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "loadavg_1_5_15_at_start": load,
    }


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def tree_commit(tree: Path | str) -> str | None:
    """The short commit checked out in another checkout ``tree`` (a baseline), or None."""
    try:
        out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def versions() -> dict[str, Any]:
    """Python, key package versions (``None`` = not installed) and our git commit."""
    pkgs: dict[str, str | None] = {}
    for name in KEY_PACKAGES:
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pkgs[name] = None
    status = _git("status", "--porcelain")
    return {
        "python": platform.python_version(),
        "python_executable": PYTHON,
        "packages": pkgs,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
    }


def now_iso() -> str:
    """UTC time, ISO 8601, seconds."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def command_line() -> str:
    """How this script was invoked, as a shell line relative to the repo root."""
    script = Path(sys.argv[0]).resolve()
    with contextlib.suppress(ValueError):
        script = script.relative_to(ROOT)
    return shlex.join([".venv/bin/python", str(script), *sys.argv[1:]])


# --------------------------------------------------------------------------- statistics
def summarize(values: Iterable[float | None]) -> dict[str, Any]:
    """``n``, ``p50``, ``p95``, ``mean``, ``min``, ``max`` of the non-``None`` values.

    Percentiles interpolate linearly between closest ranks (numpy's default), so with N=10
    ``p95`` lies between the 9th and 10th smallest sample. Empty input gives ``n: 0`` and
    ``None`` for the rest.
    """
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"n": 0, "p50": None, "p95": None, "mean": None, "min": None, "max": None}
    arr = np.asarray(vals)
    return {
        "n": len(vals),
        "p50": float(np.percentile(arr, 50)),
        "p95": float(np.percentile(arr, 95)),
        "mean": float(arr.mean()),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }


def wilson_interval(k: int, n: int, z: float = 1.959964) -> tuple[float | None, float | None]:
    """Wilson score interval of a rate ``k/n`` (95 % by default); ``(None, None)`` when ``n == 0``."""
    if n <= 0:
        return None, None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k: int, n: int) -> dict[str, Any]:
    """``{k, n, rate, ci95: [lo, hi]}`` with the Wilson interval (``rate`` ``None`` when ``n == 0``)."""
    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": (k / n) if n else None, "ci95": [lo, hi], "interval": "Wilson score, 95 %"}


def quantile_ci(values: Iterable[float | None], q: float, conf: float = 0.95) -> tuple[float | None, float | None]:
    """Distribution-free interval for the ``q`` quantile from order statistics.

    The interval is ``[x_(l), x_(u)]`` (1-based ranks of the sorted samples) with ``l`` the
    largest rank such that ``P(B < l) <= (1-conf)/2`` and ``u`` the smallest such that
    ``P(B >= u) <= (1-conf)/2``, ``B ~ Binomial(n, q)``; so it covers the true quantile with
    probability >= ``conf``. A bound that would need a rank outside ``1..n`` is ``None`` (e.g.
    the upper bound of p95 needs n >= 59).
    """
    from math import comb

    vals = sorted(float(v) for v in values if v is not None)
    n = len(vals)
    if n == 0:
        return None, None
    alpha = (1 - conf) / 2
    pmf = [comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(n + 1)]
    cdf = np.cumsum(pmf)  # cdf[i] = P(B <= i)
    lo_rank = None
    for rank in range(1, n + 1):  # P(B < rank) = P(B <= rank-1)
        if cdf[rank - 1] <= alpha:
            lo_rank = rank
    hi_rank = None
    for rank in range(1, n + 1):  # P(B >= rank) = 1 - P(B <= rank-1)
        if 1 - cdf[rank - 1] <= alpha:
            hi_rank = rank
            break
    return (vals[lo_rank - 1] if lo_rank else None, vals[hi_rank - 1] if hi_rank else None)


def summarize_ci(values: Iterable[float | None]) -> dict[str, Any]:
    """:func:`summarize` plus order-statistic 95 % intervals of p50 and p95 (``p50_ci95``, ``p95_ci95``)."""
    vals = [v for v in values if v is not None]
    out = summarize(vals)
    out["p50_ci95"] = list(quantile_ci(vals, 0.5))
    out["p95_ci95"] = list(quantile_ci(vals, 0.95))
    return out


def info_metric(mid: str, name: str, value: float | None, unit: str, *, detail: str = "",
                n: int | None = None) -> dict[str, Any]:
    """A headline number without a target (``target`` "-", ``pass`` ``None``)."""
    return {"id": mid, "name": name, "value": value, "unit": unit, "op": None, "threshold": None, "target": "-",
            "pass": None, "n": n, "detail": detail}


def metric(
    mid: str,
    name: str,
    value: float | None,
    unit: str,
    op: str,
    threshold: float,
    *,
    detail: str = "",
    n: int | None = None,
) -> dict[str, Any]:
    """One headline number with its target: ``pass`` is ``None`` when nothing was measured."""
    if value is None:
        ok = None
    elif op == "<=":
        ok = value <= threshold
    elif op == ">=":
        ok = value >= threshold
    else:  # pragma: no cover - programming error
        raise ValueError(op)
    return {
        "id": mid,
        "name": name,
        "value": value,
        "unit": unit,
        "op": op,
        "threshold": threshold,
        "target": f"{op} {threshold:g} {unit}".strip(),
        "pass": ok,
        "n": n,
        "detail": detail,
    }


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write ``benchmarks/results/<name>.json`` (pretty, UTF-8) and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=_json_default) + "\n", encoding="utf-8")
    return path


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def base_result(name: str, title: str, issue: str, *, quick: bool) -> dict[str, Any]:
    """The common head of a result file."""
    return {
        "benchmark": name,
        "title": title,
        "issue": issue,
        "quick": quick,
        "command": command_line(),
        "started_at": now_iso(),
        "machine": machine_info(),
        "versions": versions(),
    }


# --------------------------------------------------------------------------- processes
def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_deploy_yaml(overrides: dict[str, Any], directory: Path | None = None, tree: str | Path | None = None) -> Path:
    """A temporary deploy YAML: ``base_config: <repo>/configs/tiny.yaml`` plus ``overrides``.

    ``tree``: another checkout whose server will read it (``ServerProcess(tree=...)``): its own
    ``configs/tiny.yaml`` is the base (an older tree's schema may lack keys this one has).

    ``overrides`` are top-level sections, e.g. ``{"duplex_session": {"chunk_period_ms": 500}}``;
    the loader merges our sections key by key and ``stages`` entry by entry on ``stage_id``.
    """
    import yaml

    directory = directory or Path(tempfile.mkdtemp(prefix="omni-bench-"))
    path = directory / "deploy.yaml"
    base = Path(tree) / "configs" / "tiny.yaml" if tree is not None else TINY_YAML
    path.write_text(yaml.safe_dump({"base_config": str(base), **overrides}, sort_keys=False), encoding="utf-8")
    return path


class ServerProcess:
    """``python -m app serve --no-ui`` as a subprocess on a free loopback port.

    Args:
        deploy_config: optional deploy YAML path.
        stage_overrides: optional ``--stage-overrides`` JSON (dict, serialised here).
        log_path: where stdout/stderr go (default: a temp file).
        tree: run the app of another checkout of this repository (e.g. a ``git worktree`` of an
            older commit, for old-vs-new runs): its folder is the working directory and
            ``PYTHONPATH``; the interpreter (this repository's venv) is shared.
        env: extra environment variables of the server process (e.g. ``OMNI_PAGE_TRACE=1``).
        wrap: a command prefix (e.g. ``["ip", "netns", "exec", "omni-b"]``: the server runs
            inside a network namespace).

    Attributes:
        launched_at: ``time.monotonic()`` just before ``Popen``.
        ready_at: ``time.monotonic()`` when ``/health`` first answered 200.
    """

    def __init__(
        self,
        *,
        deploy_config: Path | str | None = None,
        stage_overrides: dict[str, Any] | None = None,
        log_path: Path | None = None,
        tree: Path | str | None = None,
        env: dict[str, str] | None = None,
        wrap: Sequence[str] = (),
    ) -> None:
        self.tree = Path(tree).resolve() if tree is not None else None
        self.env = dict(env or {})
        self.wrap = list(wrap)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.args = [PYTHON, "-m", "app", "serve", "--no-ui", "--host", "127.0.0.1", "--port", str(self.port),
                     "--log-level", "warning"]
        if deploy_config is not None:
            self.args += ["--deploy-config", str(deploy_config)]
        if stage_overrides is not None:
            self.args += ["--stage-overrides", json.dumps(stage_overrides)]
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="omni-bench-server-", suffix=".log")[1])
        self.proc: subprocess.Popen[bytes] | None = None
        self.launched_at: float | None = None
        self.ready_at: float | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def command(self) -> str:
        """The launch command, relative to the repo root."""
        args = list(self.args)
        with contextlib.suppress(ValueError):
            args[0] = str(Path(args[0]).relative_to(ROOT))
        prefix = f"cd {self.tree} && PYTHONPATH={self.tree} " if self.tree is not None else ""
        prefix += "".join(f"{k}={shlex.quote(v)} " for k, v in self.env.items())
        return prefix + shlex.join(self.wrap + args)

    def start(self, timeout_s: float = 180.0, poll_s: float = 0.05) -> float:
        """Launch and wait for ``/health`` 200; returns seconds from launch to ready.

        Raises:
            RuntimeError: the process exited or stayed unhealthy for ``timeout_s``.
        """
        import httpx

        env = dict(os.environ)
        env["HF_HUB_OFFLINE"] = "1"
        if self.tree is not None:
            env["PYTHONPATH"] = str(self.tree)
        env.update(self.env)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log = log
        self.launched_at = time.monotonic()
        self.proc = subprocess.Popen(self.wrap + self.args, cwd=self.tree or ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = self.launched_at + timeout_s
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with {self.proc.returncode}; log: {self.log_path}\n"
                                       f"{self.log_tail()}")
                try:
                    if client.get(self.base_url + "/health").status_code == 200:
                        self.ready_at = time.monotonic()
                        return self.ready_at - self.launched_at
                except httpx.HTTPError:
                    pass
                time.sleep(poll_s)
        self.stop()
        raise RuntimeError(f"server not healthy after {timeout_s} s; log: {self.log_path}")

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGINT (uvicorn's graceful stop), then SIGTERM, then SIGKILL; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGINT, timeout_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(sig)
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        with contextlib.suppress(Exception):
            self._log.close()
        return self.proc.returncode

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- memory
def _status_kib(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                kids += [int(x) for x in (task / "children").read_text().split()]
    return kids


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += _children(p)
    return seen


def reset_peak_rss(pid: int) -> bool:
    """Reset ``VmHWM`` of ``pid`` to its current RSS (``echo 5 > /proc/<pid>/clear_refs``, Linux >= 4.0)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class RssSampler:
    """Samples the RSS of a process tree every ``interval_s`` on a thread, bounded by ``max_samples``.

    Uses ``psutil`` when installed, else ``/proc/<pid>/status``. ``peak_bytes`` is the largest
    sampled tree RSS; ``hwm_bytes()`` reads the kernel's exact peak of the main process.
    """

    def __init__(self, pid: int, interval_s: float = 0.1, max_samples: int = 20_000) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.max_samples = max_samples
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="rss-sampler")
        try:
            import psutil  # noqa: F401

            self.source = "psutil"
        except ImportError:
            self.source = "/proc/<pid>/status VmRSS"

    def tree_rss_bytes(self) -> int:
        if self.source == "psutil":
            import psutil

            try:
                proc = psutil.Process(self.pid)
                procs = [proc, *proc.children(recursive=True)]
                return sum(p.memory_info().rss for p in procs)
            except psutil.Error:
                return 0
        return sum(_status_kib(p).get("VmRSS", 0) for p in process_tree(self.pid)) * 1024

    def hwm_bytes(self) -> int | None:
        kib = _status_kib(self.pid).get("VmHWM")
        return None if kib is None else kib * 1024

    def _loop(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set() and len(self.samples) < self.max_samples:
            self.samples.append((time.monotonic() - t0, self.tree_rss_bytes()))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def peak_bytes(self) -> int:
        return max((b for _, b in self.samples), default=0)


# --------------------------------------------------------------------------- speech inputs
def espeak_wav(text: str, name: str, *, rate_wpm: int = 160, lead_s: float = 0.0, tail_s: float = 0.0) -> Path:
    """``text`` spoken by espeak-ng (voice ``en``), as a 16 kHz mono PCM16 WAV, cached by ``name``.

    Same recipe as ``tests/conftest.py::espeak_wav`` (espeak-ng, then sox resample + pad).
    """
    key = f"{name}-{rate_wpm}-{lead_s:g}-{tail_s:g}.wav"
    path = SPEECH_CACHE / key
    if path.exists():
        return path
    SPEECH_CACHE.mkdir(parents=True, exist_ok=True)
    raw = path.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-v", "en", "-s", str(rate_wpm), "-w", str(raw), text], check=True,
                   capture_output=True)
    subprocess.run(["sox", "-D", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(path), "pad", str(lead_s),
                    str(tail_s)], check=True, capture_output=True)
    raw.unlink()
    return path


def wav_pcm16(path: Path) -> bytes:
    """PCM16 bytes of a 16 kHz mono WAV."""
    import soundfile as sf

    from app.constants import INPUT_SAMPLE_RATE_HZ
    from app.media import float_to_pcm16

    audio, rate = sf.read(str(path), dtype="float32")
    if rate != INPUT_SAMPLE_RATE_HZ or audio.ndim != 1:
        raise ValueError(f"{path}: expected 16 kHz mono, got {rate} Hz, shape {audio.shape}")
    return float_to_pcm16(audio)


def silence_pcm16(seconds: float) -> bytes:
    """PCM16 silence at 16 kHz."""
    return b"\x00\x00" * round(seconds * 16_000)


def pcm16_seconds(pcm: bytes) -> float:
    """Duration of 16 kHz PCM16, seconds."""
    return len(pcm) / 2 / 16_000


def detect_speech_start_ms(pcm16: bytes, sample_rate_hz: int = 16_000) -> float | None:
    """Start of the first speech frame (``app.client.latency.detect_speech_start_ms``)."""
    from app.client.latency import detect_speech_start_ms as start

    return start(pcm16, sample_rate_hz)


Sample = tuple[str, tuple[tuple[str, str], ...]]
"""A Prometheus sample's name and its sorted ``(label, value)`` pairs."""


def scrape_metrics(base_url: str, prefix: str = "omni_") -> dict[Sample, float]:
    """A server's ``GET /metrics`` as ``{(name, labels): value}`` for the samples whose name starts
    with ``prefix`` (prometheus_client's text parser; a 404 or no server gives ``{}``)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    try:
        r = httpx.get(base_url + "/metrics", timeout=5.0, trust_env=False)
    except httpx.HTTPError:
        return {}
    if r.status_code != 200:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples if s.name.startswith(prefix)}


CORE_FIELDS = {"omni_cores_calls_total": "calls", "omni_cores_wait_seconds_total": "wait_s",
               "omni_cores_hold_seconds_total": "hold_s"}
"""``omni_cores_*`` counters -> the :func:`core_use_delta` row field they fill."""


def core_use_delta(before: dict[Sample, float], after: dict[Sample, float]) -> list[dict[str, Any]]:
    """What each kind of model call took of the cores between two :func:`scrape_metrics` of one
    server (``omni_cores_*``): rows ``{priority, work, calls, wait_s, hold_s, wait_ms_mean}``,
    most waiting first; ``[]`` for a server without these metrics."""
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    for (name, labels), value in after.items():
        if name in CORE_FIELDS:
            lab = dict(labels)
            row = rows.setdefault(labels, {"priority": lab.get("priority"), "work": lab.get("work")})
            row[CORE_FIELDS[name]] = value - before.get((name, labels), 0.0)
    for row in rows.values():
        calls = row.get("calls", 0.0)
        row["wait_ms_mean"] = 1000.0 * row.get("wait_s", 0.0) / calls if calls else None
    return sorted(rows.values(), key=lambda r: -r.get("wait_s", 0.0))


def round_floats(obj: Any, ndigits: int = 4) -> Any:
    """Round every float in a JSON-like structure (keeps result files readable)."""
    if isinstance(obj, float):
        return round(obj, ndigits)
    if isinstance(obj, dict):
        return {k: round_floats(v, ndigits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [round_floats(v, ndigits) for v in obj]
    return obj


def fmt_s(value: float | None, unit: str = "s", digits: int = 3) -> str:
    """``1.234 s`` or ``n/a``."""
    return "n/a" if value is None else f"{value:.{digits}f} {unit}"


def print_metrics(metrics: Sequence[dict[str, Any]]) -> None:
    """One line per headline metric on stdout."""
    for m in metrics:
        verdict = {True: "PASS", False: "MISS", None: "n/a"}[m["pass"]]
        value = "n/a" if m["value"] is None else f"{m['value']:.4g} {m['unit']}"
        print(f"  {m['name']}: {value} (target {m['target']}) {verdict}", flush=True)
