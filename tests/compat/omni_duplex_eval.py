"""Load vLLM-Omni's Omni-DuplexEval modules (``vllm_omni/benchmarks/duplex/``) from its wheel, without vLLM.

The benchmark's generate/evaluate/summarize code needs only the standard library, PyAV, PIL,
``pybase64``, ``requests``, ``websockets`` and a few pure-Python siblings in the wheel
(``vllm_omni/experimental/fullduplex/client.py``, ``vllm_omni/clients/duplex.py``,
``vllm_omni/benchmarks/duplex_session_metrics.py``, ``vllm_omni/metrics/definitions.py``). They
are imported from the wheel itself (Python imports from a zip as from a folder) under stub parent
packages (``vllm_omni``, ``vllm_omni.clients``, ``vllm_omni.experimental``,
``vllm_omni.experimental.fullduplex``, ``vllm_omni.metrics``, the namespace ``vllm_omni.benchmarks``) whose ``__path__`` points into the
wheel, so the submodules load from it while the package ``__init__`` files, which import vLLM,
torch and Prometheus, never run.

Its third-party imports (``regex``, ``prettytable``, PyAV, ``requests``, ``pybase64``,
``websockets``) are the real packages, from the ``dev`` extras.

Like :mod:`tests.compat.vllm_omni_client`, the stubs stay in ``sys.modules`` for the process.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from tests.compat.vllm_omni_client import VLLM_OMNI_VERSION, find_wheel

_STUB_PACKAGES = ("vllm_omni", "vllm_omni.benchmarks", "vllm_omni.clients", "vllm_omni.experimental", "vllm_omni.experimental.fullduplex",
                  "vllm_omni.metrics")
_MODULES = ("vllm_omni.benchmarks.duplex.omni_duplex_eval_dataset", "vllm_omni.benchmarks.duplex.omni_duplex_eval_runner",
            "vllm_omni.benchmarks.duplex.omni_duplex_eval_eval", "vllm_omni.benchmarks.duplex.omni_duplex_eval_judge",
            "vllm_omni.benchmarks.duplex.omni_duplex_eval_metrics", "vllm_omni.benchmarks.duplex.omni_duplex_eval_clock")


def _stub(name: str, wheel: Path) -> None:
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None):
        raise RuntimeError(f"a real {name} is already imported ({module.__file__}); use a fresh process")
    if module is None:
        module = types.ModuleType(name)
        module.__package__ = name
        sys.modules[name] = module
        if "." in name:
            parent, _, leaf = name.rpartition(".")
            setattr(sys.modules[parent], leaf, module)
    folder = f"{wheel}/{name.replace('.', '/')}"
    module.__path__ = [*getattr(module, "__path__", []), folder] if folder not in getattr(module, "__path__", []) \
        else module.__path__


def load_omni_duplex_eval(wheel_dir: str | Path, *, version: str | None = VLLM_OMNI_VERSION) -> types.SimpleNamespace:
    """Import the Omni-DuplexEval modules from the wheel in ``wheel_dir``.

    Returns:
        A namespace with ``dataset``, ``runner``, ``eval``, ``judge``, ``metrics``, ``clock`` (the
        ``omni_duplex_eval_*`` modules) and ``wheel`` (its path). ``runner.generate_sample``,
        ``eval.evaluate_sample``, ``eval.summarize_scores``, ``judge.DuplexJudge`` and
        ``dataset.load_samples`` are the entry points the benchmark's CLI calls.

    Raises:
        FileNotFoundError: no wheel (the message gives the pip command).
        RuntimeError: a real ``vllm_omni`` is already imported in this process.
        ImportError: one of the third-party packages above is missing (``scripts/setup.sh --dev``).
    """
    wheel = find_wheel(wheel_dir, version)
    for name in _STUB_PACKAGES:
        _stub(name, wheel)
    import importlib

    mods = {name.rsplit("_", 1)[1]: importlib.import_module(name) for name in _MODULES}
    importlib.import_module("vllm_omni.benchmarks.duplex_session_metrics")
    return types.SimpleNamespace(wheel=wheel, **mods)
