"""The browser page at ``/``: a Gradio Blocks app with a FastRTC WebRTC conversation.

Layout: a "Talk" tab (one Start/Stop, camera switch, mute, interrupt, live state, level meters,
the conversation transcript, the camera preview with what the model was given, metrics, a
settings drawer that remembers its values in localStorage) and a "Chat (no mic)" tab
(:mod:`app.ui.chat_tab`). The call bar is plain HTML driven by ``assets/page.js``.

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

import html
import json
import logging
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr
from fastapi import FastAPI
from fastrtc import Stream, WebRTC

from app.constants import DEFAULT_INSTRUCTIONS, VISION_TILE_PX
from app.ui import gradio_log, rtc_log, video_intake
from app.ui import rtc as rtc_tuning
from app.ui.chat_tab import build_chat_tab
from app.ui.frames import MAX_STACK
from app.ui.handler import HandlerRegistry, OmniHandler
from app.ui.offline import OfflinePageMiddleware
from app.ui.routes import install_routes
from app.ui.settings import OVERLAP_CHOICES, UISettings
from app.ui.view import ConversationView, render_captions, render_metrics, render_status

log = logging.getLogger(__name__)

ASSETS = Path(__file__).parent / "assets"

SERVER_RTC_CONFIGURATION: dict[str, Any] = {"iceServers": []}
"""aiortc ICE config: no STUN/TURN (FastRTC's default would try Google STUN)."""

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
"""Camera capture constraints: the local preview's size and rate. What is sent is less
(``assets/page.js``: at most :data:`CAMERA_SEND_MAX_SIDE` px and the units' frame rate).

FastRTC 0.0.34's video component asks ``getUserMedia({video: track_constraints, audio: true})``:
for the ``audio-video`` component ``track_constraints`` is this dict itself (a nested
``{"audio", "video"}`` dict, as FastRTC's own default, ended up as unknown keys of the video
constraints: the camera came at the browser's default size and rate), and its mic gets the
browser's defaults, which are :data:`AUDIO_CONSTRAINTS`' (echo cancellation, noise suppression,
gain control on)."""

CAMERA_SEND_MAX_SIDE = VISION_TILE_PX
"""Longest side of the camera video the page sends, px: the models' tile (frames are fitted to it
on arrival anyway, :data:`app.ui.frames.MAX_FRAME_SIDE`); ``page.js`` scales its encoder down to it."""

BUTTON_LABELS = {"start": "Start", "stop": "Stop", "waiting": "Connecting…"}

SETTINGS_KEY = "omni-settings-v1"
"""localStorage key of the settings drawer's values (``gr.BrowserState``)."""

LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}

CALL_BAR = """
<div id="omni-call" class="omni-call" data-testid="call-bar">
  <button type="button" id="omni-start" data-testid="start" class="omni-start" data-mode="start"
          aria-describedby="omni-state-word"><span class="omni-start-icon" aria-hidden="true">&#9654;</span>
    <span class="omni-start-label" data-i18n="start">Start</span></button>
  <label class="omni-switch"><input type="checkbox" id="omni-camera" data-testid="camera-toggle" role="switch" checked>
    <span data-i18n="camera">Camera</span></label>
  <button type="button" id="omni-mute" data-testid="mute" class="omni-secondary" aria-pressed="false" hidden>
    <span data-i18n="mute">Mute mic</span></button>
  <div id="omni-state" data-testid="state" data-state="idle" class="omni-state" role="status" aria-live="polite">
    <span class="omni-state-dot" aria-hidden="true"></span><span id="omni-state-word" class="omni-state-word"
      data-i18n="state_idle">Ready</span></div>
  <button type="button" id="omni-interrupt" data-testid="interrupt" class="omni-interrupt" hidden>
    <span data-i18n="interrupt">Interrupt: stop the reply, listen to me</span></button>
  <div class="omni-meters">
    <div class="omni-meter-row"><span class="omni-meter-label" id="omni-mic-label" data-i18n="mic_level">You</span>
      <div class="omni-meter" id="omni-mic-meter" data-testid="mic-meter" role="meter" aria-labelledby="omni-mic-label"
           aria-valuemin="0" aria-valuemax="100" aria-valuenow="0"><i></i></div></div>
    <div class="omni-meter-row"><span class="omni-meter-label" id="omni-out-label" data-i18n="out_level">Assistant</span>
      <div class="omni-meter" id="omni-out-meter" data-testid="assistant-meter" role="meter"
           aria-labelledby="omni-out-label" aria-valuemin="0" aria-valuemax="100" aria-valuenow="0"><i></i></div></div>
  </div>
</div>
<div id="omni-alert" data-testid="omni-alert" role="alert" hidden></div>
<div id="omni-key" class="omni-key" data-testid="key-form" hidden>
  <label for="omni-key-input" data-i18n="key_label">Access key</label>
  <input id="omni-key-input" data-testid="key-input" type="password" autocomplete="current-password">
  <button type="button" id="omni-key-save" data-testid="key-save" class="omni-secondary" data-i18n="key_save">Use key</button>
</div>
"""
"""The call controls (driven by ``assets/page.js``): Start/Stop, camera switch, mute, interrupt,
the conversation state, level meters, the message banner and the access-key field."""

