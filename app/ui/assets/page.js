// Page helpers (no network, no dependencies):
//  * a banner (#omni-alert) for messages the page must not hide in a toast: microphone/camera
//    denied (getUserMedia NotAllowedError) and server messages on the WebRTC data channel
//    ("Server is full", errors, warnings);
//  * a second click on Start while the stream is still connecting is ignored: FastRTC's
//    component would open another connection and leave the first one running (it holds a
//    conversation slot until the server's input-stall timeout);
//  * closing or leaving the page closes its WebRTC connections (pagehide), so the server frees
//    the conversation slot at once instead of after its input-stall timeout;
//  * window.__omni: {webrtcId, alerts, gumAt, ignoredClicks} for tests and debugging.
(() => {
  if (window.__omniPageHooks) return;
  window.__omniPageHooks = true;
  const S = (window.__omni = window.__omni || {});
  S.alerts = S.alerts || [];
  S.webrtcId = S.webrtcId || null;

  function banner(msg, level) {
    let el = document.getElementById("omni-alert");
    if (!el) {
      el = document.createElement("div");
      el.id = "omni-alert";
      el.setAttribute("data-testid", "omni-alert");
      document.body.prepend(el);
    }
    el.textContent = msg;
    el.dataset.level = level || "error";
    el.hidden = false;
    el.style.display = "block";
    S.alerts.push({ level: level, message: msg, t: performance.now() });
  }
  function hideBanner() {
    const el = document.getElementById("omni-alert");
    if (el) { el.hidden = true; el.style.display = "none"; }
  }
  S.banner = banner;

  const md = navigator.mediaDevices;
  if (md && md.getUserMedia) {
    const orig = md.getUserMedia.bind(md);
    md.getUserMedia = async function (constraints) {
      try {
        const stream = await orig(constraints);
        if (S.gumAt === undefined) S.gumAt = performance.now();
        return stream;
      } catch (e) {
        const name = e && e.name;
        if (name === "NotAllowedError" || name === "SecurityError") {
          banner("Microphone/camera access was denied. Allow it for this site in the browser settings, then press Start again.", "error");
        } else if (name === "NotFoundError" || name === "OverconstrainedError") {
          banner("No usable microphone/camera was found. Connect one (or choose 'Mic only') and press Start again.", "error");
        } else if (name === "NotReadableError") {
          banner("The microphone/camera is busy in another application.", "error");
        }
        throw e;
      }
    };
  } else {
    window.addEventListener("DOMContentLoaded", () =>
      banner("This browser cannot capture audio here (the page needs https or localhost).", "error"));
  }

  S.ignoredClicks = S.ignoredClicks || 0;
  document.addEventListener("click", (ev) => {
    const button = ev.target && ev.target.closest && ev.target.closest("button[aria-label='start stream']");
    if (button && button.querySelector("[title=spinner]")) {  // FastRTC's "connecting" state
      ev.stopImmediatePropagation();
      ev.preventDefault();
      S.ignoredClicks += 1;
    }
  }, true);

  if (window.RTCPeerConnection) {
    const origCDC = RTCPeerConnection.prototype.createDataChannel;
    const pcs = new Set();
    RTCPeerConnection.prototype.createDataChannel = function () {
      const ch = origCDC.apply(this, arguments);
      const pc = this;
      pcs.add(pc);
      pc.addEventListener("connectionstatechange", () => {
        if (pc.connectionState === "closed" || pc.connectionState === "failed") pcs.delete(pc);
      });
      ch.addEventListener("message", (ev) => {
        let m = null;
        try { m = JSON.parse(ev.data); } catch (_) { return; }
        if (!m || (m.type !== "error" && m.type !== "warning" && m.type !== "end_stream")) return;
        const text = typeof m.message === "string" && m.message ? m.message : m.data;
        if (typeof text === "string" && text && text !== "Stream closed") banner(text, m.type === "warning" ? "warn" : "error");
      });
      return ch;
    };
    window.addEventListener("pagehide", () => {
      for (const pc of pcs) { try { pc.close(); } catch (_) {} }
      pcs.clear();
    });
  }

  // keep the newest caption in view
  const follow = () => {
    const box = document.getElementById("captions-box");
    if (!box) return false;
    new MutationObserver(() => {
      const c = box.querySelector(".captions");
      if (c) c.scrollTop = c.scrollHeight;
    }).observe(box, { childList: true, subtree: true, characterData: true });
    return true;
  };
  if (!follow()) {
    const t = setInterval(() => { if (follow()) clearInterval(t); }, 500);
    setTimeout(() => clearInterval(t), 30000);
  }

  const origFetch = window.fetch;
  window.fetch = function (input, init) {
    try {
      if (init && typeof init.body === "string" && init.body.indexOf("webrtc_id") >= 0 && init.body.indexOf("sdp") >= 0) {
        const b = JSON.parse(init.body);
        const d = b && (b.data !== undefined ? b.data : b);
        const body = Array.isArray(d) ? d[0] : d;
        if (body && body.webrtc_id && body.sdp) { S.webrtcId = body.webrtc_id; hideBanner(); }
      }
    } catch (_) {}
    return origFetch.apply(this, arguments);
  };
})();
