"""The browser page at ``/``: a Gradio Blocks app with a FastRTC WebRTC conversation.

Layout: a "Talk" tab (WebRTC start/stop, camera + mic or mic only, live captions, metrics,
force listen, settings) and a "Chat (no mic)" tab (:mod:`app.ui.chat_tab`).

Offline by construction: no STUN on either side unless ``server.ice_servers`` names some
(``rtc_configuration=None`` in the page, ``server_rtc_configuration={"iceServers": []}`` for aiortc), a system-font theme (no web fonts),
``GRADIO_ANALYTICS_ENABLED=False``, and none of FastRTC's VAD/STT/TTS helpers (they download
models). Two WebRTC components share one handler class (:class:`~app.ui.handler.OmniHandler`):
``audio-video`` and ``audio``; the camera switch shows one or the other.

:func:`mount_ui` also mounts FastRTC's API routes (``POST /webrtc/offer`` …, headless clients)
and the side routes (:mod:`app.ui.routes`) BEFORE Gradio is mounted at ``/``, so every API
route (``/v1/...``, ``/health``, ``/metrics``, ``/webrtc/...``) still wins over the page.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr
from fastapi import FastAPI
from fastrtc import Stream, WebRTC

from app.constants import DEFAULT_INSTRUCTIONS
from app.ui import rtc as rtc_tuning
from app.ui.chat_tab import build_chat_tab
from app.ui.frames import MAX_STACK
from app.ui.handler import HandlerRegistry, OmniHandler
from app.ui.routes import install_routes
from app.ui.settings import OVERLAP_CHOICES, UISettings
from app.ui.view import ConversationView, render_captions, render_metrics, render_status

log = logging.getLogger(__name__)

ASSETS = Path(__file__).parent / "assets"

SERVER_RTC_CONFIGURATION: dict[str, Any] = {"iceServers": []}
"""aiortc ICE config: no STUN/TURN (FastRTC's default would try Google STUN)."""

CAMERA_ON = "Camera + mic"
CAMERA_OFF = "Mic only"

AUDIO_CONSTRAINTS: dict[str, Any] = {
    "echoCancellation": True,
    "noiseSuppression": True,
    "autoGainControl": True,
    "channelCount": {"ideal": 1},
}
"""Mic constraints: echo cancellation on (the assistant's voice must not barge in on itself)."""

VIDEO_CONSTRAINTS: dict[str, Any] = {
    "facingMode": "user",
    "width": {"ideal": 640},
    "height": {"ideal": 480},
    "frameRate": {"ideal": 15, "max": 30},
}
"""Camera constraints: modest size and rate (the model reads one or a few frames per unit)."""

BUTTON_LABELS = {"start": "Start", "stop": "Stop", "waiting": "Connecting…"}

CAMERA_JS = f"""(mode) => {{
  const av = mode === "{CAMERA_ON}";
  const a = document.getElementById("av-wrap"), b = document.getElementById("audio-wrap");
  if (a) a.classList.toggle("omni-hidden", !av);
  if (b) b.classList.toggle("omni-hidden", av);
  return [];
}}"""
"""Client-side camera switch: show the audio-video or the audio-only WebRTC component."""


def default_settings(config: Any) -> UISettings:
    """Page defaults from the deploy config (stage 0 sampling, ``ui.default_stack_frames``)."""
    sp = config.stage(0).default_sampling_params
    return UISettings(
        instructions=DEFAULT_INSTRUCTIONS,
        speech=True,
        temperature=float(sp.temperature or 0.0),
        max_tokens=int(sp.max_tokens or config.turn_policy.max_reply_tokens),
        stack_frames=max(1, min(MAX_STACK, int(config.ui.default_stack_frames))),
        overlap_policy="barge_in_on_speech",
    )


def _theme() -> gr.themes.Base:
    return gr.themes.Default(font=["system-ui", "sans-serif"], font_mono=["ui-monospace", "monospace"])


def rtc_configuration(config: Any) -> dict[str, Any] | None:
    """The page's and aiortc's ICE config: ``server.ice_servers`` (STUN/TURN), else None (host candidates only)."""
    ice = list(config.server.ice_servers)
    return {"iceServers": ice} if ice else None


def _webrtc(modality: str, *, elem_id: str, label: str, ice: dict[str, Any] | None = None) -> WebRTC:
    constraints: dict[str, Any] = (
        {"audio": AUDIO_CONSTRAINTS, "video": VIDEO_CONSTRAINTS} if modality == "audio-video" else AUDIO_CONSTRAINTS
    )
    return WebRTC(
        label=label,
        modality=modality,  # type: ignore[arg-type]
        mode="send-receive",
        rtc_configuration=ice,
        server_rtc_configuration=ice or SERVER_RTC_CONFIGURATION,
        track_constraints=constraints,
        full_screen=False,
        button_labels=BUTTON_LABELS,
        elem_id=elem_id,
        mirror_webcam=False,  # the video shown is what the model sees: keep text readable
    )


def _head() -> str:
    """The page's own scripts (``assets/page.js``, ``assets/barge_in.js``) and their settings."""
    label = next(k for k, v in OVERLAP_CHOICES.items() if v == "barge_in_on_speech")
    conf = json.dumps({"localBargeInLabel": label})
    scripts = "".join(f"<script>{(ASSETS / name).read_text()}</script>" for name in ("page.js", "barge_in.js"))
    return f"<script>window.__omniConfig = {conf};</script>{scripts}"


def build_page(engine: Any, registry: HandlerRegistry, prototype: OmniHandler, defaults: UISettings,
               app_ref: dict[str, Any]) -> gr.Blocks:
    """Build the Blocks page (not yet mounted)."""
    cfg = engine.config
    limit = int(cfg.ui.concurrency_limit)
    empty = ConversationView().snapshot()
    head = _head()
    with gr.Blocks(title=cfg.ui.title, theme=_theme(), css=(ASSETS / "page.css").read_text(), head=head,
                   analytics_enabled=False) as blocks:
        gr.Markdown(f"## {cfg.ui.title}", elem_id="title")
        if getattr(cfg, "recording", None) is not None and cfg.recording.dir:  # serve --record-dir: personal data
            gr.HTML('<div data-testid="recording" role="status">&#9679; recording: this conversation is stored '
                    'on the server</div>', elem_id="recording-badge", padding=False)
        gr.HTML('<div id="omni-alert" data-testid="omni-alert" hidden></div>', elem_id="alert-box", padding=False)
        model_info = gr.Markdown("", elem_id="model-info")
        with gr.Tabs(elem_id="tabs"):
            with gr.Tab("Talk", id="talk", elem_id="tab-talk"):
                with gr.Row():
                    with gr.Column(scale=3):
                        camera = gr.Radio([CAMERA_ON, CAMERA_OFF], value=CAMERA_ON, label="Input",
                                          elem_id="camera-mode")
                        # Both stay mounted; the camera switch only hides one on the client (a server-side
                        # visibility update would make Gradio answer offers from a per-session copy of the
                        # component that has no handler).
                        with gr.Column(elem_id="av-wrap"):
                            rtc_av = _webrtc("audio-video", elem_id="webrtc-av", label="Conversation (camera + mic)",
                                             ice=rtc_configuration(cfg))
                        with gr.Column(elem_id="audio-wrap", elem_classes=["omni-hidden"]):
                            rtc_a = _webrtc("audio", elem_id="webrtc-audio", label="Conversation (mic only)",
                                            ice=rtc_configuration(cfg))
                        with gr.Row():
                            force = gr.Button("Force listen", elem_id="force-listen", variant="secondary")
                        status = gr.HTML(render_status(empty), elem_id="status-box", padding=False)
                    with gr.Column(scale=2):
                        captions = gr.HTML(render_captions(empty), label="Live captions", elem_id="captions-box", padding=False)
                        metrics = gr.HTML(render_metrics(empty), label="Metrics", elem_id="metrics-box", padding=False)
                with gr.Accordion("Settings", open=True, elem_id="settings"):
                    with gr.Row():
                        instructions = gr.Textbox(value=defaults.instructions, label="Instructions (system prompt)",
                                                  lines=2, elem_id="instructions", scale=3)
                        with gr.Column(scale=2):
                            speech = gr.Checkbox(value=defaults.speech, label="Speak replies (off: text only)",
                                                 elem_id="speech-on")
                            overlap = gr.Radio(list(OVERLAP_CHOICES), value=_overlap_label(defaults.overlap_policy),
                                               label="When I talk over the assistant", elem_id="overlap")
                    with gr.Row():
                        temperature = gr.Slider(0.0, 1.5, value=defaults.temperature, step=0.05, label="Temperature",
                                                elem_id="temperature")
                        max_tokens = gr.Slider(4, 256, value=defaults.max_tokens, step=1,
                                               label="Tokens per unit (session max_tokens)", elem_id="max-tokens",
                                               info="MiniCPM-o: text tokens it may speak per unit (default 20); "
                                                    "the tiny family caps its whole reply with it")
                        stack = gr.Slider(1, MAX_STACK, value=defaults.stack_frames, step=1,
                                          label="Frame stacking N (frames per unit)", elem_id="stack-frames")
                    with gr.Row():
                        voice_ref = gr.Audio(label="Reference voice (3–10 s)", sources=["upload"], type="filepath",
                                             interactive=False, elem_id="voice-ref")
                        voice_note = gr.Markdown("", elem_id="voice-note", elem_classes=["voice-note"])
            with gr.Tab("Chat (no mic)", id="chat", elem_id="tab-chat"):
                build_chat_tab(app_ref, engine)

        inputs = [instructions, speech, temperature, max_tokens, stack, overlap, voice_ref]
        for rtc in (rtc_av, rtc_a):
            rtc.stream(fn=prototype, inputs=[rtc, *inputs], outputs=[rtc], concurrency_limit=limit, time_limit=None)
            _relay_outputs(rtc, [status, captions, metrics])
            rtc.start_recording(lambda: (gr.update(interactive=False), render_status(_status("Connecting…"))),
                                outputs=[camera, status], queue=False)
            rtc.stop_recording(lambda: gr.update(interactive=True), outputs=[camera], queue=False)

        camera.change(None, inputs=[camera], outputs=None, js=CAMERA_JS)

        def on_force(av_id: Any, a_id: Any) -> None:
            for wid in (av_id, a_id):
                h = registry.get(wid if isinstance(wid, str) else getattr(wid, "webrtc_id", None))
                if h is not None and h.force_listen():
                    return

        force.click(on_force, inputs=[rtc_av, rtc_a], outputs=None, concurrency_limit=None, show_progress="hidden")

        def on_load() -> tuple[Any, Any, Any, Any]:
            return _load_updates(engine)

        blocks.load(on_load, outputs=[voice_ref, voice_note, model_info, camera], concurrency_limit=None)
    blocks.queue(default_concurrency_limit=max(4, limit))
    return blocks


def _status(text: str, level: str = "info") -> dict[str, Any]:
    return {"status": text, "level": level}


def _overlap_label(policy: str) -> str:
    for label, value in OVERLAP_CHOICES.items():
        if value == policy:
            return label
    return next(iter(OVERLAP_CHOICES))


def _relay_outputs(rtc: WebRTC, outputs: list[Any]) -> None:
    """Stream a handler's ``AdditionalOutputs`` (view snapshots) into the page components.

    Like ``WebRTC.on_additional_outputs`` but unlimited concurrency (one long-lived event per
    connected page) and no progress overlay.
    """

    async def relay(webrtc_id: Any):
        wid = webrtc_id if isinstance(webrtc_id, str) else getattr(webrtc_id, "webrtc_id", str(webrtc_id))
        snap: dict[str, Any] = {}
        async for out in rtc.output_stream(wid):
            snap = out.args[0] if out.args else {}
            yield render_status(snap), render_captions(snap), render_metrics(snap)
        # The connection ended. Gradio re-applies an event's last output when it completes, so the
        # final status is set here (a refusal message stays).
        if snap.get("level") != "error":
            yield render_status(_status("Stopped. Press Start to talk again.")), render_captions(snap), \
                render_metrics(snap)

    rtc.state_change(relay, inputs=[rtc], outputs=outputs, concurrency_limit=None, show_progress="hidden",
                     trigger_mode="once", queue=True)


def _load_updates(engine: Any) -> tuple[Any, Any, Any, Any]:
    """Per-page-load updates that depend on the loaded family (capability flags, not names)."""
    try:
        caps = engine.capabilities()
    except Exception:  # noqa: BLE001 - family not loaded yet: show what is known
        caps = {}
    cloning = bool(caps.get("supports_voice_cloning"))
    if cloning:
        note = "Upload 3–10 s of clean speech; it is used from the next Start."
    else:
        note = ("Voice cloning is not supported by the loaded model family, so the upload is disabled; "
                "replies use its built-in voice.")
    vision = bool(caps.get("supports_vision", True))
    info = (f"Model family `{caps.get('model_family', '?')}` · unit {caps.get('chunk_period_ms', '?')} ms · "
            f"vision {'on' if vision else 'off'} · voice cloning {'on' if cloning else 'off'} · "
            f"{caps.get('max_sessions', '?')} conversation slot(s)")
    camera = gr.update() if vision else gr.update(value=CAMERA_OFF)
    return gr.update(interactive=cloning), note, info, camera


def mount_ui(app: FastAPI, engine: Any) -> None:
    """Mount the page at ``/`` plus FastRTC's API routes and the side routes, on ``app``.

    Args:
        app: the FastAPI app; its API routes must already be included (they win over ``/``).
        engine: the :class:`~app.backend.engine.Engine` (may still be loading its family).
    """
    cfg = engine.config
    rtc_tuning.install()  # mic packets decoded as they arrive (aiortc would hold four of them back)
    registry = HandlerRegistry()
    defaults = default_settings(cfg)
    app_ref: dict[str, Any] = {"app": app}
    prototype = OmniHandler(engine, registry, defaults=defaults)
    blocks = build_page(engine, registry, prototype, defaults, app_ref)

    api_handler = OmniHandler(engine, registry, defaults=defaults, page_outputs=False, args_timeout_s=0)
    stream = Stream(api_handler, mode="send-receive", modality="audio-video",
                    concurrency_limit=int(cfg.ui.concurrency_limit), rtc_configuration=rtc_configuration(cfg),
                    server_rtc_configuration=rtc_configuration(cfg) or SERVER_RTC_CONFIGURATION,
                    track_constraints={"audio": AUDIO_CONSTRAINTS, "video": VIDEO_CONSTRAINTS}, verbose=False)
    stream.mount(app)
    install_routes(app, registry)
    gr.mount_gradio_app(app, blocks, path="/", show_api=False, ssr_mode=False)
    app.state.ui = {"registry": registry, "stream": stream, "blocks": blocks}