UNIT_PREVIEW = """
<div id="omni-unit" class="omni-unit" data-testid="unit-preview" hidden>
  <h2 class="panel-title" data-i18n="unit_title">What the model was given this unit</h2>
  <div class="omni-unit-row">
    <figure><img id="omni-unit-base" data-testid="unit-base" alt="Camera frame the model was given"
      data-i18n-alt="unit_base"><figcaption data-i18n="unit_base">Base frame</figcaption></figure>
    <figure id="omni-unit-stack-fig" hidden><img id="omni-unit-stack" data-testid="unit-stack"
      alt="Stacked frames the model was given"><figcaption data-i18n="unit_stack">Stacked frames</figcaption></figure>
  </div>
  <p class="omni-unit-read"><span data-i18n="unit_read">Description:</span>
    <span id="omni-unit-text" data-testid="unit-text">–</span></p>
</div>
"""
"""The unit preview: the base frame and stacked composite of the last unit
(``GET /webrtc/unit/{id}/{i}.jpg``) and the description of the frame the model was given; refreshed by ``page.js``."""

DEVICES = """
<div class="omni-devices" data-testid="devices">
  <label><span data-i18n="microphone">Microphone</span>
    <select id="omni-mic-select" data-testid="mic-select"><option value="" data-i18n="default">Default</option></select></label>
  <label><span data-i18n="camera_device">Camera</span>
    <select id="omni-cam-select" data-testid="camera-select"><option value="" data-i18n="default">Default</option></select></label>
  <label><span data-i18n="speaker">Speaker</span>
    <select id="omni-speaker-select" data-testid="speaker-select"><option value="" data-i18n="default">Default</option></select></label>
  <label><span data-i18n="volume">Assistant volume</span>
    <input id="omni-volume" data-testid="volume" type="range" min="0" max="1" step="0.05" value="1"></label>
</div>
"""
"""Device choice and assistant volume (client-side only; remembered in localStorage by ``page.js``)."""


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
    # (Gradio's subdued grey, #bbbbc2 on white, is 1.9:1: below WCAG AA; axe-core checks it)
    return gr.themes.Default(font=["system-ui", "sans-serif"], font_mono=["ui-monospace", "monospace"]).set(
        body_text_color_subdued="#4b5563", block_info_text_color="#4b5563")


def rtc_configuration(config: Any) -> dict[str, Any] | None:
    """The page's and aiortc's ICE config: ``server.ice_servers`` (STUN/TURN), else None (host candidates only)."""
    ice = list(config.server.ice_servers)
    return {"iceServers": ice} if ice else None


