"""Load vLLM-Omni's engine-side duplex protocol (commands, typed events) from its wheel, without vLLM.

The in-process path (:mod:`app.backend.remote.inprocess`) hands vLLM-Omni's duplex engine the
commands ``vllm_omni.engine.duplex.realtime_commands.translate_realtime_command`` makes of our
wire events, and turns the engine's typed events (``vllm_omni.engine.duplex.events``) back into
wire JSON with ``to_realtime()``. Those modules, and ``vllm_omni.protocol`` under them, are pure
Python (numpy, pybase64). Importing them normally would run ``vllm_omni/__init__.py`` and
``vllm_omni/engine/__init__.py``, which import vLLM and torch. So, as
:mod:`tests.compat.vllm_omni_client` does for the client, this harness registers stub parent
packages — ``vllm_omni``, ``vllm_omni.engine``, ``vllm_omni.utils`` — whose ``__path__`` points
into the wheel (Python's zipimport reads the modules straight from it); their ``__init__`` never runs.

One vLLM name is reached: the session-object validator imports the Silero VAD module, whose top
imports ``vllm.logger.init_logger``. For that one import a stand-in ``vllm.logger`` (whose
``init_logger`` is :func:`logging.getLogger`) is placed in :data:`sys.modules` and removed again
afterwards; no model or GPU code runs. Everything past that — ``DuplexOmni``, the engine session
that consumes the commands — needs the GPU engine and is not loaded.

Side effect: the stub packages stay in :data:`sys.modules` for the rest of the process (a real
vLLM-Omni installation must not be imported in the same process).
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from pathlib import Path

from tests.compat.vllm_omni_client import VLLM_OMNI_VERSION, find_wheel

_STUBS = ("vllm_omni", "vllm_omni.engine", "vllm_omni.utils")
MODULES = ("vllm_omni.engine.duplex.commands", "vllm_omni.engine.duplex.realtime_commands",
           "vllm_omni.engine.duplex.events")
"""The wheel modules this harness loads (and returns, by their last name)."""


def _stub(name: str, wheel: Path) -> None:
    path = f"{wheel}/{name.replace('.', '/')}"
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        module.__path__ = []
        module.__package__ = name
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    elif getattr(module, "__file__", None):
        raise RuntimeError(f"a real {name} is already imported ({module.__file__}); use a fresh process")
    if path not in module.__path__:
        module.__path__.append(path)


def load_vllm_omni_engine_protocol(wheel_dir: str | Path, *, version: str | None = VLLM_OMNI_VERSION
                                   ) -> types.SimpleNamespace:
    """Import the engine-side duplex protocol modules of the wheel under stub parent packages.

    Args:
        wheel_dir: folder holding ``vllm_omni-<version>-*.whl``.
        version: wheel version (``None`` = newest present).

    Returns:
        ``SimpleNamespace(commands=..., realtime_commands=..., events=..., wheel=<file name>)``.

    Raises:
        FileNotFoundError: no wheel; RuntimeError: a real ``vllm_omni`` is imported;
        ImportError: a dependency of those modules (numpy, pybase64) is missing.
    """
    wheel = find_wheel(wheel_dir, version)
    for name in _STUBS:
        _stub(name, wheel)
    added = {}
    if "vllm" not in sys.modules:
        vllm = types.ModuleType("vllm")
        vllm.__path__ = []
        vllm_logger = types.ModuleType("vllm.logger")
        vllm_logger.init_logger = logging.getLogger
        added = {"vllm": vllm, "vllm.logger": vllm_logger}
        sys.modules.update(added)
    try:
        importlib.import_module("vllm_omni.engine.duplex.turn_detection")  # the one vLLM-touching import
        loaded = {name.rsplit(".", 1)[1]: importlib.import_module(name) for name in MODULES}
    finally:
        for name in added:
            sys.modules.pop(name, None)
    return types.SimpleNamespace(**loaded, wheel=wheel.name)
