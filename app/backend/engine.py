"""The engine: a loaded model family, its pipeline, the session manager and metrics.

The API routers and the WebRTC handler use only this object. Families are found by the
deploy config's ``model_family``; everything after loading branches on capabilities.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

from app.backend.duplex.manager import SessionManager
from app.backend.duplex.recorder import recorder_factory
from app.backend.duplex.session import DuplexSession, SessionDeps
from app.backend.metrics import EngineMetrics
from app.backend.pipeline.stages import ModelFamily
from app.backend.pipeline.workers import Pipeline, in_passing_thread
from app.backend.turns.factory import (
    NEEDS_SCORER,
    DetectorUnavailable,
    detector_factory,
)
from app.constants import FIRST_UNIT_EXTRA_MS, INPUT_SAMPLE_RATE_HZ

log = logging.getLogger(__name__)

FAMILY_LOADERS: dict[str, str] = {
    "tiny": "app.backend.models.tiny.family:load_tiny_family",
}
"""``model_family`` -> ``module:function(options)`` returning a :class:`ModelFamily` (called in a
thread; ``options``: :func:`family_options`)."""


def family_options(config: Any) -> dict[str, Any]:
    """What the deploy config tells the family's loader: ``batch_replies``, the replies the Thinker
    writes at once, is Stage 0's ``max_num_seqs`` (vLLM's meaning: sequences batched together)."""
    return {"batch_replies": int(config.stage(0).max_num_seqs)}


class FamilyUnavailable(RuntimeError):
    """The configured model family cannot be loaded here (message says why)."""


def load_family(config: Any) -> ModelFamily:
    """Import and load the configured family.

    Raises:
        FamilyUnavailable: unknown family or its dependencies are missing.
    """
    target = FAMILY_LOADERS.get(config.model_family)
    if target is None:
        raise FamilyUnavailable(f"model_family '{config.model_family}' has no in-process loader here")
    mod_name, fn_name = target.split(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise FamilyUnavailable(f"model_family '{config.model_family}' needs packages that are missing: {exc}") from exc
    return getattr(mod, fn_name)(family_options(config))


class Engine:
    """Everything behind the routes.

    Args:
        config: the deploy config.
        family: an already-loaded family (tests reuse one); loaded in :meth:`start` when None.
    """

    def __init__(self, config: Any, family: ModelFamily | None = None) -> None:
        self.config = config
        self.family = family
        self.metrics = EngineMetrics()
        self.pipeline: Pipeline | None = None
        self.sessions: SessionManager | None = None
        self.started_at: float | None = None
        self.load_s: float | None = None

    async def start(self) -> None:
        """Load the family (in a thread), start the stage workers and the reaper."""
        t0 = time.perf_counter()
        if self.family is None:
            self.family = await in_passing_thread(load_family, self.config)
            if self.family.warmup is not None:
                await in_passing_thread(self.family.warmup)
        cfg = self.config
        stages = [cfg.stage(i) for i in range(3)]
        self.pipeline = Pipeline(
            self.family,
            max_num_seqs=tuple(s.max_num_seqs for s in stages),  # type: ignore[arg-type]
            inbox_sizes=tuple(s.inbox_size for s in stages),  # type: ignore[arg-type]
            codec_chunk_frames=cfg.connectors.codec_chunk_frames,
            metrics=self.metrics,
            timeouts_s=tuple(s.stage_timeout_s for s in stages),  # type: ignore[arg-type]
        )
        self.pipeline.start()
        if self.family.core_use is not None:
            self.metrics.watch_cores(self.family.core_use)
        if self.family.reply_batch_stats is not None:
            self.metrics.watch_reply_batch(self.family.reply_batch_stats)
        caps = self.family.capabilities
        detector = cfg.turn_policy.detector
        if detector not in caps.turn_detectors:
            raise FamilyUnavailable(f"family '{caps.name}' has no turn detector '{detector}' "
                                    f"(it offers {', '.join(caps.turn_detectors)})")
        try:
            new_detector = detector_factory(detector, cfg.turn_policy, getattr(self.family.thinker, "vad_factory", None))
        except DetectorUnavailable as exc:
            raise FamilyUnavailable(f"family '{caps.name}': {exc}") from exc
        score_turn = None
        if detector in NEEDS_SCORER:
            if self.family.turn_scorer is None:
                raise FamilyUnavailable(f"family '{caps.name}' declares '{detector}' but has no end-of-turn model")
            scorer = await in_passing_thread(self.family.turn_scorer)
            score_turn = scorer.score
            self.metrics.watch_turn_scorer(scorer)
        score_text = None
        tp = cfg.turn_policy
        if detector in NEEDS_SCORER and tp.smart_turn_text_cues and tp.smart_turn_completion_threshold > 0 and \
                self.family.text_turn_scorer is not None:
            text_scorer = await in_passing_thread(self.family.text_turn_scorer)
            score_text = text_scorer.score
            self.metrics.watch_turn_scorer(text_scorer, kind="text")
        deps = SessionDeps(
            pipeline=self.pipeline,
            config=cfg,
            new_detector=new_detector,
            score_turn=score_turn,
            score_text=score_text,
            metrics=self.metrics,
            capabilities=self.capabilities(),
            max_context_tokens=getattr(cfg.duplex_session, "max_context_tokens", None) or caps.max_context_tokens,
            vision=caps.vision,
            recorder=recorder_factory(cfg),  # None unless recording.dir (serve --record-dir)
        )
        self.sessions = SessionManager(
            cfg, self.metrics, lambda sid, on_closed: DuplexSession(sid, deps, on_closed=on_closed)
        )
        self.sessions.start()
        self.started_at = time.time()
        self.load_s = time.perf_counter() - t0
        log.info("engine ready: family=%s in %.1f s", caps.name, self.load_s)

    async def stop(self) -> None:
        """Close sessions and stop the workers."""
        if self.sessions is not None:
            await self.sessions.stop()
        if self.pipeline is not None:
            await self.pipeline.stop()

    forwards_chat = False
    """True for engines that pass chat completions to another server (``forward_chat``)."""

    def serves_model(self, name: str | None) -> bool:
        """Whether a client's ``model`` names what this server serves (``None`` = any)."""
        srv = self.config.server
        return not name or name in (srv.served_model_name, *srv.served_model_aliases, self.config.model_family)

    async def models(self) -> dict[str, Any]:
        """What ``GET /v1/models`` answers (OpenAI ``list`` shape): the served name, then its aliases."""
        srv = self.config.server
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": int(self.started_at or 0), "owned_by": "omni-duplex",
                      "root": self.config.model_family} for name in (srv.served_model_name, *srv.served_model_aliases)],
        }

    def capabilities(self) -> dict[str, Any]:
        """The wire ``capabilities`` object of realtime sessions (branch on flags, not names)."""
        assert self.family is not None
        caps = self.family.capabilities
        d = self.config.duplex_session
        return {
            "implementation_level": "model_native_duplex",
            "model_family": caps.name,
            "chunk_period_ms": d.chunk_period_ms,
            "first_chunk_ms": d.chunk_period_ms + FIRST_UNIT_EXTRA_MS,
            "supports_input_append": True,
            "supports_barge_in": True,
            "supports_session_resume": False,
            "supports_session_lease": False,
            "supports_multi_session": d.max_sessions > 1,
            "supports_audio_truncate": True,
            "supports_playback_ack": True,
            "supports_voice_cloning": caps.voice_cloning,
            "supports_vision": caps.vision,
            "requires_ref_audio": caps.requires_ref_audio,
            "input_modes": ["append_audio_chunk"],
            "signal_sources": ["model", "client"],
            "session_admission_mode": "engine_managed",
            "max_sessions": d.max_sessions,
            "max_context_tokens": getattr(d, "max_context_tokens", None) or caps.max_context_tokens,
            "input_sample_rate_hz": INPUT_SAMPLE_RATE_HZ,
            "output_sample_rate_hz": caps.output_sample_rate_hz,
            "turn_detector": self.config.turn_policy.detector,
            "turn_detectors": list(caps.turn_detectors),
            "languages": {"understands": list(caps.understands), "speaks": list(caps.speaks),
                          "voices": list(caps.voices)},
        }

    def health(self) -> dict[str, Any]:
        """Health: ``unhealthy`` when a stage worker has died or the engine is not started; ``degraded``
        (still serving) while a stage runs on a fresh thread and the one its watchdog abandoned has not
        returned (``degraded: {stage: why}``)."""
        stages = self.pipeline.health() if self.pipeline else {}
        degraded = self.pipeline.degraded() if self.pipeline else {}
        ok = bool(stages) and all(stages.values())
        return {
            "status": ("degraded" if degraded else "ok") if ok else "unhealthy",
            "model_family": self.family.capabilities.name if self.family else None,
            "stages": stages,
            "degraded": degraded,
            "sessions": self.sessions.snapshot() if self.sessions else None,
        }