def _webrtc(modality: str, *, elem_id: str, label: str, ice: dict[str, Any] | None = None) -> WebRTC:
    # (the audio-video component takes track_constraints as its video constraints: VIDEO_CONSTRAINTS' note)
    constraints = VIDEO_CONSTRAINTS if modality == "audio-video" else AUDIO_CONSTRAINTS
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
        mirror_webcam=False,  # (FastRTC mirrors its preview anyway: page.js shows the local camera in it
                              # during a call; the unit preview shows what the model got)
    )


def _head() -> str:
    """The page's own scripts (``assets/page.js``, ``assets/barge_in.js``) and their settings."""
    label = next(k for k, v in OVERLAP_CHOICES.items() if v == "barge_in_on_speech")
    conf = json.dumps({"localBargeInLabel": label, "cameraSendMaxSide": CAMERA_SEND_MAX_SIDE})
    scripts = "".join(f"<script>{(ASSETS / name).read_text()}</script>" for name in ("page.js", "barge_in.js"))
    return f"<script>window.__omniConfig = {conf};</script>{scripts}"


def build_page(engine: Any, registry: HandlerRegistry, prototype: OmniHandler, defaults: UISettings,
               app_ref: dict[str, Any]) -> gr.Blocks:
    """Build the Blocks page (not yet mounted).

    Layout (Talk tab): the call bar (:data:`CALL_BAR`) on top, then the status line, the
    conversation transcript and the metrics and, beside them, the camera preview (what the model
    is given) with the unit's frames; the settings drawer (closed) below. The two FastRTC components keep their own
    buttons hidden: ``page.js`` presses them for the call bar.
    """
    cfg = engine.config
    limit = int(cfg.ui.concurrency_limit)
    empty = ConversationView().snapshot()
    head = _head()
    with gr.Blocks(title=cfg.ui.title, theme=_theme(), css=(ASSETS / "page.css").read_text(), head=head,
                   analytics_enabled=False) as blocks:
        recording = getattr(cfg, "recording", None) is not None and cfg.recording.dir  # serve --record-dir
        badge = ('<div data-testid="recording" class="omni-recording" role="status">&#9679; recording: this '
                 'conversation is stored on the server</div>') if recording else ""
        with gr.Row(elem_id="omni-header", equal_height=True):
            gr.HTML(f'<h1 class="omni-title">{cfg.ui.title}</h1>', elem_id="title", padding=False)
            gr.HTML(f'<div id="omni-recording-slot" class="omni-recording-slot">{badge}</div>', elem_id="recording-slot",
                    padding=False)
        model_info = gr.HTML("", elem_id="model-info", padding=False)
        with gr.Tabs(elem_id="tabs"):
            with gr.Tab("Talk", id="talk", elem_id="tab-talk"):
                gr.HTML(CALL_BAR, elem_id="call-box", padding=False)
                with gr.Row(elem_id="talk-row"):
                    with gr.Column(scale=3, min_width=300):
                        # (rendered once; then page.js writes it with the state pill: both from one message,
                        # and hides it while it only restates the pill)
                        gr.HTML(render_status(empty), elem_id="status-box", padding=False)
                        captions = gr.HTML(render_captions(empty), elem_id="captions-box", padding=False)
                        # (beside the transcript, not under the camera and the unit's frames: in a call at
                        # 1280x900 those pushed it below the fold)
                        metrics = gr.HTML(render_metrics(empty), elem_id="metrics-box", padding=False)
                    with gr.Column(scale=2, min_width=280, elem_id="preview-col"):
                        # Both stay mounted; the camera switch only hides one on the client (a server-side
                        # visibility update would make Gradio answer offers from a per-session copy of the
                        # component that has no handler).
                        with gr.Column(elem_id="av-wrap"):
                            rtc_av = _webrtc("audio-video", elem_id="webrtc-av", label="Your camera (mirror view)",
                                             ice=rtc_configuration(cfg))
                        with gr.Column(elem_id="audio-wrap", elem_classes=["omni-hidden"]):
                            rtc_a = _webrtc("audio", elem_id="webrtc-audio", label="Conversation (mic only)",
                                            ice=rtc_configuration(cfg))
                        gr.HTML(UNIT_PREVIEW, elem_id="unit-box", padding=False)
                with gr.Accordion("Conversation settings", open=False, elem_id="settings"):
                    instructions = gr.Textbox(value=defaults.instructions, label="Instructions (system prompt)",
                                              lines=2, elem_id="instructions")
                    with gr.Row():
                        speech = gr.Checkbox(value=defaults.speech, label="Speak replies (off: text only)",
                                             elem_id="speech-on")
                        overlap = gr.Radio(list(OVERLAP_CHOICES), value=_overlap_label(defaults.overlap_policy),
                                           label="When I talk over the assistant", elem_id="overlap")
                    with gr.Row():
                        temperature = gr.Slider(0.0, 1.5, value=defaults.temperature, step=0.05, label="Temperature",
                                                elem_id="temperature")
                        max_tokens = gr.Slider(4, 256, value=defaults.max_tokens, step=1,
                                               label="Reply tokens (session max_tokens)", elem_id="max-tokens",
                                               info="Caps each reply. MiniCPM-o: text tokens per unit (its default: 20).")
                        stack = gr.Slider(1, MAX_STACK, value=defaults.stack_frames, step=1,
                                          label="Frame stacking N (frames per unit)", elem_id="stack-frames")
                    unit_note = gr.Markdown("", elem_id="unit-note", elem_classes=["voice-note"])
                    with gr.Row():
                        voice_ref = gr.Audio(label="Reference voice (3–10 s)", sources=["upload"], type="filepath",
                                             interactive=False, elem_id="voice-ref")
                        voice_note = gr.Markdown("", elem_id="voice-note", elem_classes=["voice-note"])
                    gr.HTML(DEVICES, elem_id="devices-box", padding=False)
            with gr.Tab("Chat (no mic)", id="chat", elem_id="tab-chat"):
                build_chat_tab(app_ref, engine)

        saved = gr.BrowserState({}, storage_key=SETTINGS_KEY)
        remembered = [instructions, speech, temperature, max_tokens, stack, overlap]
        inputs = [*remembered, voice_ref]
        for rtc in (rtc_av, rtc_a):
            rtc.stream(fn=prototype, inputs=[rtc, *inputs], outputs=[rtc], concurrency_limit=limit, time_limit=None)
            _relay_outputs(rtc, [captions, metrics])  # (not the status line: page.js has it with the phase)

        def remember(*values: Any) -> dict[str, Any]:
            return dict(zip(SETTING_NAMES, values, strict=True))

        gr.on([c.change for c in remembered], remember, inputs=remembered, outputs=[saved], queue=False,
              show_progress="hidden")

        def on_load(stored: Any) -> tuple[Any, ...]:
            return (*_load_updates(engine), *_restore(stored, remembered_defaults(defaults)))

        blocks.load(on_load, inputs=[saved], outputs=[voice_ref, voice_note, model_info, unit_note, *remembered],
                     concurrency_limit=None)
    blocks.queue(default_concurrency_limit=max(4, limit))
    return blocks


