"""EchoGate (app/backend/duplex/echo.py) on its own: the reference timeline, the delay lock, the
per-window verdicts and the VAD wrapper (espeak-ng speech through a simulated sox room)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from app.backend.duplex.echo import EchoGate, GatedVad, ReferenceTimeline
from app.client.echo_path import EchoPath
from app.media import resample
from tests.conftest import espeak_wav

W = 512


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    d = tmp_path_factory.mktemp("echo")
    reply, _ = sf.read(espeak_wav("Once upon a time a little cat lived in a big house near the river, and every "
                                  "morning she walked to the water.", d / "reply.wav"), dtype="float32")
    user, _ = sf.read(espeak_wav("Wait, what is the capital of France?", d / "user.wav", rate_wpm=150),
                      dtype="float32")
    return resample(reply, 16_000, 24_000), user


def _session(reply24, *, lead_ms, gain_db, room, user=None, user_at=0, gated=True, release_at=16_000):
    """Release the reply in 1 s deltas (<= 1.5 s ahead), stream 100 ms of mic at a time; verdicts per window."""
    gate = EchoGate(enabled=gated)
    path = EchoPath(gain_db=gain_db, lead_ms=lead_ms, room=room)
    deltas = [reply24[i : i + 24_000] for i in range(0, reply24.size, 24_000)]
    total = release_at + int(reply24.size / 1.5) + int((lead_ms / 1000 + 2.0) * 16_000)
    clean = np.zeros(total, np.float32)
    if user is not None:
        clean[user_at : user_at + user.size] = user[: total - user_at]
    clean += (1e-4 * np.random.default_rng(0).standard_normal(total)).astype(np.float32)
    sent, k, verdicts, echo = 0.0, 0, [], []
    for pos in range(0, total - 1599, 1600):
        while pos >= release_at and k < len(deltas) and sent < (pos - release_at) / 16 + 1500:
            gate.play(deltas[k], pos)
            path.receive(deltas[k], pos)
            sent += deltas[k].size / 24
            k += 1
        e = path.echo(pos, 1600)
        echo.append(e)
        verdicts.append(gate.judge(clean[pos : pos + 1600] + e))
    return gate, np.concatenate(verdicts), np.concatenate(echo), clean


def _levels(x):
    n = x.size // W
    return 10 * np.log10(np.mean(x[: n * W].reshape(n, W).astype(np.float64) ** 2, axis=1) + 1e-12)


def test_reference_timeline_plays_deltas_back_to_back_and_restarts_after_an_underrun():
    t = ReferenceTimeline()
    assert t.place(np.ones(100, np.float32), 1000) == 1000
    assert t.place(np.ones(100, np.float32), 1050) == 1100  # queued behind the first
    assert t.place(np.ones(50, np.float32), 5000) == 5000  # the client ran dry: starts on arrival
    assert t.segment(1190, 1210).tolist() == [1.0] * 10 + [0.0] * 10
    t.drop_after(5020, now=5020)
    assert t.segment(5010, 5030).tolist() == [1.0] * 10 + [0.0] * 10
    t.trim(1150)
    assert t.start == 1150 and t.segment(1100, 1160).tolist() == [0.0] * 50 + [1.0] * 10


@pytest.mark.parametrize(("lead_ms", "gain_db", "room"), [(0, -6, "wet"), (700, -12, "room"), (1500, -20, "dry")])
def test_the_echo_delay_locks_and_echo_windows_are_marked(voices, lead_ms, gain_db, room):
    reply, _ = voices
    gate, verdicts, echo, _ = _session(reply, lead_ms=lead_ms, gain_db=gain_db, room=room)
    assert gate.delay_ms is not None and abs(gate.delay_ms - lead_ms) <= 5.0, gate.stats
    loud = _levels(echo) > -50.0
    n = min(loud.size, verdicts.size)
    assert loud[:n].sum() > 50
    assert verdicts[:n][loud[:n]].mean() >= 0.97


def test_speech_over_the_echo_passes_where_the_user_is_louder(voices):
    reply, user = voices
    at = 16_000 + 40_000
    _gate, verdicts, echo, clean = _session(reply, lead_ms=300, gain_db=-6, room="wet", user=user, user_at=at)
    n = min(verdicts.size, clean.size // W)
    over = (_levels(clean)[:n] > _levels(echo)[:n] + 6.0) & (_levels(clean)[:n] > -45.0)
    assert over.sum() >= 10
    assert (~verdicts[:n][over]).mean() >= 0.9


def test_without_an_echo_path_the_gate_steps_aside_after_the_acquisition_budget(voices):
    reply, user = voices
    at = 16_000 + 24_000
    gate, verdicts, _, clean = _session(reply, lead_ms=0, gain_db=-200, room="dry", user=user, user_at=at)
    assert gate.delay_ms is None
    n = min(verdicts.size, clean.size // W)
    speech = np.nonzero(_levels(clean)[:n] > -45.0)[0]
    first = speech[0]
    assert verdicts[first + 12 : n][_levels(clean)[first + 12 : n] > -45.0].mean() == 0.0  # after 256 ms + slack


def test_gated_vad_zeroes_echo_windows_only():
    class Ones:
        window_samples = W

        def process(self, chunk):
            self.n = getattr(self, "n", 0) + chunk.size
            k, self.n = self.n // W, self.n % W
            return np.ones(k, np.float32)

        def reset(self):
            self.n = 0

    class Half(EchoGate):
        def judge(self, audio):
            v = super().judge(audio)
            return np.arange(v.size) % 2 == 0

    vad = GatedVad(Ones(), Half())
    p = vad.process(np.zeros(W * 4 + 100, np.float32))
    assert p.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert vad.window_samples == W
