// Playwright init script: measure the assistant's audio in the page, and optionally replace the
// microphone with a scripted one for exact speech timing.
//
//  window.__rms      [[t_ms, rms], ...]   remote (assistant) audio, every 50 ms (performance.now())
//  window.__rise     [[t_poll_ms, t_onset_ms], ...]   each rise of __rms above RISE_RMS: the poll, and
//                    the first 5 ms window above RISE_RMS inside that poll's analyser buffer
//  window.__rx       [[t_ms, ...RX_FIELDS], ...]   inbound-rtp stats of the remote audio, every 50 ms
//                    (lastPacketReceivedTimestamp converted to the page clock)
//  window.__micRms   [[t_ms, rms], ...]   what the page sends as mic audio
//  window.__say(b64wav, label) -> Promise<{start, end}>   (scripted mic only) play a clip into the mic
//  window.__E2E = {scriptedMic: true}     set by another init script BEFORE this one to enable it
//  window.__E2E.echo = {gain_db, delay_ms} (scripted mic only) mix the page's own remote (assistant)
//                       audio into the outgoing mic: a speaker with no echo cancellation (the mix
//                       bypasses the browser's AEC); a muted remote track (local barge-in) is silent
(() => {
  const POLL_MS = 50;
  const RISE_RMS = 0.01;  // e2e/driver.py RMS_THRESHOLD
  const RX_FIELDS = ["packetsReceived", "lastPacketReceivedTimestamp", "totalSamplesReceived", "concealedSamples",
    "silentConcealedSamples", "concealmentEvents", "insertedSamplesForDeceleration",
    "removedSamplesForAcceleration", "jitterBufferDelay", "jitterBufferEmittedCount", "jitterBufferTargetDelay",
    "packetsLost", "packetsDiscarded", "totalAudioEnergy"];
  window.__rxFields = RX_FIELDS;
  window.__rms = [];
  window.__rise = [];
  window.__rx = [];
  window.__micRms = [];
  window.__remoteTracks = 0;
  let ctx = null;
  function audioCtx() {
    if (!ctx) ctx = new AudioContext();
    if (ctx.state !== "running") ctx.resume();
    return ctx;
  }
  function fineOnset(buf, sr, now) {
    const w = Math.max(1, Math.round(sr * 0.005));
    for (let i = 0; i + w <= buf.length; i += w) {
      let s = 0;
      for (let j = i; j < i + w; j++) s += buf[j] * buf[j];
      if (Math.sqrt(s / w) > RISE_RMS) return now - ((buf.length - i) / sr) * 1000;
    }
    return now;
  }
  function rxStats(receiver) {
    const id = setInterval(async () => {
      if (receiver.track.readyState === "ended") { clearInterval(id); return; }
      let rep = null;
      try { rep = await receiver.getStats(); } catch (_) { return; }
      const now = performance.now();
      rep.forEach((s) => {
        if (s.type !== "inbound-rtp" || s.kind !== "audio") return;
        const row = [now];
        for (const f of RX_FIELDS) {
          let v = s[f] === undefined ? null : s[f];
          if (f === "lastPacketReceivedTimestamp" && v !== null) v = now - (s.timestamp - v);
          row.push(v);
        }
        window.__rx.push(row);
        if (window.__rx.length > 40000) window.__rx.splice(0, 10000);
      });
    }, POLL_MS);
  }
  function meter(track, sink) {
    const c = audioCtx();
    const src = c.createMediaStreamSource(new MediaStream([track]));
    const an = c.createAnalyser();
    an.fftSize = 2048;
    src.connect(an);
    const buf = new Float32Array(an.fftSize);
    const keep = [src, an];
    window.__keep = (window.__keep || []).concat(keep);
    const id = setInterval(() => {
      if (track.readyState === "ended") {  // a stopped connection: its meter must not add zeros
        clearInterval(id);
        src.disconnect();
        return;
      }
      an.getFloatTimeDomainData(buf);
      let s = 0;
      for (let i = 0; i < buf.length; i++) s += buf[i] * buf[i];
      const now = performance.now();
      const level = Math.sqrt(s / buf.length);
      if (sink === window.__rms && level > RISE_RMS && !(sink.length && sink[sink.length - 1][1] > RISE_RMS)) {
        window.__rise.push([now, fineOnset(buf, c.sampleRate, now)]);
      }
      sink.push([now, level]);
      if (sink.length > 20000) sink.splice(0, 5000);
    }, POLL_MS);
  }
  const Orig = window.RTCPeerConnection;
  function Hooked(...args) {
    const pc = new Orig(...args);
    pc.addEventListener("track", (ev) => {
      if (ev.track.kind !== "audio") return;
      window.__remoteTracks += 1;
      // a muted media element keeps older Chromium pulling the track
      const el = document.createElement("audio");
      el.muted = true;
      el.srcObject = new MediaStream([ev.track]);
      el.play().catch(() => {});
      window.__keep = (window.__keep || []).concat([el]);
      meter(ev.track, window.__rms);
      const echo = (window.__E2E || {}).echo;
      if (echo && (window.__E2E || {}).scriptedMic) {
        const c = audioCtx();
        const src = c.createMediaStreamSource(new MediaStream([ev.track]));
        const delay = c.createDelay(2.0);
        delay.delayTime.value = (echo.delay_ms || 0) / 1000;
        const gain = c.createGain();
        gain.gain.value = Math.pow(10, (echo.gain_db || 0) / 20);
        src.connect(delay);
        delay.connect(gain);
        gain.connect(micDest());
        window.__keep = (window.__keep || []).concat([src, delay, gain]);
      }
      if (ev.receiver) rxStats(ev.receiver);
    });
    (window.__pcs = window.__pcs || []).push(pc);
    return pc;
  }
  Hooked.prototype = Orig.prototype;
  Object.setPrototypeOf(Hooked, Orig);
  window.RTCPeerConnection = Hooked;

  const md = navigator.mediaDevices;
  const origGum = md.getUserMedia.bind(md);
  const cfg = window.__E2E || {};
  let scriptedDest = null;
  function micDest() {
    // A destination node with an always-running, inaudible source: without an active source
    // Chromium stops feeding the track and WebRTC stops sending mic frames between clips.
    if (scriptedDest) return scriptedDest;
    const c = audioCtx();
    scriptedDest = c.createMediaStreamDestination();
    const noise = c.createBuffer(1, c.sampleRate, c.sampleRate);
    const d = noise.getChannelData(0);
    for (let i = 0; i < d.length; i++) d[i] = (Math.random() * 2 - 1) * 1e-4;
    const bed = c.createBufferSource();
    bed.buffer = noise;
    bed.loop = true;
    bed.connect(scriptedDest);
    bed.start();
    window.__keep = (window.__keep || []).concat([bed]);
    meter(scriptedDest.stream.getAudioTracks()[0], window.__micRms);
    return scriptedDest;
  }
  md.getUserMedia = async function (constraints) {
    if (!cfg.scriptedMic || !constraints || !constraints.audio) {
      const s = await origGum(constraints);
      const a = s.getAudioTracks()[0];
      if (a && !window.__micMetered) { window.__micMetered = true; meter(a, window.__micRms); }
      return s;
    }
    const tracks = [micDest().stream.getAudioTracks()[0].clone()];
    if (constraints.video) {
      const v = await origGum({ video: constraints.video });
      tracks.push(...v.getVideoTracks());
    }
    return new MediaStream(tracks);
  };
  window.__say = async function (b64) {
    const c = audioCtx();
    const dest = micDest();
    const bytes = Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0));
    const buf = await c.decodeAudioData(bytes.buffer);
    const node = c.createBufferSource();
    node.buffer = buf;
    node.connect(dest);
    const lead = 0.05;
    const at = c.currentTime + lead;
    const start = performance.now() + lead * 1000;
    node.start(at);
    window.__keep = (window.__keep || []).concat([node]);
    return { start: start, end: start + buf.duration * 1000 };
  };
})();
