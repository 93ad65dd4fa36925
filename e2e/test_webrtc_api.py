"""FastRTC's API route on the same app: a headless aiortc peer (no browser, no STUN) talks through
``POST /webrtc/offer`` and reads captions from ``GET /webrtc/state/{webrtc_id}``."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import numpy as np
import pytest

from e2e.media import speech_wav

pytestmark = pytest.mark.e2e


async def test_headless_peer_gets_a_spoken_answer(ui_server, media):
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
    from aiortc.contrib.media import MediaPlayer

    wav = speech_wav("What is the capital of France?", media / "api_france.wav", lead_s=1.5, tail_s=20.0)
    wid = uuid.uuid4().hex[:12]
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # aiortc's default would ask Google STUN
    pc.createDataChannel("text")
    player = MediaPlayer(str(wav))
    pc.addTrack(player.audio)
    levels: list[float] = []

    @pc.on("track")
    def on_track(track):
        async def pull():
            while True:
                try:
                    frame = await track.recv()
                except Exception:  # noqa: BLE001 - the track ended (MediaStreamError) or the pc closed
                    return
                x = frame.to_ndarray().astype(np.float32) / 32768.0
                levels.append(float(np.sqrt(np.mean(x * x))))

        asyncio.ensure_future(pull())

    try:
        await pc.setLocalDescription(await pc.createOffer())
        async with httpx.AsyncClient(base_url=ui_server.base_url, timeout=30) as client:
            r = await client.post("/webrtc/offer", json={"sdp": pc.localDescription.sdp, "type": "offer",
                                                         "webrtc_id": wid})
            assert r.status_code == 200, r.text
            await pc.setRemoteDescription(RTCSessionDescription(**r.json()))
            answer = None
            for _ in range(240):  # up to 60 s
                await asyncio.sleep(0.25)
                st = await client.get(f"/webrtc/state/{wid}")
                if st.status_code != 200:
                    continue
                caps = [c["text"] for c in st.json()["captions"] if c["role"] == "assistant"]
                if caps and "paris" in caps[-1].lower():
                    answer = caps[-1]
                    break
            assert answer, "no spoken answer through /webrtc/offer"
            for _ in range(40):
                if levels and max(levels) > 0.01:
                    break
                await asyncio.sleep(0.25)
            assert levels and max(levels) > 0.01, "no audible audio came back over WebRTC"
    finally:
        await pc.close()
        player.audio.stop()
