"""SessionProbe: a duplex session's latency and context figures for ``/metrics``.

The probe watches what a session already knows, its input (how many 16 kHz samples arrived and
when) and the events it emits, and observes the engine's Prometheus series (see
:class:`app.backend.metrics.EngineMetrics`). It never changes the session. All times are
server ``time.perf_counter()`` instants: a sample's *arrival* is when the append (or the page's
WebRTC frame) carrying it reached the session's owner task.

* end of user speech -> first audio (``omni_duplex_first_audio_seconds{route}``): from the arrival
  of the input sample at which the user's speech ended (``speech_stopped.audio_end_ms``; for a
  turn ended by ``input_audio_buffer.commit`` with no detected end, the commit's arrival) to the
  emission of the answering response's first ``response.output_audio.delta``;
* barge-in stop (``omni_duplex_barge_in_stop_seconds{kind}``): ``overlap``, from the arrival of the
  sample at which the user started speaking over a response that had begun its audio to the end
  of that response (``response.done`` or a ``response.listen`` naming it); ``client``, from the
  arrival of a client interrupt (``response.cancel``/``barge_in``/``output_audio_buffer.clear``, as
  the transport hands it over: the session's inbox wait counts) to the response's end;
* per-unit decision time (``omni_duplex_unit_decision_seconds``): from the arrival of the sample
  that closes unit k to the emission of its ``session.unit_metrics`` (turn detector, score
  waits and the speak/listen decision included);
* context tokens used (``omni_duplex_context_tokens``, ``omni_duplex_context_used_ratio``) and
  turn-detector compute per unit (``omni_turn_detector_unit_seconds``), from
  ``session.unit_metrics``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from app.backend.protocol import commands as C
from app.backend.protocol import events as E
from app.constants import FIRST_UNIT_EXTRA_MS, INPUT_SAMPLE_RATE_HZ

_ARRIVALS_KEPT = 512
"""Input pieces remembered (~51 s of 100 ms appends); older samples map to the oldest piece."""


class SessionProbe:
    """Latency figures of one session.

    Args:
        metrics: the engine's :class:`~app.backend.metrics.EngineMetrics`, or None (probe off).
        unit_ms: the session's unit length, ms.
        route: returns ``realtime`` or ``page`` (label of the first-audio histogram).
        clock: the time source, seconds (tests may pass their own).
    """

    def __init__(self, metrics: Any, unit_ms: int, route: Callable[[], str] = lambda: "realtime",
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._m = metrics
        self._unit = unit_ms * INPUT_SAMPLE_RATE_HZ // 1000
        self._first = (FIRST_UNIT_EXTRA_MS + unit_ms) * INPUT_SAMPLE_RATE_HZ // 1000
        self.route = route
        self._now = clock
        self._received = 0
        self._arrivals: deque[tuple[int, float]] = deque(maxlen=_ARRIVALS_KEPT)
        self._speech_end_at: float | None = None  # the turn being answered ended then
        self._waiting_first_audio: set[str] = set()
        self._audio_started: set[str] = set()
        self._overlap_at: float | None = None
        self._interrupt: tuple[str, float] | None = None  # (kind, since) for the response playing now

    @property
    def enabled(self) -> bool:
        """True when there is a registry to observe."""
        return self._m is not None

    def on_input(self, samples: int) -> None:
        """``samples`` more 16 kHz input samples arrived now."""
        if samples <= 0:
            return
        self._received += int(samples)
        self._arrivals.append((self._received, self._now()))

    def on_command(self, cmd: Any) -> None:
        """A client command arrived now (from the transport, before the session's inbox): a hard
        interrupt (``response.cancel``, ``barge_in``, ``output_audio_buffer.clear``, ``input.cancel``,
        ``turn.signal{barge_in}``) starts the clock of the response playing, if any."""
        hard = isinstance(cmd, C.CancelResponse) or (isinstance(cmd, C.TurnSignal) and cmd.event == "barge_in")
        if hard and self._audio_started and self._interrupt is None:
            self._interrupt = ("client", self._now())

    def arrival(self, sample: int) -> float | None:
        """When input sample ``sample`` (0-based, on the session's media clock) arrived, or None."""
        for end, t in self._arrivals:
            if sample < end:
                return t
        return self._arrivals[-1][1] if self._arrivals else None

    def on_event(self, ev: E.ServerEvent) -> None:
        """Observe one event as the session emits it."""
        if self._m is None:
            return
        if isinstance(ev, E.SpeechStopped):
            self._speech_end_at = self.arrival(ev.audio_end_ms * INPUT_SAMPLE_RATE_HZ // 1000)
        elif isinstance(ev, E.InputCommitted):
            if self._speech_end_at is None:
                self._speech_end_at = self._now()
        elif isinstance(ev, E.SpeechStarted):
            if self._audio_started and self._overlap_at is None:
                self._overlap_at = self.arrival(ev.audio_start_ms * INPUT_SAMPLE_RATE_HZ // 1000)
        elif isinstance(ev, E.ResponseCreated):
            self._waiting_first_audio.add(ev.response_id)
        elif isinstance(ev, E.AudioDelta):
            self._on_audio(ev.response_id)
        elif isinstance(ev, E.ResponseDone):
            self._on_end(ev.response_id, stopped=ev.status != "completed")
        elif isinstance(ev, E.ResponseListen) and ev.response_id:
            self._on_end(ev.response_id, stopped=True)
        elif isinstance(ev, E.UnitMetrics):
            self._on_unit(ev)

    def _on_audio(self, rid: str) -> None:
        if rid in self._waiting_first_audio:
            self._waiting_first_audio.discard(rid)
            self._audio_started.add(rid)
            if self._speech_end_at is not None:
                self._m.first_audio_s.labels(self.route()).observe(max(0.0, self._now() - self._speech_end_at))
            self._speech_end_at = None

    def _on_end(self, rid: str, *, stopped: bool) -> None:
        """A response ended; ``stopped``: cut short (cancelled, or ended for the user's overlap)."""
        self._waiting_first_audio.discard(rid)
        if rid not in self._audio_started:
            return
        self._audio_started.discard(rid)
        now = self._now()
        if stopped and self._interrupt is not None:
            self._m.barge_in_stop_s.labels(self._interrupt[0]).observe(max(0.0, now - self._interrupt[1]))
        elif stopped and self._overlap_at is not None:
            self._m.barge_in_stop_s.labels("overlap").observe(max(0.0, now - self._overlap_at))
        self._interrupt = self._overlap_at = None

    def _on_unit(self, ev: E.UnitMetrics) -> None:
        closed_at = self.arrival(self._first + ev.unit_index * self._unit - 1)
        if closed_at is not None:
            self._m.unit_decision_s.observe(max(0.0, self._now() - closed_at))
        self._m.context_tokens.observe(ev.context_tokens)
        if ev.max_context_tokens:
            self._m.context_ratio.observe(ev.context_tokens / ev.max_context_tokens)
        self._m.turn_unit_s.observe(ev.compute_ms / 1000.0)
