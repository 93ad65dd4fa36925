"""Echo gate of a duplex session: the assistant's own voice, played on the client's speaker and
picked up again by its microphone, must not count as the user talking (issue #10, part 5).

A client without echo cancellation sends the reply's audio back. Without a gate the VAD hears
speech over the reply and the session ends it (soft interrupt after ``turn_policy.barge_in_ms``,
a hard cancel with ``overlap_policy: barge_in_on_speech``) or answers the overlap utterance.

The server knows what it sent: every released ``response.output_audio.delta`` (24 kHz) and the
input sample at which it was released. It does not know exactly when the client played it: a
client plays a delta when it arrives or up to ~1.5 units later (its jitter buffer), plus a
speaker-to-microphone path (room reverb, a codec). So the gate

1. keeps a **reference timeline**: the released audio resampled to 16 kHz and placed on the
   session's input sample axis where the client would start it at the earliest (deltas play
   back to back; a delta released after the previous one ran out starts when released), see
   :class:`ReferenceTimeline`;
2. **estimates the echo path delay** (0 .. :data:`MAX_DELAY_MS`) by GCC-PHAT cross-correlation
   of the last :data:`EST_SPAN_MS` of microphone input against the reference, every
   :data:`EST_EVERY_WINDOWS` VAD windows while an echo is possible; a peak that stands out
   (peak-to-sidelobe ratio >= :data:`LOCK_PSR`) locks the delay and an echo gain;
3. **judges each VAD window** (32 ms): the microphone's power spectrum is compared with the
   echo expected from the aligned reference (its power spectrum, held with a reverb decay of
   :data:`TAIL_DECAY_DB` per window, smeared over neighbouring bins and +-half a window, times a
   per-band echo gain). If at most :data:`SPEECH_RESIDUAL` of the window's energy is left
   unexplained (after :data:`OVER_SUBTRACT_DB` of safety margin), the window is *echo only*;
   real speech over the echo leaves its own harmonics and formants unexplained.

Until the delay is locked, a window in which an echo is possible is taken for echo, but only
for :data:`ACQUIRE_MS` of loud microphone input: if no echo shows up in the correlation by
then, the client cancels its echo (headphones, a browser's AEC) and the gate steps aside until
a correlation peak appears.

The session's turn detector sees the verdict through :class:`GatedVad`: the speech probability
of an echo-only window is 0, so onsets, overlap length (soft interrupt) and overlap utterances
count only the user's own speech. Input audio itself is not changed (ASR hears what came in).

Units: samples are 16 kHz input samples on the session's media clock (the count of input
samples received), times in ms, levels in dB (power).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.backend.protocol import events as E
from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import resample

RATE = INPUT_SAMPLE_RATE_HZ

MAX_DELAY_MS = 2000.0
"""Largest echo delay searched: client jitter buffer (<= 1.5 units) + transport + room, ms."""

EST_SPAN_MS = 1000.0
"""Microphone history correlated against the reference per delay estimate, ms."""

EST_EVERY_WINDOWS = 4
"""A delay estimate every this many VAD windows (128 ms) while an echo is possible."""

MIN_LOUD_WINDOWS = 4
"""A delay estimate needs this many loud windows (>= 128 ms) in its span (noise alone gives
spurious peaks)."""

LOCK_PSR = 15.0
"""A GCC-PHAT peak this many standard deviations above the mean of the lags locks the delay
(an echo gives 20 .. 500 from its first 128 ms; uncorrelated speech 6 .. 10)."""

TAIL_DECAY_DB = 1.0
"""Reverb model: the expected echo of a reference frame decays this much per 32 ms window
(RT60 ~ 1.9 s: the tail of a reverberant room builds up over a long word and decays slower
than its single-reflection RT60 suggests); a held maximum, so it over-covers dry rooms (the
user must then be louder than the echo's fading tail, which costs little: bench_echo)."""

OVER_SUBTRACT_DB = 4.0
"""Safety margin on the expected echo power before the residual is measured, dB."""

SPEECH_RESIDUAL = 0.35
"""A window is the user's speech when more than this share of its energy is not explained by
the expected echo (and the residual is above :data:`MIN_RESIDUAL_DB`)."""

USER_RESIDUAL = 0.1
"""While the user is talking (a window judged speech within :data:`USER_HOLD_MS`), this share
of unexplained energy is enough (double talk: the user's quieter syllables under the echo)."""

USER_HOLD_MS = 300.0
"""How long after a window judged speech the lower :data:`USER_RESIDUAL` applies, ms."""

MIN_RESIDUAL_DB = -60.0
"""Residual power below this (dBFS, mean square per sample) is never speech."""

ACQUIRE_MS = 256.0
"""Loud microphone input (>= :data:`LOUD_ABOVE_FLOOR_DB` over the floor) that may pass as
possible echo before the delay is locked; past it, with no correlation peak, there is no echo."""

LOUD_ABOVE_FLOOR_DB = 12.0
"""Microphone windows this far above the noise floor count as loud (acquisition budget)."""

TAIL_MS = 600.0
"""After the last reference audio an echo is still possible for this long (reverb, jitter), ms."""

FREQ_SLACK_BINS = 0
"""The expected echo of a bin also covers this many neighbours on each side (0: harmonics stay
apart, so speech over the echo shows between them)."""

BANDS_HZ = (0, 300, 600, 1000, 1500, 2200, 3000, 4000, 5500, 8001)
"""Band edges of the per-band echo gain, Hz."""

GAIN_QUANTILE = 0.9
"""The echo gain per band is this quantile of the input-to-held-reference power ratios ..."""

GAIN_HISTORY = 64
"""... of the last this many echo windows (~2 s)."""


def _db(x: float) -> float:
    return 10.0 * float(np.log10(max(x, 1e-20)))


class ReferenceTimeline:
    """The audio the client was sent, at 16 kHz on the session's input sample axis.

    Positions are absolute input samples; the timeline keeps ``[start, end)`` (zeros where
    nothing was placed) and forgets what lies before :meth:`trim`.
    """

    def __init__(self) -> None:
        self.start = 0
        self.audio = np.zeros(0, np.float32)
        self.cursor = 0
        """Where the next delta starts playing at the earliest (end of the last one placed)."""
        self.last_end = -(10**12)
        """End of the newest audio placed (an echo is possible until it plus the delay range)."""

    @property
    def end(self) -> int:
        return self.start + self.audio.size

    def place(self, audio16: np.ndarray, released_at: int) -> int:
        """Place one released delta (float32 16 kHz); returns its start position.

        The client plays deltas back to back; one released after the previous ran out starts
        when it is released (``released_at``, the input samples received at release).
        """
        pos = max(self.cursor, int(released_at))
        self._ensure(pos + audio16.size)
        i = pos - self.start
        if i < 0:  # (never before a trim point)
            audio16, pos, i = audio16[-i:], self.start, 0
        self.audio[i : i + audio16.size] += audio16
        self.cursor = pos + audio16.size
        self.last_end = max(self.last_end, self.cursor)
        return pos

    def drop_after(self, pos: int, now: int) -> None:
        """The client dropped its queued playback: nothing after ``pos`` will play; later deltas start at ``now``."""
        i = max(int(pos) - self.start, 0)
        if i < self.audio.size:
            self.audio[i:] = 0.0
        self.last_end = min(self.last_end, max(int(pos), self.start))
        self.cursor = int(now)

    def segment(self, a: int, b: int) -> np.ndarray:
        """Samples ``[a, b)`` (zeros outside what is kept)."""
        out = np.zeros(max(b - a, 0), np.float32)
        lo, hi = max(a, self.start), min(b, self.end)
        if hi > lo:
            out[lo - a : hi - a] = self.audio[lo - self.start : hi - self.start]
        return out

    def trim(self, before: int) -> None:
        """Forget everything before ``before``."""
        cut = min(max(int(before) - self.start, 0), self.audio.size)
        if cut:
            self.audio = self.audio[cut:]
            self.start += cut

    def _ensure(self, end: int) -> None:
        if end > self.end:
            self.audio = np.concatenate([self.audio, np.zeros(end - self.end, np.float32)])


@dataclass
class GateStats:
    """Counters of one gate (benchmarks, debugging).

    Attributes:
        windows: windows judged.
        possible: windows in which an echo was possible (reference audio in range).
        echo: windows judged echo only (their VAD probability zeroed).
        locks: delay locks (first lock and changes of delay).
        delay_ms: the locked delay, ms (None before a lock).
        estimates: GCC-PHAT delay estimates computed.
        psr: peak-to-sidelobe ratio of the last estimate.
    """

    windows: int = 0
    possible: int = 0
    echo: int = 0
    locks: int = 0
    delay_ms: float | None = None
    estimates: int = 0
    psr: float = 0.0
    log: list[tuple[int, float, float]] = field(default_factory=list)


class EchoGate:
    """Decides, per VAD window of the session's input, whether it is only the echo of the reply.

    Args:
        window_samples: the VAD's window (512 at 16 kHz: 32 ms); the gate judges the same windows.
        output_rate: rate of released audio, Hz (24 000).
        enabled: False: never an echo (every verdict False; nothing is computed).
    """

    def __init__(self, window_samples: int = 512, *, output_rate: int = 24_000, enabled: bool = True) -> None:
        self.win = int(window_samples)
        self.output_rate = int(output_rate)
        self.enabled = enabled
        self.ref = ReferenceTimeline()
        self.stats = GateStats()
        self._max_delay = int(MAX_DELAY_MS * RATE / 1000)
        self._span = int(EST_SPAN_MS * RATE / 1000)
        self._tail = int(TAIL_MS * RATE / 1000)
        self._pos = 0  # input samples judged (window-aligned) + pending
        self._pending = np.zeros(0, np.float32)
        keep = self._span + self.win
        self._mic = np.zeros(keep, np.float32)  # the newest `keep` judged input samples
        self._hann = np.hanning(self.win + 2)[1:-1].astype(np.float32)
        freqs = np.fft.rfftfreq(self.win, 1.0 / RATE)
        self._band = np.clip(np.searchsorted(BANDS_HZ, freqs, side="right") - 1, 0, len(BANDS_HZ) - 2)
        self._nb = len(BANDS_HZ) - 1
        self._decay = 10.0 ** (-TAIL_DECAY_DB / 10.0)
        self._over = 10.0 ** (OVER_SUBTRACT_DB / 10.0)
        self._held = np.zeros(freqs.size, np.float64)  # reverb-held expected echo spectrum (gain 1)
        self._delay: int | None = None
        self.last_share = 0.0
        self._user_at = -(10**12)  # end of the last window judged the user's speech
        self._gain = np.ones(self._nb)  # per-band echo power gain
        self._ratios: list[np.ndarray] = []  # recent per-band input / held reference power ratios
        self._since_est = 0
        self._floor: list[float] = []
        self._loud: list[bool] = []  # loud flags of the windows in the estimation span
        self._acquired_loud = 0  # loud samples seen while an echo was possible and no delay locked
        self._absent = False  # no echo found within ACQUIRE_MS: step aside until a peak shows up

    # ------------------------------------------------------------------ what was sent
    def on_event(self, ev: E.ServerEvent, now_sample: int) -> None:
        """See one outgoing server event (the session's emit tap): audio deltas go on the reference
        timeline; a dropped response (cancelled, or ended for a user overlap) ends its playback."""
        if not self.enabled:
            return
        if isinstance(ev, E.AudioDelta) and ev.audio is not None and np.size(ev.audio):
            self.play(np.asarray(ev.audio, np.float32), now_sample, rate=ev.sample_rate_hz or self.output_rate)
        elif isinstance(ev, E.OutputAudioCleared) or (isinstance(ev, E.ResponseListen) and ev.response_id) or \
                (isinstance(ev, E.ResponseDone) and ev.status == "cancelled"):
            self.drop(now_sample)

    def play(self, audio: np.ndarray, released_at: int, *, rate: int | None = None) -> None:
        """A delta of ``audio`` (float32 at ``rate``, default the output rate) was released when the
        session had received ``released_at`` input samples."""
        a16 = resample(np.asarray(audio, np.float32), int(rate or self.output_rate), RATE)
        self.ref.place(a16, released_at)

    def drop(self, now_sample: int) -> None:
        """The client drops its queued playback now: what it had not played by ``now_sample`` (on
        its delayed clock) never reaches the microphone."""
        played_until = now_sample - (self._delay or 0) + self.win
        self.ref.drop_after(played_until, now_sample)

    # ------------------------------------------------------------------ what came back
    def wrap(self, vad: Any) -> GatedVad:
        """A VAD whose echo-only windows have speech probability 0 (pass to the turn detector)."""
        return GatedVad(vad, self)

    def judge(self, audio: np.ndarray) -> np.ndarray:
        """Feed input audio (float32 16 kHz, in order, each sample once); one verdict per window it
        completes (True = echo only), exactly like the VAD's probabilities."""
        x = np.asarray(audio, np.float32).reshape(-1)
        buf = np.concatenate([self._pending, x]) if self._pending.size else x
        k = buf.size // self.win
        self._pending = buf[k * self.win :].copy()
        out = np.zeros(k, bool)
        for j in range(k):
            w = buf[j * self.win : (j + 1) * self.win]
            out[j] = self._judge_window(w)
        return out

    def reset_pending(self) -> None:
        """The VAD dropped its partial window: drop ours too (the media position still advances)."""
        self._pos += self._pending.size
        self._pending = np.zeros(0, np.float32)

    @property
    def delay_ms(self) -> float | None:
        """The locked echo delay, ms (None before a lock)."""
        return None if self._delay is None else self._delay * 1000.0 / RATE

    def _judge_window(self, w: np.ndarray) -> bool:
        t0 = self._pos  # absolute position of this window
        self._pos += w.size
        self._mic = np.concatenate([self._mic[w.size :], w])
        self.stats.windows += 1
        energy = float(np.mean(w.astype(np.float64) ** 2))
        level = _db(energy)
        self._floor.append(level)
        if len(self._floor) > 94:  # ~3 s
            self._floor.pop(0)
        if not self.enabled:
            return False
        t1 = self._pos
        self.ref.trim(t1 - self._max_delay - self._span - 2 * self.win)
        possible = self.ref.last_end + self._max_delay + self._tail > t0 and \
            bool(np.any(self.ref.segment(t0 - self._max_delay - self._tail, t1)))
        if not possible:
            self._held[:] = 0.0
            self._since_est = EST_EVERY_WINDOWS  # estimate at once when the next echo becomes possible
            return False
        self.stats.possible += 1
        loud = level >= min(self._floor) + LOUD_ABOVE_FLOOR_DB and level > -70.0
        self._loud.append(loud)
        if len(self._loud) > self._span // self.win:
            self._loud.pop(0)
        self._since_est += 1
        if self._since_est >= EST_EVERY_WINDOWS and loud and sum(self._loud) >= MIN_LOUD_WINDOWS:
            self._since_est = 0
            self._estimate(t1)
        if self._delay is None:
            if self._absent:
                return False
            if loud:
                self._acquired_loud += w.size
                if self._acquired_loud > ACQUIRE_MS * RATE / 1000:
                    self._absent = True
                    return False
            echo = loud or level > -70.0
            self.stats.echo += int(echo)
            return echo
        echo = self._explained(w, t0, energy)
        self.stats.echo += int(echo)
        return echo

    # ------------------------------------------------------------------ delay
    def _estimate(self, t1: int) -> None:
        """GCC-PHAT of the last EST_SPAN of input against the reference, lags 0 .. MAX_DELAY."""
        span, dmax = self._span, self._max_delay
        m = self._mic[-span:].astype(np.float64)
        r = self.ref.segment(t1 - span - dmax, t1).astype(np.float64)
        if not np.any(r) or float(np.mean(m**2)) < 1e-9:
            return
        n = 1 << int(np.ceil(np.log2(span + dmax + span)))
        fm = np.fft.rfft(m, n)
        fr = np.fft.rfft(r, n)
        cross = np.conj(fm) * fr
        freqs = np.fft.rfftfreq(n, 1.0 / RATE)
        cross[(freqs < 150) | (freqs > 5000)] = 0.0
        cross /= np.abs(cross) + 1e-12 * np.max(np.abs(cross)) + 1e-20
        cc = np.fft.irfft(cross, n)[: dmax + 1]  # cc[k]: mic[n] ~ ref_seg[n + k]; lag = dmax - k
        k = int(np.argmax(cc))
        peak = float(cc[k])
        side = np.concatenate([cc[: max(k - 80, 0)], cc[k + 80 :]])
        psr = (peak - float(np.mean(side))) / (float(np.std(side)) + 1e-12) if side.size > 10 else 0.0
        self.stats.estimates += 1
        self.stats.psr = psr
        lag = dmax - k
        self.stats.log.append((t1, lag * 1000.0 / RATE, psr))
        if psr < LOCK_PSR:
            return
        if self._delay is None or abs(lag - self._delay) > self.win // 4:
            self.stats.locks += 1
            self._delay = lag
            self._absent = False
            self.stats.delay_ms = self.delay_ms
            self._init_gain(t1)

    def _init_gain(self, t1: int) -> None:
        """Per-band echo gain from the correlation span (taken to be echo: its correlation peak
        locked the delay): see :meth:`_learn_gain`."""
        d = self._delay or 0
        held = np.zeros_like(self._held)
        span_w = self._span // self.win
        self._ratios.clear()
        for j in range(span_w):
            a = t1 - (span_w - j) * self.win
            i = self._mic.size - (t1 - a)
            held = np.maximum(self._ref_power(a - d), held * self._decay)
            mp = self._power(self._mic[i : i + self.win])
            if float(np.mean(self._mic[i : i + self.win] ** 2)) > 10 ** (-70 / 10):
                self._learn_gain(mp, held)
        self._held = held

    def _learn_gain(self, mp: np.ndarray, held: np.ndarray) -> None:
        """Keep this window's per-band ratio of input power to held reference power; the gain is
        the :data:`GAIN_QUANTILE` of the last :data:`GAIN_HISTORY` ratios per band (an upper
        envelope: the held reference over-covers decays, so the plain ratio runs low)."""
        eb = np.bincount(self._band, held, self._nb)
        ok = eb > eb.sum() * 1e-3
        if not ok.any():
            return
        q = np.where(ok, np.bincount(self._band, mp, self._nb) / np.maximum(eb, 1e-20), np.nan)
        self._ratios.append(q)
        if len(self._ratios) > GAIN_HISTORY:
            self._ratios.pop(0)
        hist = np.array(self._ratios)
        cols = np.isfinite(hist).any(axis=0)
        g = np.full(self._nb, np.nan)
        g[cols] = np.nanquantile(hist[:, cols], GAIN_QUANTILE, axis=0)
        valid = np.isfinite(g)
        if valid.any():
            fill = float(np.nanmedian(g[valid]))
            self._gain = np.where(valid, g, fill)

    # ------------------------------------------------------------------ verdict
    def _power(self, w: np.ndarray) -> np.ndarray:
        return np.abs(np.fft.rfft(w.astype(np.float64) * self._hann)) ** 2

    def _ref_power(self, a: int) -> np.ndarray:
        """Reference power spectrum around position ``a``: max over +-half a window (timing slack)."""
        h = self.win // 2
        p = self._power(self.ref.segment(a - h, a - h + self.win))
        p = np.maximum(p, self._power(self.ref.segment(a, a + self.win)))
        return np.maximum(p, self._power(self.ref.segment(a + h, a + h + self.win)))

    def _explained(self, w: np.ndarray, t0: int, energy: float) -> bool:
        d = self._delay or 0
        rp = self._ref_power(t0 - d)
        self._held = np.maximum(rp, self._held * self._decay)
        held = self._held.copy()
        if FREQ_SLACK_BINS:  # +-1 bin of frequency slack
            held[1:] = np.maximum(held[1:], self._held[:-1])
            held[:-1] = np.maximum(held[:-1], self._held[1:])
        expected = held * self._gain[self._band]
        mp = self._power(w)
        total = float(mp.sum())
        if total <= 0.0:
            return False
        residual = float(np.maximum(mp - self._over * expected, 0.0).sum())
        share = residual / total
        self.last_share = share
        talking = self._pos - self._user_at <= USER_HOLD_MS * RATE / 1000
        speech = share > (USER_RESIDUAL if talking else SPEECH_RESIDUAL) and _db(share * energy) > MIN_RESIDUAL_DB
        if speech:
            self._user_at = self._pos
        if not speech and float(rp.sum()) > 0.0:
            self._learn_gain(mp, self._held)
        return not speech


class GatedVad:
    """A streaming VAD whose windows judged echo only by an :class:`EchoGate` get probability 0.

    Args:
        vad: the session's VAD (``window_samples``, ``process``, ``reset``).
        gate: the session's echo gate (same window).
    """

    def __init__(self, vad: Any, gate: EchoGate) -> None:
        self._vad = vad
        self._gate = gate
        self.window_samples = int(vad.window_samples)

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Speech probability per completed window, 0 where the gate heard only echo."""
        p = np.asarray(self._vad.process(chunk), np.float32)
        echo = self._gate.judge(chunk)
        n = min(p.size, echo.size)
        if n:
            p = p.copy()
            p[:n][echo[:n]] = 0.0
        return p

    def reset(self) -> None:
        """Forget the VAD's state (and the gate's partial window)."""
        self._vad.reset()
        self._gate.reset_pending()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._vad, name)