SETTING_NAMES = ("instructions", "speech", "temperature", "max_tokens", "stack_frames", "overlap")
"""Names of the remembered settings in the stored dict (the drawer's inputs, in order)."""


def remembered_defaults(d: UISettings) -> tuple[Any, ...]:
    """The drawer's default values, in :data:`SETTING_NAMES` order."""
    return (d.instructions, d.speech, d.temperature, d.max_tokens, d.stack_frames, _overlap_label(d.overlap_policy))


def _restore(stored: Any, defaults: tuple[Any, ...]) -> list[Any]:
    """Updates that put back the remembered settings (values of the wrong type are ignored)."""
    out: list[Any] = []
    stored = stored if isinstance(stored, dict) else {}
    for name, default in zip(SETTING_NAMES, defaults, strict=True):
        value = stored.get(name)
        ok = value is not None and (isinstance(value, type(default)) or
                                    (isinstance(default, float) and isinstance(value, int)))
        if name == "overlap" and value not in OVERLAP_CHOICES:
            ok = False
        out.append(gr.update(value=value) if ok and value != default else gr.update())
    return out


def _overlap_label(policy: str) -> str:
    for label, value in OVERLAP_CHOICES.items():
        if value == policy:
            return label
    return next(iter(OVERLAP_CHOICES))


