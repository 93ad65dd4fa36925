"""The VAD silence-timer turn detector (``turn_policy.detector: silence``, the default).

State machine over per-window speech probabilities (Silero VAD windows of 32 ms):

* silence -> speech when the speech windows since the last silence add up to
  ``min_speech_ms`` (a click or a short cough never starts a turn);
* speech -> ``pause`` after ``speculative_silence_ms`` of non-speech (a reply may be prepared
  speculatively), ``resumed`` if ``min_speech_ms`` of speech comes back (shorter blips count
  as silence), end of turn after ``end_of_turn_silence_ms`` of non-speech;
* the utterance handed on is the audio from ``pad_ms`` before the speech onset to the
  end of the last speech window, plus ``pad_ms`` (at most ``speculative_silence_ms``: a pause
  and the end of the turn after it hand on the same audio);
* with a :class:`~app.backend.turns.level_gate.SpeechLevelGate` (``turn_policy.far_speech_drop_db``),
  an onset whose speech windows are far below the user's own level (a TV, someone across the room)
  is refused: the candidate starts over, and until a long silence a new onset must be louder
  still (hysteresis). Each finished turn teaches the gate the user's level.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.backend.turns.detector import StreamingVad, TurnDetector, TurnSignal
from app.backend.turns.level_gate import (
    SpeechLevelGate,
    active_level_dbfs,
    window_energy,
)
from app.constants import INPUT_SAMPLE_RATE_HZ, ms_to_samples


class SilenceTurnDetector(TurnDetector):
    """Turn-taking from a streaming VAD: the turn ends after a fixed silence.

    Args:
        vad: the detector (one per session).
        config: the deploy config's ``turn_policy`` (``vad_threshold``,
            ``end_of_turn_silence_ms``, ``min_speech_ms``, ``far_speech_drop_db``,
            ``speech_level_reference_dbfs``).
        pad_ms: audio kept before the onset and after the last speech window, ms (after it, at most
            ``speculative_silence_ms`` where pauses are reported).
        max_utterance_s: the utterance buffer keeps at most this much audio, seconds.
        silence_ends_turn: False: silence never ends the turn; only :meth:`flush` does (a commit,
            or the caller's own decision). Speech onsets are still reported (barge-in, overlap).
        report_pauses: report ``pause`` / ``resumed`` (default: as ``silence_ends_turn``). Push-to-talk
            (``turn_policy.detector: manual``) has neither; the learned detector keeps pauses.
        far_speech_gate: refuse onsets far below the user's level (``turn_policy.far_speech_drop_db``;
            push-to-talk has none: the user says when they speak, and a commit takes what they said).
    """

    def __init__(self, vad: StreamingVad, config: Any, *, pad_ms: float = 200.0, max_utterance_s: float = 30.0,
                 silence_ends_turn: bool = True, report_pauses: bool | None = None, far_speech_gate: bool = True):
        self._vad = vad
        self._silence_ends_turn = silence_ends_turn
        self._report_pauses = silence_ends_turn if report_pauses is None else report_pauses
        self._threshold = float(config.vad_threshold)
        self._eot_samples = ms_to_samples(config.end_of_turn_silence_ms, INPUT_SAMPLE_RATE_HZ)
        self._pause_samples = min(ms_to_samples(config.speculative_silence_ms, INPUT_SAMPLE_RATE_HZ), self._eot_samples)
        self._min_speech_samples = ms_to_samples(config.min_speech_ms, INPUT_SAMPLE_RATE_HZ)
        self._pad = ms_to_samples(pad_ms, INPUT_SAMPLE_RATE_HZ)
        # after the speech, no more than a pause has heard: the utterance a pause hands on (the
        # speculative reply's) is then the one the end of the turn hands on
        self._tail = min(self._pad, self._pause_samples) if self._report_pauses else self._pad
        self._max_keep = int(max_utterance_s * INPUT_SAMPLE_RATE_HZ)
        self._win = int(vad.window_samples)
        drop = getattr(config, "far_speech_drop_db", None) if far_speech_gate else None
        self.level_gate: SpeechLevelGate | None = None if drop is None else \
            SpeechLevelGate(float(getattr(config, "speech_level_reference_dbfs", -20.0)), float(drop))
        """The far-speech gate (None: off); it outlives :meth:`reset_all` (the user's level is theirs)."""
        self.onset_level_dbfs: float | None = None
        """Active level of the last speech onset's windows (admitted or not), dBFS."""
        self.reset_all()

    def reset_all(self) -> None:
        """Reset everything, including the sample clock."""
        self._vad.reset()
        self._pos = 0  # samples judged by the VAD so far
        self._fed = 0  # samples fed so far
        self._ring = np.zeros(0, np.float32)  # recent input audio
        self._ring_start = 0  # sample index of _ring[0]
        self._reset_turn()

    def _reset_turn(self) -> None:
        self._speaking = False
        self._cand_speech = 0  # speech samples since the last long silence (pre-onset)
        self._cand_start: int | None = None
        self._cand_energy = 0.0  # sum of squares of the candidate's speech windows
        self._turn_energy = 0.0  # ... and of the turn's (its level teaches the gate)
        self._onset = 0
        self._last_speech_end = 0
        self._speech_samples = 0
        self._silence_run = 0
        self._paused = False
        self._resume_run = 0  # speech windows since a pause (a resumption needs min_speech_ms)
        self._resume_energy = 0.0

    def reset(self) -> None:
        """Forget the utterance in progress."""
        self._reset_turn()

    @property
    def user_speaking(self) -> bool:
        return self._speaking

    @property
    def current_speech_ms(self) -> float:
        return self._speech_samples * 1000.0 / INPUT_SAMPLE_RATE_HZ if self._speaking else 0.0

    def feed(self, audio: np.ndarray) -> list[TurnSignal]:
        """Feed float32 16 kHz audio; returns ``speech_started`` / ``end_of_turn`` signals."""
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        self._ring = np.concatenate([self._ring, audio])
        self._fed += audio.size
        keep = self._max_keep + self._pad * 2
        if self._ring.size > keep:
            drop = self._ring.size - keep
            self._ring = self._ring[drop:]
            self._ring_start += drop
        signals: list[TurnSignal] = []
        for p in self._vad.process(audio):
            start = self._pos
            self._pos += self._win
            speech = float(p) >= self._threshold
            energy = self._window_energy(start) if speech else 0.0
            if not self._speaking:
                if speech:
                    if self._cand_start is None:
                        self._cand_start = start
                    self._cand_speech += self._win
                    self._cand_energy += energy
                    self._silence_run = 0
                    if self._cand_speech >= self._min_speech_samples and self._admit_onset():
                        self._speaking = True
                        self._onset = self._cand_start
                        self._speech_samples = self._cand_speech
                        self._turn_energy = self._cand_energy
                        self._last_speech_end = self._pos
                        signals.append(TurnSignal("speech_started", self._onset))
                else:
                    self._silence_run += self._win
                    if self._silence_run >= self._eot_samples:
                        self._cand_speech, self._cand_start, self._cand_energy = 0, None, 0.0
                        if self.level_gate is not None:
                            self.level_gate.quiet()
            else:
                if speech and self._paused:
                    # After a pause, only ``min_speech_ms`` of speech resumes the turn: a breath or a
                    # click would otherwise throw away the speculative reply (and delay the answer).
                    self._resume_run += self._win
                    self._resume_energy += energy
                    if self._resume_run >= self._min_speech_samples:
                        self._paused = False
                        self._speech_samples += self._resume_run
                        self._turn_energy += self._resume_energy
                        self._last_speech_end = self._pos
                        self._silence_run = self._resume_run = 0
                        self._resume_energy = 0.0
                        signals.append(TurnSignal("resumed", start))
                    else:
                        self._silence_run += self._win
                        if self._silence_run >= self._eot_samples and self._silence_ends_turn:
                            signals.append(self._end_turn())
                elif speech:
                    self._speech_samples += self._win
                    self._turn_energy += energy
                    self._last_speech_end = self._pos
                    self._silence_run = 0
                else:
                    self._resume_run, self._resume_energy = 0, 0.0
                    self._silence_run += self._win
                    if self._silence_ends_turn and self._silence_run >= self._eot_samples:
                        signals.append(self._end_turn())
                    elif self._report_pauses and self._silence_run >= self._pause_samples and not self._paused:
                        self._paused = True
                        signals.append(self._utterance_signal("pause"))
        return signals

    def _window_energy(self, start: int) -> float:
        """Sum of squares of the VAD window that starts at input sample ``start``."""
        i = start - self._ring_start
        return window_energy(self._ring[max(0, i) : i + self._win])

    def _admit_onset(self) -> bool:
        """Whether the candidate's speech windows are loud enough to be the user (see the gate);
        a refused candidate starts over (its windows count no more)."""
        self.onset_level_dbfs = active_level_dbfs(self._cand_energy, self._cand_speech)
        if self.level_gate is None or self.level_gate.admits(self.onset_level_dbfs):
            return True
        self._cand_speech, self._cand_start, self._cand_energy = 0, None, 0.0
        return False

    @property
    def far_speech_refused(self) -> int:
        return self.level_gate.refused if self.level_gate is not None else 0

    @property
    def window_samples(self) -> int:
        """The VAD's window, samples (decisions change only at window ends)."""
        return self._win

    @property
    def pending_samples(self) -> int:
        """Samples fed but not yet judged by the VAD (less than one window)."""
        return self._fed - self._pos

    @property
    def position(self) -> int:
        """Samples judged by the VAD so far (the media position of the latest decision)."""
        return self._pos

    @property
    def silence_ms(self) -> float:
        """Silence since the user's last speech in the turn in progress, ms (0 when not in a turn)."""
        return self._silence_run * 1000.0 / INPUT_SAMPLE_RATE_HZ if self._speaking else 0.0

    def recent_audio(self, samples: int) -> np.ndarray:
        """The last ``samples`` of input judged so far (fewer at the start), float32 16 kHz."""
        end = self._pos - self._ring_start
        return self._ring[max(0, end - samples) : end].copy()

    def current_utterance(self) -> np.ndarray | None:
        """The utterance in progress as a ``pause`` would carry it (None when the user is silent)."""
        if not self._speaking:
            return None
        sig = self._utterance_signal("pause")
        return sig.utterance

    def flush(self) -> TurnSignal | None:
        """End the utterance in progress now (a commit); ``None`` when the user is silent."""
        if not self._speaking:
            self._cand_speech, self._cand_start, self._cand_energy = 0, None, 0.0
            return None
        return self._end_turn()

    def _utterance_signal(self, kind: str) -> TurnSignal:
        start = max(self._onset - self._pad, self._ring_start)
        end = min(self._last_speech_end + self._tail, self._ring_start + self._ring.size)
        utt = self._ring[start - self._ring_start : end - self._ring_start].copy()
        speech_ms = self._speech_samples * 1000.0 / INPUT_SAMPLE_RATE_HZ
        return TurnSignal(kind, self._last_speech_end, utterance=utt, speech_ms=speech_ms)  # type: ignore[arg-type]

    def _end_turn(self) -> TurnSignal:
        sig = self._utterance_signal("end_of_turn")
        if self.level_gate is not None:
            self.level_gate.learn(active_level_dbfs(self._turn_energy, self._speech_samples))
        self._reset_turn()
        return sig
