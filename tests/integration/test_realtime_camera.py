"""The camera through the realtime route: frames drawn here, a question spoken by espeak-ng, and
the real tiny family describing the frames in the background (app/backend/duplex/camera.py)."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image, ImageDraw

from app.client.duplex import DuplexClient
from tests.conftest import espeak_wav
from tests.integration.rt_helpers import silence, wav_pcm16

pytestmark = pytest.mark.asyncio(loop_scope="session")


def frame(shape: str, colour: str) -> str:
    """A 640x480 JPEG (base64) of one big ``colour`` ``shape`` on white."""
    img = Image.new("RGB", (640, 480), "white")
    draw = ImageDraw.Draw(img)
    box = [170, 90, 470, 390]
    (draw.ellipse if shape == "circle" else draw.rectangle)(box, fill=colour)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=80)
    return base64.b64encode(buf.getvalue()).decode()


async def test_a_question_asked_while_showing_a_new_frame_is_answered_from_it(server, speech_dir):
    """Two silent seconds show a blue square; the red circle comes into view about 0.4 s after the
    user has started asking (the read at speech onset still sees the square; unit 2's frame rides
    the append at 3.03 s, the question starts at 2.6 s and lasts ~3 s): the reply names the circle."""
    question = wav_pcm16(espeak_wav("Tell me, what can you see in front of the camera right now?",
                                    speech_dir / "see.wav", lead_s=0.6, tail_s=1.5))
    pcm = silence(2.0) + question
    n_units = len(pcm) // (2 * 16_000) + 2
    frames = [frame("square", "blue")] * 2 + [frame("circle", "red")] * n_units  # units 0-1: square
    async with DuplexClient(server.ws_url) as c:
        await c.stream_pcm(pcm, chunk_ms=100, realtime=True, video_frames=frames)
        mark = len(c.collector.events)
        await c.commit()
        await c.wait_for("response.done", timeout_s=60, after_index=mark)
    ev = c.collector.events
    seen = [e.get("seen_text", "") for e in ev if e["type"] == "session.unit_metrics"]
    assert any("blue square" in s for s in seen), seen  # the square was seen first
    created = next(i for i, e in enumerate(ev) if e["type"] == "response.created")
    seen_before_reply = [e.get("seen_text", "") for e in ev[:created] if e["type"] == "session.unit_metrics"]
    assert "red circle" in seen_before_reply[-1], seen_before_reply
    reply = "".join(e["delta"] for e in ev if e["type"] == "response.output_audio_transcript.delta").lower()
    assert ("red" in reply or "circle" in reply) and "blue" not in reply and "square" not in reply, reply
