// The page's call controls (no network beyond this server, no dependencies).
//
//  * One Start (#omni-start): asks for the mic (and the camera when the camera switch is on) and
//    starts the conversation by pressing the hidden FastRTC component's own buttons; the same
//    control stops it. Camera switch, mic mute (the local track's `enabled`; separate from
//    Stop), an interrupt control shown while the assistant speaks (POST /webrtc/force_listen).
//  * The conversation state (#omni-state, data-state = idle / connecting / listening / thinking
//    / speaking / interrupted / error) and the status line (#status) come from the server, in one
//    message: the page handler sends {"type": "omni_phase", "phase", "status", "level"} on
//    FastRTC's data channel at each session event that changes them, and {"type": "omni_status",
//    ...} for a notice that changes the status alone (app/ui/handler.py, view.py); both are shown
//    at once, so they never disagree. Gradio renders #status once; only this script writes it
//    then (and puts it back if Gradio re-renders it). Only "connecting" (Start pressed), "idle"
//    (stopped) and problems found here (mic denied, no connection) are the page's own. The line
//    is hidden while it only restates the pill ("Listening…" by "Listening"): it shows what the
//    pill does not say ("Connected.", "Hearing you…", a notice, an error).
//  * Level meters of the mic and of the assistant (levels measured by barge_in.js, drawn 10x/s
//    while a call is live; nothing runs when idle).
//  * Human messages in a banner (#omni-alert): mic/camera denied or missing, server full (with
//    when to retry, from the refusal), connection lost (reconnects by itself and says that a new
//    conversation began, or that it continued when the server resumes sessions), key required
//    (a 401 from this server: a key field; the key goes out as `Authorization: Bearer`).
//  * Devices (mic / camera / speaker), assistant volume, camera switch: remembered in localStorage.
//  * Texts in English or Simplified Chinese from the browser language (elements with data-i18n).
//  * A second click on FastRTC's start button while it is still connecting is ignored (it would
//    open a second connection); closing the page closes its WebRTC connections (pagehide).
//  * No mic or camera stays live once a call ends (Stop, refusal, lost connection, pagehide): see
//    "media: every track ends with the call" below.
//  * The camera costs little: sent send-only at the rate the units read it and the models' size, the
//    preview from the local camera ("camera: what the model reads, no video back" below).
//  * window.__omni: {webrtcId, alerts, phases ({phase, status, t}), gumAt, ignoredClicks, lang, levels} for tests.
(() => {
  if (window.__omniPageHooks) return;
  window.__omniPageHooks = true;
  const S = (window.__omni = window.__omni || {});
  const cfg = window.__omniConfig || {};
  S.alerts = S.alerts || [];
  S.phases = S.phases || [];
  S.webrtcId = S.webrtcId || null;
  S.ignoredClicks = S.ignoredClicks || 0;

  // ------------------------------------------------------------------ texts
  const TEXT = {
    en: {
      start: "Start", stop: "Stop", connecting: "Connecting…", retry: "Try again", camera: "Camera",
      mute: "Mute mic", unmute: "Unmute mic", interrupt: "Interrupt: stop the reply, listen to me",
      state_idle: "Ready: press Start and talk", state_connecting: "Connecting…", state_listening: "Listening",
      state_thinking: "Thinking…", state_speaking: "Speaking (talk to interrupt)", state_interrupted: "Interrupted: listening",
      state_error: "Problem: see the message above", state_ended: "Conversation ended",
      status_idle: "Press Start to talk.", status_stopped: "Stopped. Press Start to talk again.",
      status_connecting: "Connecting…",
      mic_level: "You", out_level: "Assistant", you: "You", assistant: "Assistant", interrupted_mark: "interrupted",
      transcript: "Conversation", transcript_empty: "The conversation appears here.", metrics: "Metrics",
      key_label: "Access key", key_save: "Use key", microphone: "Microphone", camera_device: "Camera",
      speaker: "Speaker", volume: "Assistant volume", default: "Default",
      denied: "Microphone or camera access was denied. Allow it for this page in the browser's site settings (the icon left of the address), then press Start again. Without a camera, switch Camera off.",
      missing: "No usable microphone or camera was found. Connect one (or switch Camera off) and press Start again.",
      busy: "The microphone or camera is in use by another application. Close it, then press Start again.",
      insecure: "This browser allows the microphone only on https:// or localhost pages. Open the page that way.",
      full: "The server is full: all {slots} conversation slot(s) are in use. Try again in {s} s.",
      full_now: "The server was busy. Press Start to try again.",
      lost: "The connection was lost. Reconnecting… (attempt {n})",
      lost_gave_up: "The connection was lost and could not be restored. Check the network, then press Start.",
      new_conv: "Reconnected. A new conversation began: the server could not continue the old one.",
      same_conv: "Reconnected. The conversation continued.",
      key: "This server needs an access key. Enter it below and press Start.",
      key_wrong: "The access key was not accepted. Check it and press Start again.",
      failed: "Could not connect to the server. Press Start to try again.",
      unit_title: "What the model was given this unit", unit_base: "Base frame", unit_stack: "Stacked frames",
      unit_read: "Description:",
    },
    zh: {
      start: "开始", stop: "停止", connecting: "正在连接…", retry: "重试", camera: "摄像头",
      mute: "麦克风静音", unmute: "取消静音", interrupt: "打断：停止回答，听我说",
      state_idle: "就绪：按“开始”后说话", state_connecting: "正在连接…", state_listening: "正在聆听",
      state_thinking: "正在思考…", state_speaking: "正在说话（开口即可打断）", state_interrupted: "已打断：正在聆听",
      state_error: "出现问题：请看上方提示", state_ended: "对话已结束",
      status_idle: "按“开始”后说话。", status_stopped: "已停止。按“开始”可再次对话。", status_connecting: "正在连接…",
      mic_level: "你", out_level: "助手", you: "你", assistant: "助手", interrupted_mark: "已打断",
      transcript: "对话", transcript_empty: "对话内容会显示在这里。", metrics: "指标",
      key_label: "访问密钥", key_save: "使用密钥", microphone: "麦克风", camera_device: "摄像头",
      speaker: "扬声器", volume: "助手音量", default: "默认",
      denied: "麦克风或摄像头权限被拒绝。请在浏览器的网站设置中（地址栏左侧图标）允许此页面使用，然后再按“开始”。没有摄像头时请关闭“摄像头”。",
      missing: "没有找到可用的麦克风或摄像头。请连接设备（或关闭“摄像头”），然后再按“开始”。",
      busy: "麦克风或摄像头正被其他应用占用。请关闭该应用，然后再按“开始”。",
      insecure: "浏览器只允许 https:// 或 localhost 页面使用麦克风。请用这种方式打开本页。",
      full: "服务器已满：全部 {slots} 个对话名额都在使用中。请在 {s} 秒后重试。",
      full_now: "服务器刚才繁忙。请按“开始”重试。",
      lost: "连接已断开，正在重新连接…（第 {n} 次）",
      lost_gave_up: "连接已断开且无法恢复。请检查网络，然后按“开始”。",
      new_conv: "已重新连接。这是一个新的对话：服务器无法继续之前的对话。",
      same_conv: "已重新连接。对话继续进行。",
      key: "此服务器需要访问密钥。请在下方输入后按“开始”。",
      key_wrong: "访问密钥未被接受。请检查后再按“开始”。",
      failed: "无法连接到服务器。请按“开始”重试。",
      unit_title: "本单元交给模型的画面", unit_base: "基础帧", unit_stack: "叠加帧", unit_read: "画面描述：",
    },
  };
  const langs = (navigator.languages && navigator.languages.length ? navigator.languages : [navigator.language || "en"]);
  const lang = String(langs[0] || "en").toLowerCase().startsWith("zh") ? "zh" : "en";
  S.lang = lang;
  function setText(el, s) { if (el && el.textContent !== s) el.textContent = s; }  // (no mutation when unchanged)
  function t(key, vars) {
    let s = (TEXT[lang] && TEXT[lang][key]) || TEXT.en[key] || key;
    for (const k in vars || {}) s = s.split("{" + k + "}").join(String(vars[k]));
    return s;
  }
  function translate(root) {
    if (lang === "en") return;
    for (const el of (root || document).querySelectorAll("[data-i18n]")) {
      const s = TEXT.zh[el.dataset.i18n];
      if (s && el.textContent !== s) el.textContent = s;
    }
  }
  if (lang !== "en") document.documentElement.lang = "zh-CN";

  // ------------------------------------------------------------------ storage
  function load(key, fallback) {
    try { const v = JSON.parse(localStorage.getItem(key)); return v === null ? fallback : v; } catch (_) { return fallback; }
  }
  function save(key, value) { try { localStorage.setItem(key, JSON.stringify(value)); } catch (_) {} }
  const prefs = load("omni-call-v1", {});  // {camera, mic, cam, speaker, volume}
  function setPref(k, v) { prefs[k] = v; save("omni-call-v1", prefs); }

  // ------------------------------------------------------------------ banner
  const $ = (id) => document.getElementById(id);
  function banner(msg, level) {
    const el = $("omni-alert");
    S.alerts.push({ level: level || "error", message: msg, t: performance.now() });
    if (!el) return;
    el.textContent = msg;
    el.dataset.level = level || "error";
    el.hidden = false;
  }
  function hideBanner() { const el = $("omni-alert"); if (el) el.hidden = true; }
  S.banner = banner;

  // ------------------------------------------------------------------ state
  let call = "idle";        // idle | connecting | live (the page's side of the call)
  let userStopped = false;  // Stop was pressed (a connection that ends then was not "lost")
  let refused = false;      // the server refused (server full): not a lost connection
  let reconnects = 0;       // attempts since the connection was lost
  let reconnecting = false;
  let lastSession = null;   // session id of the previous connection (reconnect: same or new?)
  let countdown = null;
  // the status line: {text, level}, the server's (with its phase) or the page's own (ownStatus)
  let status = null;
  const LEVELS = ["info", "ok", "warn", "error"];
  const letters = (s) => (s || "").toLowerCase().replace(/[^\p{L}]+/gu, "");
  function restatesPill(text) {  // the line would say only what the state pill says ("Listening…" by "Listening")
    const w = $("omni-state-word");
    return letters(text) === letters(w && w.textContent) || text === t("status_idle") || text === t("status_connecting");
  }
  function showStatus() {
    const el = $("status");
    if (!el || !status) return;
    setText(el, status.text);
    if (el.dataset.level !== status.level) { el.dataset.level = status.level; el.className = "status status-" + status.level; }
    el.classList.toggle("status-restated", restatesPill(status.text));
  }
  function setStatus(text, level) {
    if (typeof text !== "string") return;
    status = { text: text, level: LEVELS.indexOf(level) >= 0 ? level : "info" };
    showStatus();
  }
  function ownStatus(name) {  // the page's own states; for the server's, its message says
    if (name === "idle") setStatus(t(afterCall ? "status_stopped" : "status_idle"), "info");
    else if (name === "connecting") setStatus(t("status_connecting"), "info");
    else if (name === "error" && S.alerts.length) setStatus(S.alerts[S.alerts.length - 1].message, "error");
  }
  // name: the state; st: the server's {status, level} that comes with it (none: the page's own)
  function setState(name, st) {
    const el = $("omni-state");
    if (el) {  // (the pill first: the status line is hidden while it only restates it)
      el.dataset.state = name;
      const w = $("omni-state-word");
      if (w) { w.dataset.i18n = "state_" + name; setText(w, t("state_" + name)); }
    }
    if (st && typeof st.status === "string") setStatus(st.status, st.level); else ownStatus(name);
    S.phases.push({ phase: name, status: status && status.text, t: performance.now() });
    const live = call === "live";
    const intr = $("omni-interrupt");
    if (intr) intr.hidden = !(live && name === "speaking");
    const mute = $("omni-mute");
    if (mute) mute.hidden = !live;
    updateStart();
  }
  S.setState = setState;
  function updateStart() {
    const b = $("omni-start");
    if (!b) return;
    const mode = call === "idle" ? "start" : call === "connecting" ? "connecting" : "stop";
    if (b.dataset.mode !== mode) b.dataset.mode = mode;
    const label = b.querySelector(".omni-start-label");
    const key = mode === "start" ? (refused ? "retry" : "start") : mode === "connecting" ? "connecting" : "stop";
    if (label) { if (label.dataset.i18n !== key) label.dataset.i18n = key; setText(label, t(key)); }
    const icon = b.querySelector(".omni-start-icon");
    setText(icon, mode === "stop" ? "\u25A0" : mode === "connecting" ? "\u25CC" : "\u25B6");
    const busy = mode === "connecting" ? "true" : "false";
    if (b.getAttribute("aria-busy") !== busy) b.setAttribute("aria-busy", busy);
    const cam = $("omni-camera");
    if (cam) cam.disabled = call !== "idle" || !visionOn();
  }
  function visionOn() { const c = $("omni-caps"); return !c || c.dataset.vision !== "0"; }

  // ------------------------------------------------------------------ FastRTC components
  function comp(camera) { return $(camera ? "webrtc-av" : "webrtc-audio"); }
  function showComponent(camera) {
    const a = $("av-wrap"), b = $("audio-wrap"), row = $("talk-row");
    if (a) a.classList.toggle("omni-hidden", !camera);
    if (b) b.classList.toggle("omni-hidden", camera);
    // camera off: no preview column (the mic-only component in it is never shown anyway); the
    // conversation takes the row, at a readable width
    if (row) row.classList.toggle("omni-no-preview", !camera);
  }
  let activeCamera = true;
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  async function waitFor(fn, ms) {
    const end = performance.now() + ms;
    for (;;) { const v = fn(); if (v) return v; if (performance.now() > end) return null; await sleep(50); }
  }
  async function startCall() {
    if (call !== "idle") return;
    userStopped = false; refused = false; afterCall = false; clearCountdown();
    call = "connecting";
    setState("connecting");
    const camera = !!($("omni-camera") && $("omni-camera").checked && visionOn());
    activeCamera = camera;
    showComponent(camera);
    const root = await waitFor(() => comp(camera), 10000);
    if (!root) { call = "idle"; banner(t("failed")); setState("error"); return; }
    const access = [...root.querySelectorAll("button")].find((x) => /Click to Access/.test(x.textContent));
    if (access) access.click();
    const button = () => root.querySelector("button[aria-label='start stream']");
    let go = await waitFor(button, 15000);
    if (call !== "connecting") return;  // gUM failed (denied) meanwhile
    // FastRTC's one button toggles: after a connection dropped under it, it may still be "open"
    // (it shows Stop); pressing it then stops, so press it once to reset, then start
    if (go && /Stop/.test(go.textContent)) {
      go.click();
      go = await waitFor(() => { const x = button(); return x && !/Stop/.test(x.textContent) && x; }, 5000);
    }
    if (!go) { call = "idle"; banner(t("failed")); setState("error"); return; }
    // the component's own getUserMedia at the end of the last call must settle first (it would
    // replace the stream of this Start), and the camera component's stream needs live tracks
    await waitFor(() => pendingGum === 0, 5000);
    if (camera && !(await refillCamera())) return;
    if (call !== "connecting") return;
    (button() || go).click();
  }
  function stopCall() {
    userStopped = true; reconnecting = false; reconnects = 0; afterCall = true;
    for (const root of [comp(activeCamera), comp(!activeCamera)]) {
      const b = root && (root.querySelector("button[aria-label='stop stream']") ||
                         [...root.querySelectorAll("button")].find((x) => /^\s*Stop\s*$/.test(x.textContent)));
      if (b) { b.click(); break; }
    }
    for (const pc of pcs) { try { pc.close(); } catch (_) {} }  // (FastRTC closes it too; twice is harmless)
    ended();
    setState("idle");
  }
  function ended() {
    call = "idle"; afterCall = true; currentPc = null; releaseMedia(); stopMeters(); stopUnits(); muted = false;
    syncMute();
  }
  S.startCall = startCall;
  S.stopCall = stopCall;

  // ------------------------------------------------------------------ media: devices, mute, errors
  const micTracks = [];
  let muted = false;
  function syncMute() {
    for (const tr of micTracks) tr.enabled = !muted;
    const b = $("omni-mute");
    if (b) {
      b.setAttribute("aria-pressed", muted ? "true" : "false");
      const s = b.querySelector("span");
      if (s) { s.dataset.i18n = muted ? "unmute" : "mute"; setText(s, t(muted ? "unmute" : "mute")); }
    }
  }
  function withDevices(c) {
    if (!c || typeof c !== "object") return c;
    const out = Object.assign({}, c);
    if (out.audio && prefs.mic) out.audio = Object.assign({}, out.audio === true ? {} : out.audio, { deviceId: { exact: prefs.mic } });
    if (out.video && prefs.cam) out.video = Object.assign({}, out.video === true ? {} : out.video, { deviceId: { exact: prefs.cam } });
    return out;
  }

  // ------------------------------------------------------------------ media: every track ends with the call
  // FastRTC's components ask for the mic (and camera) again when their connection ends, and nothing
  // stops what they get: the audio component at its Stop (to stay "mic accessed"), the video
  // component at Stop, on a dropped connection and on end_stream (for its preview). The audio
  // component also drops, unstopped, the stream of "Click to Access" when Start asks anew. So the
  // browser went on recording after Stop. Here every stream handed out is remembered; one asked for
  // while a call is live or after it ended (until the next Start) is stopped as it arrives, and all
  // are stopped when the call ends (ended(), pagehide). The video component sends, at its next
  // Start, the stream it got at the end of the last call: refillCamera() puts fresh tracks in it.
  const given = [];        // streams handed out since the last release
  let pendingGum = 0;      // getUserMedia calls not settled yet
  let afterCall = false;   // a call ended (or Stop was pressed) and no Start since
  let lastVideo = null;    // {stream, constraints}: the newest stream with a camera track (the video component's)
  function releaseMedia() {
    for (const stream of given.splice(0)) for (const tr of stream.getTracks()) tr.stop();
    micTracks.length = 0;
  }
  async function refillCamera() {
    const held = lastVideo;
    if (!held || !held.stream.getTracks().some((tr) => tr.readyState === "ended")) return true;
    let fresh = null;
    try {
      fresh = await navigator.mediaDevices.getUserMedia(held.constraints);  // (through every wrapper: meters, barge-in)
    } catch (_) {
      return false;  // (the wrapper below has said why)
    }
    for (const tr of held.stream.getTracks()) held.stream.removeTrack(tr);
    for (const tr of fresh.getTracks()) held.stream.addTrack(tr);
    lastVideo = held;
    return true;
  }
  const md = navigator.mediaDevices;
  if (md && md.getUserMedia) {
    const orig = md.getUserMedia.bind(md);
    md.getUserMedia = async function (constraints) {
      S.gumAsked = (S.gumAsked || []).concat([{ audio: !!(constraints && constraints.audio), video: !!(constraints && constraints.video) }]);
      const unwanted = call === "live" || afterCall;  // FastRTC's own request at (or after) the end of a call
      pendingGum += 1;
      try {
        const stream = await orig(withDevices(constraints));
        if (S.gumAt === undefined) S.gumAt = performance.now();
        if (stream.getVideoTracks().length) lastVideo = { stream: stream, constraints: constraints };
        if (unwanted) {
          for (const tr of stream.getTracks()) tr.stop();
          S.stoppedOnArrival = (S.stoppedOnArrival || 0) + 1;
          return stream;
        }
        given.push(stream);
        for (const tr of stream.getAudioTracks()) { micTracks.push(tr); tr.enabled = !muted; }
        listDevices();
        return stream;
      } catch (e) {
        const name = e && e.name;
        const key = name === "NotAllowedError" || name === "SecurityError" ? "denied"
          : name === "NotFoundError" || name === "OverconstrainedError" ? "missing"
          : name === "NotReadableError" ? "busy" : null;
        if (key === "missing" && (prefs.mic || prefs.cam)) { setPref("mic", ""); setPref("cam", ""); }  // a device gone
        if (key) { banner(t(key)); call = "idle"; setState("error"); }
        throw e;
      } finally {
        pendingGum -= 1;
      }
    };
  } else {
    document.addEventListener("DOMContentLoaded", () => banner(t("insecure")));
  }
  async function listDevices() {
    if (!md || !md.enumerateDevices) return;
    let devs = [];
    try { devs = await md.enumerateDevices(); } catch (_) { return; }
    const fill = (id, kind, pref) => {
      const sel = $(id);
      if (!sel) return;
      const keep = sel.value || prefs[pref] || "";
      sel.length = 1;
      for (const d of devs) {
        if (d.kind !== kind || !d.deviceId || d.deviceId === "default") continue;
        const o = document.createElement("option");
        o.value = d.deviceId; o.textContent = d.label || kind;
        sel.appendChild(o);
      }
      sel.value = [...sel.options].some((o) => o.value === keep) ? keep : "";
    };
    fill("omni-mic-select", "audioinput", "mic");
    fill("omni-cam-select", "videoinput", "cam");
    fill("omni-speaker-select", "audiooutput", "speaker");
  }
  if (md && md.addEventListener) md.addEventListener("devicechange", listDevices);
  function outputs() {
    return [...document.querySelectorAll("#webrtc-av audio, #webrtc-av video, #webrtc-audio audio, #webrtc-audio video")];
  }
  function applyOutput() {
    const v = typeof prefs.volume === "number" ? prefs.volume : 1;
    for (const el of outputs()) {
      if (el.volume !== v) el.volume = v;
      if (prefs.speaker && el.setSinkId && el.sinkId !== prefs.speaker) el.setSinkId(prefs.speaker).catch(() => {});
    }
  }

  // ------------------------------------------------------------------ meters
  let meterTimer = null;
  function meterDb(db) { return Math.max(0, Math.min(100, Math.round((db + 60) * 100 / 50))); }  // -60..-10 dBFS
  function drawMeters() {
    const lv = S.levels || {};
    for (const [id, db] of [["omni-mic-meter", muted ? -100 : lv.mic], ["omni-out-meter", lv.out]]) {
      const el = $(id);
      if (!el) continue;
      const v = typeof db === "number" ? meterDb(db) : 0;
      if (el.getAttribute("aria-valuenow") !== String(v)) {
        el.setAttribute("aria-valuenow", String(v));
        el.firstElementChild.style.transform = "scaleX(" + (v / 100) + ")";
      }
    }
  }
  function startMeters() { if (!meterTimer) meterTimer = setInterval(drawMeters, 100); }
  function stopMeters() {
    if (meterTimer) { clearInterval(meterTimer); meterTimer = null; }
    S.levels = {}; drawMeters();
  }

  // ------------------------------------------------------------------ unit preview (what the model was given)
  let unitTimer = null;
  function unitMs() { const c = $("omni-caps"); return Math.max(250, Number(c && c.dataset.unitMs) || 1000); }
  function refreshUnit() {
    const box = $("omni-unit");
    if (!box || !S.webrtcId) return;
    const base = "/webrtc/unit/" + encodeURIComponent(S.webrtcId) + "/";
    const load = (img, i, fig) => {
      const probe = new Image();
      probe.onload = () => { img.src = probe.src; if (fig) fig.hidden = false; box.hidden = false; };
      probe.onerror = () => { if (fig) fig.hidden = true; };
      probe.src = base + i + ".jpg?u=" + Date.now();
    };
    load($("omni-unit-base"), 0, null);
    const stack = document.querySelector("#stack-frames input[type=number]");
    if (stack && Number(stack.value) > 1) load($("omni-unit-stack"), 1, $("omni-unit-stack-fig"));
    else $("omni-unit-stack-fig").hidden = true;
    const seen = document.querySelector("[data-testid='metric-seen-text']");
    setText($("omni-unit-text"), seen ? seen.textContent : "–");
  }
  function startUnits() { if (!unitTimer && activeCamera) unitTimer = setInterval(refreshUnit, unitMs()); }
  function stopUnits() { if (unitTimer) { clearInterval(unitTimer); unitTimer = null; } }

  // ------------------------------------------------------------------ camera: what the model reads, no video back
  // FastRTC's video component sends the camera on a send-receive transceiver and shows what comes
  // back in its <video>: the server decoded every frame at the capture rate and size and encoded an
  // echo track. Here (1) the camera's transceiver is send-only: no video comes back (the server reads
  // it anyway: app/ui/video_intake.py); (2) its encoder sends camFps() frames a second (the unit reads
  // N frames: frame stacking N, one a unit by default; one more than that keeps the frame taken at a
  // unit's end fresh) at most cameraSendMaxSide px on the longer side (the models' tile); (3) the
  // component's <video> plays the assistant's audio and shows the local camera track (mirrored, as
  // FastRTC's preview is). What the model was given stays in the unit preview above.
  // window.__omni.camSend = {fps, scale, direction} once applied (tests, the benchmark).
  const CAM_MAX_FPS = 15;
  function camFps() {
    const stack = document.querySelector("#stack-frames input[type=number]");
    const n = Math.max(1, Math.round(Number(stack && stack.value) || 1));
    return Math.min(CAM_MAX_FPS, Math.ceil(n * 1000 / unitMs()) + 1);
  }
  const camSenders = new Map();  // sender -> its peer connection (the call's camera)
  async function tuneCamera(pc, sender) {
    const track = sender.track;
    if (!track || track.readyState !== "live" || pc.connectionState === "closed") { camSenders.delete(sender); return; }
    const set = track.getSettings ? track.getSettings() : {};
    const side = Math.max(set.width || 0, set.height || 0);
    const maxSide = Number(cfg.cameraSendMaxSide) || 448;
    const scale = side > maxSide ? side / maxSide : 1;
    const fps = camFps();
    let p = null;
    try { p = sender.getParameters(); } catch (_) { return; }
    if (!p.encodings || !p.encodings.length) return;  // (not negotiated yet: tried again once connected)
    if (p.encodings.every((e) => e.maxFramerate === fps && e.scaleResolutionDownBy === scale)) return;
    for (const e of p.encodings) { e.maxFramerate = fps; e.scaleResolutionDownBy = scale; }
    try {
      await sender.setParameters(p);
      const tr = pc.getTransceivers().find((x) => x.sender === sender);
      S.camSend = { fps: fps, scale: Math.round(scale * 1000) / 1000, direction: tr ? tr.direction : null };
    } catch (e) {
      S.camSendError = String(e);
    }
  }
  function tuneCameras() { for (const [sender, pc] of camSenders) tuneCamera(pc, sender); }
  function showLocalCamera(pc, ev) {
    // FastRTC's track listener (registered first) has put the remote stream in its <video>; add the camera
    if (!ev.track || ev.track.kind !== "audio") return;
    const cam = pc.getSenders().map((x) => x.track).find((tr) => tr && tr.kind === "video");
    const el = document.querySelector("#webrtc-av video");
    if (!cam || !el) return;
    const remote = el.srcObject && el.srcObject.getAudioTracks ? el.srcObject.getAudioTracks() : [ev.track];
    el.srcObject = new MediaStream([...(remote.length ? remote : [ev.track]), cam]);
    el.muted = false;
    el.play().catch(() => {});
    S.previewTrack = cam.id;
  }
  if (window.RTCPeerConnection) {
    const origAddTrack = RTCPeerConnection.prototype.addTrack;
    RTCPeerConnection.prototype.addTrack = function (track) {
      const sender = origAddTrack.apply(this, arguments);
      if (track && track.kind === "video") {
        const tr = this.getTransceivers().find((x) => x.sender === sender);
        if (tr) tr.direction = "sendonly";  // (before FastRTC's createOffer, which follows its addTrack calls)
        const pc = this;
        camSenders.set(sender, pc);
        pc.addEventListener("connectionstatechange", () => {
          if (pc.connectionState === "connected") tuneCamera(pc, sender);
          else if (pc.connectionState === "closed" || pc.connectionState === "failed") camSenders.delete(sender);
        });
        setTimeout(() => tuneCamera(pc, sender), 0);  // (after FastRTC's own setParameters of its rtp_params)
      }
      return sender;
    };
  }

  // ------------------------------------------------------------------ server messages, connection
  function clearCountdown() { if (countdown) { clearInterval(countdown); countdown = null; } }
  function serverFull(m) {
    refused = true;
    let left = Math.max(1, Math.round(Number(m.retry_after_s) || 30));
    const slots = m.slots || "?";
    banner(t("full", { slots: slots, s: left }));
    clearCountdown();
    countdown = setInterval(() => {  // the refusal said when to retry: count down to it
      left -= 1;
      if (left <= 0) { clearCountdown(); banner(t("full_now"), "warn"); return; }
      banner(t("full", { slots: slots, s: left }));
    }, 1000);
  }
  function onPhase(m) {
    const st = { status: m.status, level: m.level };  // (the status line, shown with the phase)
    if (m.phase === "error") { refused = true; ended(); setState("error", st); return; }  // a refusal: the server closes the call
    if (call !== "live") { call = "live"; startMeters(); startUnits(); }  // (also when FastRTC's own button started it)
    if (reconnecting) {
      reconnecting = false; reconnects = 0;
      banner(m.resumed || (lastSession && m.session_id === lastSession) ? t("same_conv") : t("new_conv"), "info");
    }
    if (m.session_id) lastSession = m.session_id;
    applyOutput();
    setState(m.phase, st);
  }
  function onMessage(ev) {
    if (typeof ev.data !== "string" || ev.data.indexOf("type") < 0) return;
    let m = null;
    try { m = JSON.parse(ev.data); } catch (_) { return; }
    if (!m) return;
    if (m.type === "omni_phase") { onPhase(m); return; }
    if (m.type === "omni_status") { setStatus(m.status, m.level); return; }  // a notice: the phase stays
    if (m.type !== "error" && m.type !== "warning" && m.type !== "end_stream") return;
    if (m.code === "server_full") { serverFull(m); ended(); setState("error"); return; }
    const text = typeof m.message === "string" && m.message ? m.message : m.data;
    if (typeof text === "string" && text && text !== "Stream closed") {
      banner(text, m.type === "warning" ? "warn" : "error");
      if (m.type === "error") { refused = true; setState("error"); }
    }
  }
  function connectionEnded(pc) {
    pcs.delete(pc);
    if (pc !== currentPc) return;  // an old connection (stopped, refused or replaced) closing late
    if (userStopped || call === "idle" && !reconnecting) { if (!refused && call !== "idle") { ended(); setState("idle"); } return; }
    ended();
    if (refused) { setState("error"); return; }
    lost();
  }
  async function lost() {
    // the connection dropped without Stop or a refusal: reconnect (a new offer), at most 3 tries
    reconnects += 1;
    if (reconnects > 3) { reconnecting = false; reconnects = 0; banner(t("lost_gave_up")); setState("error"); return; }
    reconnecting = true;
    banner(t("lost", { n: reconnects }), "warn");
    setState("connecting");
    S.reconnects = (S.reconnects || 0) + 1;
    await sleep(500 * reconnects);
    if (userStopped) return;
    call = "idle";
    await startCall();
  }
  S.simulateLoss = () => { for (const pc of pcs) pc.dispatchEvent(new Event("omni-lost")); };

  const pcs = new Set();
  let currentPc = null;  // the call's connection (FastRTC makes one per Start)
  if (window.RTCPeerConnection) {
    const origCDC = RTCPeerConnection.prototype.createDataChannel;
    RTCPeerConnection.prototype.createDataChannel = function () {
      const ch = origCDC.apply(this, arguments);
      const pc = this;
      if (!pcs.has(pc)) {
        pcs.add(pc);
        currentPc = pc;
        let done = false;
        const end = () => { if (!done) { done = true; connectionEnded(pc); } };
        pc.addEventListener("connectionstatechange", () => {
          const s = pc.connectionState;
          if (s === "closed" || s === "failed" || s === "disconnected") end();
        });
        ch.addEventListener("close", end);
      }
      ch.addEventListener("message", onMessage);
      if (!pc.__omniPreview) { pc.__omniPreview = true; pc.addEventListener("track", (ev) => showLocalCamera(pc, ev)); }
      return ch;
    };
    window.addEventListener("pagehide", () => {
      userStopped = true; afterCall = true;
      for (const pc of pcs) { try { pc.close(); } catch (_) {} }
      pcs.clear();
      releaseMedia();
    });
  }

  // ------------------------------------------------------------------ fetch: webrtc id, access key
  let apiKey = (() => { try { return sessionStorage.getItem("omni-api-key") || ""; } catch (_) { return ""; } })();
  const origFetch = window.fetch;
  window.fetch = async function (input, init) {
    let offer = false;
    try {
      if (init && typeof init.body === "string" && init.body.indexOf("webrtc_id") >= 0 && init.body.indexOf("sdp") >= 0) {
        const b = JSON.parse(init.body);
        const d = b && (b.data !== undefined ? b.data : b);
        const body = Array.isArray(d) ? d[0] : d;
        if (body && body.webrtc_id && body.sdp) { S.webrtcId = body.webrtc_id; offer = true; if (!reconnecting) hideBanner(); }
      }
    } catch (_) {}
    const url = typeof input === "string" ? input : (input && input.url) || "";
    const same = !/^[a-z]+:/i.test(url) || url.startsWith(location.origin);
    if (apiKey && same) {
      init = Object.assign({}, init || {});
      const h = new Headers(init.headers || (typeof input !== "string" && input.headers) || {});
      if (!h.has("Authorization")) h.set("Authorization", "Bearer " + apiKey);
      init.headers = h;
    }
    const res = await origFetch.call(this, input, init);
    if (res.status === 401 && same) keyRequired(offer);
    return res;
  };
  function keyRequired() {
    const form = $("omni-key");
    if (form) form.hidden = false;
    banner(apiKey ? t("key_wrong") : t("key"));
    refused = true;
    if (call !== "idle") { userStopped = true; stopCall(); }
    setState("error");
    const input = $("omni-key-input");
    if (input) input.focus();
  }
  S.keyRequired = keyRequired;
  function useKey() {
    const input = $("omni-key-input");
    apiKey = (input && input.value.trim()) || "";
    try { sessionStorage.setItem("omni-api-key", apiKey); } catch (_) {}
    const form = $("omni-key");
    if (form) form.hidden = true;
    hideBanner();
    refused = false;
    setState("idle");
  }

  // ------------------------------------------------------------------ wiring
  document.addEventListener("click", (ev) => {
    const el = ev.target && ev.target.closest ? ev.target : null;
    if (!el) return;
    const fastrtc = el.closest("button[aria-label='start stream']");
    if (fastrtc && fastrtc.querySelector("[title=spinner]")) {  // FastRTC's "connecting" state
      ev.stopImmediatePropagation(); ev.preventDefault(); S.ignoredClicks += 1; return;
    }
    if (el.closest("#omni-start")) {
      if (call === "idle") startCall(); else if (call === "live") stopCall();
      else if (reconnecting) stopCall();
    } else if (el.closest("#omni-mute")) {
      muted = !muted; syncMute();
    } else if (el.closest("#omni-interrupt")) {
      if (S.webrtcId) origFetch("/webrtc/force_listen", { method: "POST", headers: Object.assign(
        { "Content-Type": "application/json" }, apiKey ? { Authorization: "Bearer " + apiKey } : {}),
        body: JSON.stringify({ webrtc_id: S.webrtcId }) }).catch(() => {});
    } else if (el.closest("#omni-key-save")) {
      useKey();
    }
  }, true);
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && ev.target && ev.target.id === "omni-key-input") { ev.preventDefault(); useKey(); }
  });
  document.addEventListener("change", (ev) => {
    const el = ev.target;
    if (!el || !el.id) return;
    if (el.id === "omni-camera") { setPref("camera", el.checked); showComponent(el.checked && visionOn()); }
    else if (el.id === "omni-mic-select") setPref("mic", el.value);
    else if (el.id === "omni-cam-select") setPref("cam", el.value);
    else if (el.id === "omni-speaker-select") { setPref("speaker", el.value); applyOutput(); }
  });
  document.addEventListener("input", (ev) => {
    if (ev.target && ev.target.id === "omni-volume") { setPref("volume", Number(ev.target.value)); applyOutput(); }
  });
  document.addEventListener("change", (ev) => {  // frame stacking N: the camera's send rate follows
    if (ev.target && ev.target.closest && ev.target.closest("#stack-frames")) setTimeout(tuneCameras, 0);
  });

  // once the call bar is rendered: restore its preferences, translate, follow the newest caption
  function setup() {
    const bar = $("omni-call");
    if (!bar) return false;
    const cam = $("omni-camera");
    if (cam && typeof prefs.camera === "boolean") cam.checked = prefs.camera;
    const vol = $("omni-volume");
    if (vol && typeof prefs.volume === "number") vol.value = String(prefs.volume);
    showComponent(!!(cam && cam.checked));
    translate();
    let pending = false;
    new MutationObserver(() => {
      if (pending) return;
      pending = true;
      queueMicrotask(() => {
        pending = false;
        translate();
        const c = document.querySelector("#captions-box .captions");
        if (c) c.scrollTop = c.scrollHeight;
        // Gradio's tabs keep an aria-hidden copy of the tab buttons for measuring: take it out of the tab order
        for (const x of document.querySelectorAll(".tab-container.visually-hidden[aria-hidden='true']:not([inert])")) x.inert = true;
        // Gradio's empty-upload placeholder carries an aria-label on a plain div (not allowed without a role)
        for (const x of document.querySelectorAll("div.empty[aria-label]:not([role])")) x.setAttribute("role", "img");
        for (const x of document.querySelectorAll("#webrtc-av button, #webrtc-audio button")) {
          if (!x.hidden && /Click to Access/.test(x.textContent)) { x.hidden = true; x.tabIndex = -1; }  // Start does it
        }
        const caps = $("omni-caps");
        if (caps && caps.dataset.vision === "0" && cam && cam.checked && call === "idle") { cam.checked = false; showComponent(false); }
        updateStart();
        showStatus();  // (Gradio re-rendered the status line: the current one back)
      });
    }).observe(document.body, { childList: true, subtree: true, characterData: true });
    setState("idle");
    S.ready = performance.now();
    return true;
  }
  function whenReady() {
    if (setup()) return;
    const mo = new MutationObserver(() => { if (setup()) mo.disconnect(); });
    mo.observe(document.documentElement, { childList: true, subtree: true });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", whenReady); else whenReady();
})();
