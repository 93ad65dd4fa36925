"""Load vLLM-Omni's own duplex client from its PyPI wheel, without vLLM.

``vllm_omni/clients/duplex.py`` needs only the standard library, ``pybase64``, ``websockets`` and
its sibling ``vllm_omni/clients/utils.py`` (stdlib only). Importing it normally would run
``vllm_omni/__init__.py``, which imports vLLM (and torch). So this harness reads the two module
sources straight out of the wheel with :mod:`zipfile`, registers stub parent packages
(``types.ModuleType("vllm_omni")`` and ``vllm_omni.clients``) in :data:`sys.modules`, and
executes the sources as ``vllm_omni.clients.utils`` and ``vllm_omni.clients.duplex``. The
package ``__init__`` never runs.

Get the wheel once (no dependencies are installed; it is only read)::

    python -m pip download --no-deps vllm-omni==0.30.0 -d .cache/wheels

(:data:`PIP_DOWNLOAD_COMMAND`; :func:`download_wheel` runs it). Tests look in
``$VLLM_OMNI_WHEEL_DIR`` or ``<repo>/.cache/wheels`` and skip when no wheel is there.

Side effect to know about: the stub ``vllm_omni`` package stays in ``sys.modules`` for the rest
of the process (a real vLLM-Omni installation must not be imported in the same process).
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

VLLM_OMNI_VERSION = "0.30.0"
"""The wheel version this harness was written and checked against."""

PIP_DOWNLOAD_COMMAND = (
    f"python -m pip download --no-deps vllm-omni=={VLLM_OMNI_VERSION} -d .cache/wheels"
)
"""The setup command (run from the repository root)."""

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WHEEL_DIR = REPO_ROOT / ".cache" / "wheels"

_MODULES = ("vllm_omni.clients.utils", "vllm_omni.clients.duplex")
_LOADED_FROM = "__loaded_from_wheel__"


def wheel_dir_from_env() -> Path:
    """``$VLLM_OMNI_WHEEL_DIR`` if set, else ``<repo>/.cache/wheels``."""
    return Path(os.environ.get("VLLM_OMNI_WHEEL_DIR") or DEFAULT_WHEEL_DIR)


def find_wheel(wheel_dir: str | Path, version: str | None = VLLM_OMNI_VERSION) -> Path:
    """The vLLM-Omni wheel in ``wheel_dir``.

    Args:
        wheel_dir: folder holding ``vllm_omni-<version>-*.whl``.
        version: exact version wanted; ``None`` takes the lexically newest wheel there.

    Raises:
        FileNotFoundError: no matching wheel (the message gives the pip command).
    """
    pattern = f"vllm_omni-{version}-*.whl" if version else "vllm_omni-*.whl"
    wheels = sorted(Path(wheel_dir).glob(pattern))
    if not wheels:
        raise FileNotFoundError(f"no {pattern} in {wheel_dir}; run: {PIP_DOWNLOAD_COMMAND}")
    return wheels[-1]


def skip_module_without_wheel() -> Path:
    """The wheel (:func:`find_wheel` in :func:`wheel_dir_from_env`), or skip the calling test module
    with the pip command to fetch it (``scripts/setup.sh`` always downloads it, so CI never skips)."""
    import pytest

    try:
        return find_wheel(wheel_dir_from_env())
    except FileNotFoundError:
        pytest.skip(f"vLLM-Omni wheel not present; run: {PIP_DOWNLOAD_COMMAND}", allow_module_level=True)


def download_wheel(
    wheel_dir: str | Path = DEFAULT_WHEEL_DIR, version: str = VLLM_OMNI_VERSION
) -> Path:
    """Run ``pip download --no-deps vllm-omni==<version> -d <wheel_dir>``; returns the wheel path.

    Raises:
        subprocess.CalledProcessError: pip failed (e.g. no network).
    """
    Path(wheel_dir).mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            f"vllm-omni=={version}",
            "-d",
            str(wheel_dir),
        ],
        check=True,
    )
    return find_wheel(wheel_dir, version)


def _stub_package(name: str) -> types.ModuleType:
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        module.__path__ = []  # a package, with nothing importable from disk
        module.__package__ = name
        sys.modules[name] = module
    elif getattr(module, "__file__", None):
        raise RuntimeError(
            f"a real {name} is already imported ({module.__file__}); use a fresh process"
        )
    return module


def load_vllm_omni_duplex_client(
    wheel_dir: str | Path,
    *,
    version: str | None = VLLM_OMNI_VERSION,
    base64_fallback: bool = True,
) -> types.ModuleType:
    """Load ``vllm_omni.clients.duplex`` from the wheel under stub parent packages.

    Loading twice returns the module already loaded.

    Args:
        wheel_dir: folder holding the wheel (see :func:`find_wheel`).
        version: wheel version to use (``None`` = newest present).
        base64_fallback: when ``pybase64`` is not installed, let the module's
            ``import pybase64 as base64`` bind the standard library :mod:`base64` (same
            ``b64encode``/``b64decode`` calls); ``False`` raises ``ImportError`` instead. The
            fallback is scoped to this load: ``pybase64`` is not left in ``sys.modules``.

    Returns:
        The executed ``vllm_omni.clients.duplex`` module (``DuplexClient``, ``SessionConfig``,
        ``EventCollector``, ``build_realtime_url`` ...); ``module.__wheel__`` names the wheel.

    Raises:
        FileNotFoundError: no wheel; ImportError: ``websockets`` missing, or ``pybase64``
        missing with ``base64_fallback=False``; RuntimeError: a real ``vllm_omni`` is imported.
    """
    loaded = sys.modules.get("vllm_omni.clients.duplex")
    if loaded is not None and getattr(loaded, _LOADED_FROM, None):
        return loaded
    import websockets  # noqa: F401 - fail early with a clear ImportError

    wheel = find_wheel(wheel_dir, version)
    with zipfile.ZipFile(wheel) as archive:
        sources = {
            name: archive.read(name.replace(".", "/") + ".py").decode("utf-8") for name in _MODULES
        }
    parent = _stub_package("vllm_omni")
    clients = _stub_package("vllm_omni.clients")
    parent.clients = clients
    shimmed = False
    try:
        import pybase64  # noqa: F401
    except ImportError:
        if not base64_fallback:
            raise
        sys.modules["pybase64"] = base64
        shimmed = True
    try:
        for name in _MODULES:
            module = types.ModuleType(name)
            module.__file__ = f"{wheel}!/{name.replace('.', '/')}.py"
            module.__package__ = "vllm_omni.clients"
            setattr(module, _LOADED_FROM, str(wheel))
            module.__wheel__ = wheel.name
            module.__pybase64_is_stdlib__ = shimmed
            sys.modules[name] = module  # before exec: dataclasses look their module up here
            try:
                exec(compile(sources[name], module.__file__, "exec"), module.__dict__)  # noqa: S102
            except BaseException:
                sys.modules.pop(name, None)
                raise
            setattr(clients, name.rsplit(".", 1)[1], module)
    finally:
        if shimmed:
            sys.modules.pop("pybase64", None)
    return sys.modules["vllm_omni.clients.duplex"]


async def drive_vllm_client(
    duplex: types.ModuleType,
    url: str,
    model: str,
    pcm16: bytes,
    *,
    ref_audio: str | None = None,
    chunk_ms: int = 200,
    realtime: bool = False,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """One vLLM-Omni-client session: handshake, stream, commit, await a decision, close.

    Uses only the loaded module's public API (``DuplexClient``, ``SessionConfig``,
    ``EventCollector``, ``wait_for_condition``), the way vLLM-Omni's own demo does.

    Args:
        duplex: the module from :func:`load_vllm_omni_duplex_client`.
        url: ``ws://`` base of the server (the vLLM client does not rewrite ``http://``).
        model: served model name.
        pcm16: 16 kHz mono PCM16 input.
        ref_audio: data URL of a reference voice, if the server needs one.
        chunk_ms, realtime: passed to ``stream_pcm``.
        timeout_s: limit for ``input_audio_buffer.committed`` plus the decision.

    Returns:
        ``{"session_id", "events" (raw dicts with _client_received_at_s), "decision"
        ("speak"|"listen"|None), "committed" (bool)}``.
    """
    config = duplex.SessionConfig(ref_audio=ref_audio)
    client = duplex.DuplexClient(url, model=model, config=config, reconnect=None)
    collector = duplex.EventCollector()
    result: dict[str, Any] = {
        "session_id": None,
        "events": collector.events,
        "decision": None,
        "committed": False,
    }
    async with client:
        consumer = asyncio.create_task(collector.consume(client))
        await client.stream_pcm(pcm16, chunk_ms=chunk_ms, realtime=realtime)
        start = len(collector.events)
        await client.commit()

        def after_commit(types_: set[str]) -> list[dict[str, Any]]:
            return [e for e in collector.events[start:] if e.get("type") in types_]

        await duplex.wait_for_condition(
            lambda: bool(after_commit({"input_audio_buffer.committed", "error"})),
            timeout_s=timeout_s,
            label="input_audio_buffer.committed",
        )
        result["committed"] = bool(after_commit({"input_audio_buffer.committed"}))

        def decided() -> str | None:
            # only events after `committed`: listens of units the server closed before the
            # commit may still arrive after it was sent (appends are processed asynchronously)
            types_seen = [e.get("type") for e in collector.events]
            first = types_seen.index("input_audio_buffer.committed") + 1
            for event in collector.events[first:]:
                if event.get("type") not in ("response.listen", "response.done"):
                    continue
                if event["type"] == "response.listen":
                    return "listen"
                if (event.get("response") or {}).get("status") != "cancelled":
                    return "speak"
            return None

        if result["committed"]:
            await duplex.wait_for_condition(
                lambda: decided() is not None, timeout_s=timeout_s, label="decision"
            )
        result["decision"] = decided()
        result["session_id"] = client.session_id
    await asyncio.wait_for(consumer, timeout_s)
    return result
