"""In-process vLLM-Omni: MiniCPM-o 4.5 on this machine's GPUs, driven through vLLM-Omni's Python API.

Used when ``model_family: vllm_omni`` has no ``remote:`` section. vLLM-Omni's duplex engine
(``vllm_omni.entrypoints.duplex_omni.DuplexOmni``) is built from the deploy config and each of
our sessions opens an engine-resident session (``DuplexOmni.open_session(config)`` -> handle
with ``submit(cmd)`` / ``events()``). Commands cross as vLLM-Omni's own typed commands
(``translate_realtime_command`` of the wire JSON we would have sent over a socket) and events
come back as ``event.to_realtime()`` dicts, so the session logic is the one
:class:`~app.backend.remote.session.RemoteSession` uses for a remote server.

Everything vLLM is imported lazily: this module imports on machines without it, and
:func:`require_vllm_omni` turns a missing install into a clear start-up error. Not exercised by
the test suite beyond that check (no GPU / vLLM here).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import tempfile
from typing import Any

import yaml

from app.backend.engine import FamilyUnavailable
from app.backend.remote.links import LinkUnavailable

log = logging.getLogger(__name__)

VLLM_MODULES: tuple[str, ...] = ("vllm", "vllm_omni")
"""Python modules the in-process path needs."""

DEFAULT_MODEL = "openbmb/MiniCPM-o-4_5"
"""Model path/id when neither the config's ``model:`` nor ``OMNI_VLLM_MODEL`` is set (a local
directory in production: no downloads)."""

MODEL_ENV = "OMNI_VLLM_MODEL"
"""Environment variable naming the model when the config has no ``model:``."""

_OUR_TOP_KEYS = frozenset({"model_family", "base_config", "server", "limits", "turn_policy", "remote", "ui",
                           "model"})
_OUR_SESSION_KEYS = frozenset({"chunk_period_ms", "max_message_bytes", "inbox_size", "output_buffer_events",
                               "max_context_tokens", "context_watermark_ratio", "max_frames_per_unit"})


def missing_vllm_modules() -> list[str]:
    """The entries of :data:`VLLM_MODULES` that cannot be imported here."""
    missing = []
    for name in VLLM_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def require_vllm_omni() -> None:
    """Check that the in-process path can run.

    Raises:
        FamilyUnavailable: naming the missing modules and the two ways out.
    """
    missing = missing_vllm_modules()
    if missing:
        raise FamilyUnavailable(
            "model_family 'vllm_omni' without a 'remote:' section runs vLLM-Omni in this process, "
            f"which needs the Python modules {', '.join(VLLM_MODULES)}; missing here: {', '.join(missing)}. "
            "Install vLLM and vLLM-Omni on a GPU machine, or point 'remote.url' at a running vLLM-Omni "
            "server (see configs/remote.yaml)."
        )


def vllm_deploy_yaml(config: Any) -> dict[str, Any]:
    """The deploy config without our own sections: what vLLM-Omni's ``--deploy-config`` reads."""
    data = config.model_dump(exclude_none=True)
    for key in _OUR_TOP_KEYS:
        data.pop(key, None)
    data["duplex_session"] = {k: v for k, v in data.get("duplex_session", {}).items() if k not in _OUR_SESSION_KEYS}
    for stage in data.get("stages", []):
        stage.pop("inbox_size", None)
    connectors = data.get("connectors", {})
    for key in ("codec_chunk_frames", "codec_left_context_frames"):  # vLLM-Omni keeps these in named connectors
        connectors.pop(key, None)
    if not connectors:
        data.pop("connectors", None)
    return data


def _error(code: str, message: str, event_id: str | None = None) -> dict[str, Any]:
    error_type = "rate_limit_error" if code in ("resource_exhausted", "duplex_session_busy") else "server_error"
    return {"type": "error", "error": {"type": error_type, "code": code, "message": message, "event_id": event_id}}


