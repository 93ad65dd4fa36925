"""A duplex client whose microphone hears its own loudspeaker: the reply's audio comes back in
what it streams (:class:`app.client.echo_path.EchoPath`: client lead, room, level)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from app.client.duplex import DuplexClient
from app.client.echo_path import EchoPath
from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import float_to_pcm16, pcm16_to_float

CHUNK = INPUT_SAMPLE_RATE_HZ // 10  # 100 ms appends


class EchoingMic:
    """Streams ``client``'s microphone at real time with the received reply audio mixed back.

    Before each 100 ms append, the audio deltas that arrived since the last one start playing on
    ``path`` (at the samples sent so far, plus the path's lead); ``response.listen`` with a
    ``response_id`` (soft interrupt) or ``output_audio_buffer.cleared`` flush the playback queue.
    """

    def __init__(self, client: DuplexClient, path: EchoPath) -> None:
        self.client = client
        self.path = path
        self.sent = 0
        """Input samples sent (the microphone clock)."""
        self._seen = 0
        self._t0: float | None = None

    def _take_events(self) -> None:
        events = self.client.collector.events
        for e in events[self._seen :]:
            t = e["type"]
            if t == "response.output_audio.delta":
                self.path.receive(pcm16_to_float(base64.b64decode(e["delta"])), self.sent)
            elif t == "output_audio_buffer.cleared" or (t == "response.listen" and e.get("response_id")):
                self.path.drop(self.sent)
        self._seen = len(events)

    async def _send(self, chunk: np.ndarray) -> None:
        if self._t0 is None:
            self._t0 = time.monotonic()
        due = self._t0 + (self.sent + chunk.size) / INPUT_SAMPLE_RATE_HZ
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        self._take_events()
        mixed = self.path.mix(chunk, self.sent)
        await self.client.append_audio(float_to_pcm16(mixed))
        self.sent += chunk.size

    async def stream(self, audio: np.ndarray) -> None:
        """Stream ``audio`` (float32 16 kHz: what the user says) plus the echo."""
        audio = np.asarray(audio, np.float32)
        for i in range(0, audio.size, CHUNK):
            await self._send(audio[i : i + CHUNK])

    async def silence_until(self, cond: Callable[[list[dict[str, Any]]], bool], timeout_s: float) -> bool:
        """Stream silence (plus the echo) until ``cond(events)`` holds; False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cond(self.client.collector.events):
                return True
            await self._send(np.zeros(CHUNK, np.float32))
        return cond(self.client.collector.events)

    async def silence(self, seconds: float) -> None:
        """Stream ``seconds`` of silence (plus the echo)."""
        await self.stream(np.zeros(int(seconds * INPUT_SAMPLE_RATE_HZ), np.float32))