def _relay_outputs(rtc: WebRTC, outputs: list[Any]) -> None:
    """Stream a handler's ``AdditionalOutputs`` (view snapshots) into the captions and metrics.

    Like ``WebRTC.on_additional_outputs`` but unlimited concurrency (one long-lived event per
    connected page) and no progress overlay. The status line is not among them: it reaches the
    page with the phase, over the data channel (``assets/page.js`` writes it with the state pill),
    at once; a snapshot comes up to ``UI_PUSH_S`` later and would show a stale status.
    """

    async def relay(webrtc_id: Any):
        wid = webrtc_id if isinstance(webrtc_id, str) else getattr(webrtc_id, "webrtc_id", str(webrtc_id))
        async for out in rtc.output_stream(wid):
            snap = out.args[0] if out.args else {}
            yield render_captions(snap), render_metrics(snap)

    rtc.state_change(relay, inputs=[rtc], outputs=outputs, concurrency_limit=None, show_progress="hidden",
                     trigger_mode="once", queue=True)


def _languages(caps: dict[str, Any]) -> str:
    """Which languages the family understands and speaks, in words (with ``data-*`` for the page)."""
    langs = caps.get("languages") or {}
    hears = [LANGUAGE_NAMES.get(x, x) for x in langs.get("understands", [])]
    speaks = [LANGUAGE_NAMES.get(x, x) for x in langs.get("speaks", [])]
    voices = ", ".join(langs.get("voices", []))
    if not hears and not speaks:
        return ""
    text = f"Understands {' and '.join(hears) or '?'}; answers in {' and '.join(speaks) or '?'}"
    if speaks == ["English"]:
        text += " (even when asked in another language)"
    if voices:
        text += f"; voice: {voices}"
    return (f'<span class="omni-langs" data-testid="languages" data-understands="{",".join(langs.get("understands", []))}"'
            f' data-speaks="{",".join(langs.get("speaks", []))}">{html.escape(text)}.</span>')


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
    info = (f"Model family <code>{html.escape(str(caps.get('model_family', '?')))}</code> · unit "
            f"{caps.get('chunk_period_ms', '?')} ms · vision {'on' if vision else 'off'} · voice cloning "
            f"{'on' if cloning else 'off'} · {caps.get('max_sessions', '?')} conversation slot(s). "
            f"{_languages(caps)}")
    flags = (f'<div id="omni-caps" hidden data-vision="{int(vision)}" data-cloning="{int(cloning)}" '
             f'data-resume="{int(bool(caps.get("supports_session_resume")))}" '
             f'data-unit-ms="{caps.get("chunk_period_ms", "")}"></div>')
    unit = (f"Unit length: {caps.get('chunk_period_ms', '?')} ms (set by the server, "
            "`duplex_session.chunk_period_ms`; not changeable per conversation).")
    return gr.update(interactive=cloning), note, f'<div class="omni-info">{info}</div>{flags}', unit


def mount_ui(app: FastAPI, engine: Any) -> None:
    """Mount the page at ``/`` plus FastRTC's API routes and the side routes, on ``app``.

    Args:
        app: the FastAPI app; its API routes must already be included (they win over ``/``).
        engine: the :class:`~app.backend.engine.Engine` (may still be loading its family).
    """
    cfg = engine.config
    rtc_tuning.install()  # mic packets decoded as they arrive (aiortc would hold four of them back)
    video_intake.install()  # camera read with no video track back (the page sends its camera send-only)
    gradio_log.install()  # no 'content_type ...' line per FastRTC request in the log
    rtc_log.install()  # nor a WARNING per ICE candidate trickled before the offer is answered
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
    app.add_middleware(OfflinePageMiddleware)
    app.state.ui = {"registry": registry, "stream": stream, "blocks": blocks}
