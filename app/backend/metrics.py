"""Prometheus metrics of the engine (exported on ``GET /metrics``).

One registry per engine so several servers (tests) in one process never collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class EngineMetrics:
    """Per-stage and per-session metrics.

    Attributes:
        queue_wait_s: time an item waited in a stage inbox, seconds (label ``stage``).
        compute_s: time a stage batch took, seconds.
        batch_size: items per stage batch.
        tokens: tokens produced per stage (Thinker text tokens, Talker codec frames).
        audio_s: seconds of speech produced by Code2Wav.
        rtf: real-time factor of Talker+Code2Wav per segment (compute s / audio s).
        errors: failed stage items.
        sessions_active: open duplex sessions (in-process and proxied).
        sessions_admitted: sessions admitted (label ``route``: ``realtime``, ``page``).
        sessions_refused: sessions refused at admission (label ``reason``: ``capacity``, ``client_limit``,
            ``remote_capacity`` or a remote backend's refusal code).
        sessions_closed: sessions ended (label ``reason``: ``client_close``, ``disconnect_grace_expired``,
            ``idle_ttl_expired``, ``server_shutdown``, ``context_length_exceeded``, ``output_overflow`` ...).
        first_audio_s: end of the user's speech -> the answer's first audio, seconds (label ``route``);
            see :mod:`app.backend.duplex.probe` for the exact instants.
        barge_in_stop_s: the user's overlap (``kind="overlap"``) or a client interrupt (``kind="client"``)
            -> the interrupted response's end, seconds.
        unit_decision_s: arrival of the sample closing a unit -> its ``session.unit_metrics``, seconds.
        context_tokens: context tokens in use, observed once per unit.
        context_ratio: context tokens in use / the session's budget, once per unit.
        turn_unit_s: turn-detector compute per unit (``session.unit_metrics.compute_ms``), seconds.
        requests: chat completions by outcome.
        ttfp_s: time to first audio packet of chat/duplex responses, seconds.
        turn_score_s: end-of-turn model scores as a session waited for them (queue + batch), seconds.
        turn_decisions: scored pauses and capped pauses by outcome (``complete``, ``incomplete``,
            ``failed``, ``cap``).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_wait_s = Histogram(
            "omni_stage_queue_wait_seconds", "Stage inbox wait", ["stage"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.compute_s = Histogram(
            "omni_stage_compute_seconds", "Stage batch compute time", ["stage"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.batch_size = Histogram(
            "omni_stage_batch_size", "Items per stage batch", ["stage"], buckets=(1, 2, 3, 4, 6, 8, 16), registry=r
        )
        self.tokens = Counter("omni_stage_tokens", "Tokens produced per stage", ["stage"], registry=r)
        self.audio_s = Counter("omni_audio_output_seconds", "Seconds of speech produced", registry=r)
        self.rtf = Histogram(
            "omni_talker_code2wav_rtf",
            "Talker+Code2Wav real-time factor per segment",
            buckets=(0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0),
            registry=r,
        )
        self.errors = Counter("omni_stage_errors", "Failed stage items", ["stage"], registry=r)
        self.sessions_active = Gauge("omni_duplex_sessions_active", "Open duplex sessions", registry=r)
        self.sessions_admitted = Counter("omni_duplex_sessions_admitted", "Sessions admitted", ["route"], registry=r)
        self.sessions_refused = Counter("omni_duplex_sessions_refused", "Sessions refused at admission", ["reason"],
                                        registry=r)
        self.sessions_closed = Counter("omni_duplex_sessions_closed", "Sessions ended", ["reason"], registry=r)
        self.first_audio_s = Histogram(
            "omni_duplex_first_audio_seconds", "End of user speech to first audio of the answer", ["route"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.barge_in_stop_s = Histogram(
            "omni_duplex_barge_in_stop_seconds", "User overlap or client interrupt to the response's end", ["kind"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.unit_decision_s = Histogram(
            "omni_duplex_unit_decision_seconds", "Arrival of a unit's last sample to its unit_metrics",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.context_tokens = Histogram(
            "omni_duplex_context_tokens", "Context tokens in use, per unit",
            buckets=(128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536), registry=r)
        self.context_ratio = Histogram(
            "omni_duplex_context_used_ratio", "Context tokens in use / budget, per unit",
            buckets=(0.1, 0.25, 0.5, 0.75, 0.85, 0.95, 1.0), registry=r)
        self.turn_unit_s = Histogram(
            "omni_turn_detector_unit_seconds", "Turn-detector compute per unit", buckets=_LATENCY_BUCKETS, registry=r)
        self.requests = Counter("omni_chat_requests", "Chat completions", ["outcome"], registry=r)
        self.ttfp_s = Histogram(
            "omni_ttfp_seconds", "Time to first audio packet", ["route"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.turn_score_s = Histogram(
            "omni_turn_detector_score_seconds", "End-of-turn model score, request to result", buckets=_LATENCY_BUCKETS,
            registry=r)
        self.turn_decisions = Counter("omni_turn_detector_decisions", "End-of-turn decisions on pauses", ["outcome"],
                                      registry=r)
        self.far_speech = Counter("omni_turn_far_speech_onsets",
                                  "Speech onsets ignored as far below the user's level (a TV, a distant talker)",
                                  registry=r)

    def record_turn_decision(self, outcome: str, score_s: float | None) -> None:
        """One pause decision of a learned turn detector (``score_s`` None for a capped pause)."""
        self.turn_decisions.labels(outcome).inc()
        if score_s is not None:
            self.turn_score_s.observe(score_s)

    def watch_cores(self, core_use: Callable[[], dict[tuple[str, str], Any]]) -> None:
        """Export how model calls shared the cores (a family's ``core_use``, see
        :class:`~app.backend.pipeline.stages.ModelFamily`): ``omni_cores_calls_total``,
        ``omni_cores_wait_seconds_total`` and ``omni_cores_hold_seconds_total``, labelled
        ``priority`` and ``work``."""
        self.registry.register(_CoreUseCollector(core_use))

    def watch_reply_batch(self, stats: Callable[[], Any]) -> None:
        """Export the Thinker's cross-session reply batching (a family's ``reply_batch_stats``, e.g.
        :meth:`~app.backend.models.tiny.reply_batch.ReplyBatcher.stats`): ``omni_thinker_batch_*``
        (steps, replies, tokens, the largest batch, seconds waited and computed) and
        ``omni_thinker_batch_steps_by_size{size}``."""
        self.registry.register(_ReplyBatchCollector(stats))

    def watch_turn_scorer(self, scorer: Any, kind: str = "acoustic") -> None:
        """Export a shared end-of-turn scorer's batching counters (``scorer.stats()``):
        ``omni_turn_detector_*`` for the acoustic model, ``omni_turn_text_model_*`` for ``kind="text"``."""
        r = self.registry
        prefix = "omni_turn_text_model" if kind == "text" else "omni_turn_detector"
        for name, doc, attr in (("calls", "Model calls (one per batch)", "calls"),
                                ("clips", "Clips scored", "clips"),
                                ("compute_seconds", "Seconds in model calls", "total_s"),
                                ("max_batch", "Largest batch so far", "max_batch_size")):
            g = Gauge(f"{prefix}_{name}", f"End-of-turn {kind} scorer: {doc}", registry=r)
            g.set_function(lambda a=attr: float(getattr(scorer.stats(), a)))


class _CoreUseCollector(Collector):
    """``omni_cores_*`` counters read from a family's ``core_use()`` at each scrape."""

    def __init__(self, core_use: Callable[[], dict[tuple[str, str], Any]]) -> None:
        self._core_use = core_use

    def collect(self) -> Iterator[CounterMetricFamily]:
        labels = ["priority", "work"]
        calls = CounterMetricFamily("omni_cores_calls", "Model calls that held the CPU cores", labels=labels)
        wait = CounterMetricFamily("omni_cores_wait_seconds", "Seconds model calls waited for the cores",
                                   labels=labels)
        hold = CounterMetricFamily("omni_cores_hold_seconds", "Seconds model calls held the cores", labels=labels)
        for (priority, work), use in sorted(self._core_use().items()):
            calls.add_metric([priority, work], use.calls)
            wait.add_metric([priority, work], use.wait_s)
            hold.add_metric([priority, work], use.hold_s)
        yield from (calls, wait, hold)


class _ReplyBatchCollector(Collector):
    """``omni_thinker_batch_*`` read from a reply batcher's ``stats()`` at each scrape."""

    def __init__(self, stats: Callable[[], Any]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        st = self._stats()
        for name, doc, value in (
                ("steps", "Decode steps (one llama_decode each)", st.steps),
                ("replies", "Replies written", st.replies),
                ("tokens", "Tokens written", st.tokens),
                ("wait_seconds", "Seconds replies waited for their first token (prompt included)", st.wait_s),
                ("compute_seconds", "Seconds in decode steps", st.compute_s)):
            yield CounterMetricFamily(f"omni_thinker_batch_{name}", f"Thinker reply batching: {doc}", value=value)
        yield GaugeMetricFamily("omni_thinker_batch_max_size", "Thinker reply batching: most replies in one step",
                                value=st.max_batch)
        by_size = CounterMetricFamily("omni_thinker_batch_steps_by_size",
                                      "Thinker reply batching: decode steps by replies in the step", labels=["size"])
        for size, n in sorted(st.batch_sizes.items()):
            by_size.add_metric([str(size)], n)
        yield by_size