class InProcessLink:
    """A :class:`~app.backend.remote.links.Link` to one engine-resident vLLM-Omni session.

    The engine session opens on the first ``session.update`` (like ``autostart=0``). An open
    refusal (``DuplexSessionError``, e.g. ``resource_exhausted``) comes back as an ``error``
    event followed by the end of the link, as a remote server's handshake refusal does.
    """

    def __init__(self, omni: Any) -> None:
        self._omni = omni
        self._handle: Any = None
        self._events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._pump: asyncio.Task[None] | None = None
        self.close_info = ""

    async def open(self) -> None:
        """Nothing to connect in-process."""

    async def send(self, event: dict[str, Any]) -> None:
        """Translate one wire event to a vLLM-Omni command and submit it (refusals become events)."""
        from vllm_omni.engine.duplex.commands import DuplexCommandError
        from vllm_omni.engine.duplex.realtime_commands import translate_realtime_command

        etype = event.get("type")
        if etype == "session.event_ack":
            return  # in-process events are never replayed
        if self._handle is None:
            if etype != "session.update":
                await self._events.put(_error("session_not_configured", "send session.update first",
                                              event.get("event_id")))
                return
            try:
                self._handle = await self._omni.open_session(dict(event.get("session") or {}))
            except Exception as exc:  # noqa: BLE001 - DuplexSessionError (.code) or any open failure
                await self._events.put(_error(getattr(exc, "code", None) or "runtime_open_failed", str(exc)))
                await self._events.put(None)
                return
            self._pump = asyncio.get_running_loop().create_task(self._pump_events())
            return
        try:
            command = translate_realtime_command(event)
        except DuplexCommandError as exc:
            await self._events.put(_error(getattr(exc, "code", "bad_event"), str(exc), event.get("event_id")))
            return
        await self._handle.submit(command)

    async def _pump_events(self) -> None:
        try:
            async for ev in self._handle.events():
                await self._events.put(ev.to_realtime())
        finally:
            self.close_info = f"engine session ended ({getattr(self._handle, 'close_reason', None)})"
            await self._events.put(None)

    async def recv(self) -> dict[str, Any] | None:
        """The next event as wire JSON; ``None`` at the end."""
        return await self._events.get()

    async def close(self) -> None:
        """Close the engine session (best effort)."""
        if self._handle is not None and not getattr(self._handle, "closed", True):
            try:
                await self._handle.close()
            except Exception as exc:  # noqa: BLE001 - best effort
                log.debug("closing the engine session failed: %s", exc)
        if self._pump is not None:
            self._pump.cancel()


class InProcessVllmOmni:
    """vLLM-Omni's duplex engine in this process.

    Args:
        config: the deploy config (its vLLM-Omni keys become the engine's deploy YAML).
        model: model directory or id; default the config's ``model:``, else ``$OMNI_VLLM_MODEL``,
            else :data:`DEFAULT_MODEL`.

    Raises:
        FamilyUnavailable: from :meth:`start` when vLLM / vLLM-Omni are not installed.
    """

    def __init__(self, config: Any, model: str | None = None) -> None:
        self.config = config
        self.model = model or getattr(config, "model", None) or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        self.omni: Any = None
        self._yaml_path: str | None = None

    async def start(self) -> None:
        """Build ``DuplexOmni`` from the deploy config (slow: loads the model on the GPUs)."""
        require_vllm_omni()
        from vllm_omni.entrypoints.duplex_omni import DuplexOmni

        fd, path = tempfile.mkstemp(prefix="omni-deploy-", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(vllm_deploy_yaml(self.config), f, sort_keys=False)
        self._yaml_path = path
        self.omni = DuplexOmni(model=self.model, deploy_config=path, trust_remote_code=True)

    def new_link(self) -> InProcessLink:
        """A link for one new session."""
        if self.omni is None:
            raise RuntimeError("InProcessVllmOmni.start() has not run")
        return InProcessLink(self.omni)

    def healthy(self) -> bool:
        """Whether the engine object exists and reports no fatal error."""
        return self.omni is not None and not getattr(getattr(self.omni, "engine", None), "errored", False)

    async def stop(self) -> None:
        """Shut the engine down and remove the temporary YAML."""
        if self.omni is not None:
            shutdown = getattr(self.omni, "shutdown", None)
            if shutdown is not None:
                result = shutdown()
                if asyncio.iscoroutine(result):
                    await result
        if self._yaml_path is not None:
            try:
                os.unlink(self._yaml_path)
            except OSError:
                pass


class InProcessTarget:
    """The in-process engine as the one place sessions go (the session's ``Target`` API).

    Admission is the engine's: its refusals come back as ``error`` events on the link.
    """

    name = "in-process"
    remote_model: str | None = None

    def __init__(self, owner: InProcessVllmOmni) -> None:
        self._owner = owner
        self.open_sessions = 0

    async def new_link(self) -> InProcessLink:
        """A link to a new engine session.

        Raises:
            LinkUnavailable: the engine has not started.
        """
        try:
            return self._owner.new_link()
        except RuntimeError as exc:
            raise LinkUnavailable(str(exc)) from exc

    def session_opened(self) -> None:
        """Count one more session."""
        self.open_sessions += 1

    def session_closed(self) -> None:
        """Count one fewer."""
        self.open_sessions = max(0, self.open_sessions - 1)

    def admitted(self, seconds: float, caps: dict[str, Any] | None) -> None:
        """Nothing to record in-process."""

    def refused(self) -> None:
        """Nothing to record in-process (the engine keeps its own count)."""

    def lost(self, why: str, *, during_admission: bool = False) -> None:
        """Log it; the engine's health is read from the engine itself."""
        log.warning("in-process vLLM-Omni session lost: %s", why)
