// Local barge-in: silence the assistant in the page the moment the user starts to talk over it.
//
// The server's barge-in (VAD onset after turn_policy.min_speech_ms, then a flush of queued
// speech) is heard in the page only after the mic audio has crossed WebRTC twice, about 0.5 s.
// This script closes that gap: it watches the page's own mic with WebAudio and, while the
// assistant's audio is playing, mutes the assistant's WebRTC track (track.enabled = false: every
// consumer of the track renders silence) as soon as the mic carries speech energy. The server's
// flush follows; the track is unmuted once the mic has been quiet for QUIET_MS (or after
// MAX_MUTE_MS), by which time the interrupted reply is gone and the answer to the new question
// has not started yet. If the sound was not speech to the server (a cough), the reply resumes.
//
// Active only with "Interrupt as soon as I speak" (window.__omniConfig.localBargeInLabel is that
// radio label; with "Stop only when I take the turn (not for mm-hm or yeah)" the model keeps its say).
// The server confirms a barge-in: when it drops a reply's queued speech the page handler sends
// {"type": "flush"} over FastRTC's data channel. A mute with no flush by the time the assistant
// is heard again after the unmute (within CHECK_MS) was a false alarm (echo of the assistant
// that echo cancellation left in the mic, a cough): the speech threshold then rises by
// FALSE_ALARM_DB (up to MAX_EXTRA_DB); it comes back down by half that after each confirmed
// barge-in. (The answer to the new question may start soon after the unmute: it is not taken
// for the old reply going on, because the flush came first.)
// Echo: the page knows what it plays. A speaker with no echo cancellation (or a mix that
// bypasses the browser's canceller) puts the assistant's own voice in the mic; it must not mute
// the assistant. So the mic level must also exceed the loudest assistant level of the last
// ECHO_LAG_MS (what may be coming back) plus the echo coupling: the COUPLING_Q quantile of
// (mic level - that level) over the last COUPLING_POLLS polls of playback (COUPLING_PRIOR_DB
// until COUPLING_MIN_POLLS are in), plus ECHO_MARGIN_DB. This comparison reads the mic over the
// same window as the assistant (REMOTE_WINDOW): a 5 ms window swings several dB with each pitch
// period of a voice, and those swings of the echo, early in an answer while the loudest level so
// far is still rising, were taken for speech. With no echo the coupling is far below 0 dB and
// this test never binds.
// window.__omni.ducks: [{t, level_db, floor_db, unmuted_at, flushed, false_alarm}] and
// window.__omni.echoCouplingDb for tests and debugging; window.__omni.levels {mic, out} (dBFS,
// the latest poll) for the page's level meters (page.js).
(() => {
  if (window.__omniBargeIn) return;
  window.__omniBargeIn = true;
  const S = (window.__omni = window.__omni || {});
  const cfg = window.__omniConfig || {};
  S.ducks = S.ducks || [];

  const POLL_MS = 10;          // analysis period
  const WINDOW = 256;          // mic onset window, samples (~5 ms at 48 kHz), the latest of each poll
  const MIN_DB = -45;          // mic level (dBFS RMS) below this is never speech
  const ABOVE_FLOOR_DB = 15;   // ... nor is anything less than this far above the noise floor
  const FLOOR_POLLS = 300;     // noise floor = quietest poll of the last 3 s (steady noise is floor)
  const ONSET_POLLS = 5;       // consecutive loud polls needed (40 ms from first to last): clicks do not count
  const QUIET_MS = 500;        // mic quiet this long -> unmute
  const MAX_MUTE_MS = 1500;    // unmute anyway after this (the server has flushed by then, if ever)
  const PLAYING_RMS = 0.005;   // assistant audio above this (RMS, ~-46 dBFS) ...
  const PLAYING_WITHIN_MS = 400; // ... this recently counts as "the assistant is speaking"
  const CHECK_MS = 400;        // assistant heard this soon after an unmute -> it was a false alarm
  const FALSE_ALARM_DB = 6;
  const MAX_EXTRA_DB = 18;
  const REMOTE_WINDOW = 1024;  // assistant level window, samples (~21 ms: no gaps between polls)
  const ECHO_LAG_MS = 400;     // echo delay covered (speaker + room + a local mix)
  const COUPLING_POLLS = 100;  // echo coupling history: the last 2 s of playback
  const COUPLING_MIN_POLLS = 10;
  const COUPLING_Q = 0.9;
  const COUPLING_PRIOR_DB = 0; // until the coupling is known: the echo may be as loud as the assistant
  const ECHO_MARGIN_DB = 3;

  let ctx = null;
  const remote = [];           // {track, analyser, buf, lastLoud}
  let mic = null;              // {analyser, buf, track}
  let floorDb = -60;
  const recent = [];           // levels of the last FLOOR_POLLS polls, dBFS
  let loudPolls = 0;
  let ducked = null;           // the current S.ducks entry while muted
  let quietSince = null;
  let timer = null;
  let extraDb = 0;             // threshold raise after false alarms
  let checking = null;         // the S.ducks entry whose unmute is being checked
  const played = [];           // loudest assistant level per poll (dBFS), the last ECHO_LAG_MS
  const coupling = [];         // mic level - played level (dB), polls of playback

  function audioCtx() {
    if (!ctx) ctx = new AudioContext();
    if (ctx.state !== "running") ctx.resume().catch(() => {});
    return ctx;
  }
  function analyse(track, size) {
    const c = audioCtx();
    const src = c.createMediaStreamSource(new MediaStream([track]));
    const an = c.createAnalyser();
    an.fftSize = size || WINDOW;
    src.connect(an);
    return { src: src, analyser: an, buf: new Float32Array(an.fftSize), track: track };
  }
  function quantile(values, q) {
    const v = values.slice().sort((a, b) => a - b);
    return v[Math.min(v.length - 1, Math.floor(q * v.length))];
  }
  function db(x) { return Math.max(-100, 20 * Math.log10(x + 1e-9)); }
  function rmsOf(buf, from) {
    let s = 0;
    for (let i = from; i < buf.length; i++) s += buf[i] * buf[i];
    return Math.sqrt(s / (buf.length - from));
  }
  function rms(a) {
    a.analyser.getFloatTimeDomainData(a.buf);
    return rmsOf(a.buf, 0);
  }
  function enabledByUser() {
    const label = cfg.localBargeInLabel;
    if (!label) return false;
    const el = document.querySelector("#overlap input[type=radio]:checked");
    return !el || el.value === label;
  }
  function setMuted(muted) {
    for (const r of remote) if (r.track.readyState === "live") r.track.enabled = !muted;
  }

  function unmute(now) {
    setMuted(false);
    ducked.unmuted_at = now;
    checking = ducked;
    ducked = null;
  }
  function confirm(entry) {
    entry.false_alarm = false;
    extraDb = Math.max(0, extraDb - FALSE_ALARM_DB / 2);
  }
  function onServerFlush(now) {
    const entry = ducked || checking;
    if (!entry || entry.flushed !== null) return;
    entry.flushed = now;
    if (entry === checking) { confirm(entry); checking = null; }
  }
  function checkUnmute(now) {
    if (!checking) return;
    if (checking.flushed !== null) {
      confirm(checking);
      checking = null;
    } else if (remote.some((r) => r.lastLoud !== undefined && r.lastLoud > checking.unmuted_at)) {
      checking.false_alarm = true;  // the reply went on: the server did not hear a barge-in
      extraDb = Math.min(MAX_EXTRA_DB, extraDb + FALSE_ALARM_DB);
      checking = null;
    } else if (now - checking.unmuted_at > CHECK_MS) {
      checking.false_alarm = false;  // the reply had ended anyway: no evidence either way
      checking = null;
    }
  }

  function release(a) {
    try { a.src.disconnect(); } catch (_) {}
  }
  function tick() {
    const now = performance.now();
    // a stopped connection's tracks end: drop their analysers (each Start adds new ones)
    for (let i = remote.length - 1; i >= 0; i--) {
      if (remote[i].track.readyState === "ended") release(remote.splice(i, 1)[0]);
    }
    if (mic && mic.track.readyState === "ended") { release(mic); mic = null; }
    if (!mic && !remote.length && !ducked && !checking) {  // nothing live: stop polling until the next call
      clearInterval(timer);
      timer = null;
      return;
    }
    let playedDb = -100;
    for (const r of remote) {
      if (r.track.readyState !== "live" || !r.track.enabled) continue;
      const v = rms(r);
      if (v > PLAYING_RMS) r.lastLoud = now;
      playedDb = Math.max(playedDb, db(v));
    }
    played.push(playedDb);
    if (played.length > ECHO_LAG_MS / POLL_MS + 1) played.shift();
    checkUnmute(now);
    S.levels = { out: playedDb, mic: S.levels && S.levels.mic };  // (the page's level meters)
    if (!mic || mic.track.readyState !== "live") return;
    mic.analyser.getFloatTimeDomainData(mic.buf);
    const level = db(rmsOf(mic.buf, mic.buf.length - WINDOW));  // onset: the latest ~5 ms
    const wide = db(rmsOf(mic.buf, 0));                       // echo test: the assistant's window
    S.levels.mic = level;
    // noise floor: the quietest recent poll (speech has gaps; steady noise, a fan or a room, has none)
    recent.push(level);
    if (recent.length > FLOOR_POLLS) recent.shift();
    floorDb = Math.min(...recent);
    const threshold = Math.max(MIN_DB, floorDb + ABOVE_FLOOR_DB) + extraDb;
    // what may be coming back of the assistant's own voice (see the top of the file)
    const back = Math.max(...played);
    const playingNow = remote.some((r) => r.lastLoud !== undefined && now - r.lastLoud <= PLAYING_WITHIN_MS);
    if (playingNow && !ducked && back > -100) {
      coupling.push(wide - back);
      if (coupling.length > COUPLING_POLLS) coupling.shift();
    }
    const couplingDb = coupling.length >= COUPLING_MIN_POLLS ? quantile(coupling, COUPLING_Q) : COUPLING_PRIOR_DB;
    S.echoCouplingDb = coupling.length >= COUPLING_MIN_POLLS ? couplingDb : null;
    const speech = level > threshold && wide > back + couplingDb + ECHO_MARGIN_DB;
    loudPolls = speech ? loudPolls + 1 : 0;
    if (ducked) {
      if (speech || level > threshold - ABOVE_FLOOR_DB / 2) quietSince = null;
      else if (quietSince === null) quietSince = now;
      if ((quietSince !== null && now - quietSince >= QUIET_MS) || now - ducked.t >= MAX_MUTE_MS) unmute(now);
      return;
    }
    if (loudPolls < ONSET_POLLS || !enabledByUser()) return;
    const playing = remote.some((r) => r.lastLoud !== undefined && now - r.lastLoud <= PLAYING_WITHIN_MS);
    if (!playing) return;
    setMuted(true);
    quietSince = null;
    ducked = { t: now, level_db: Math.round(level), floor_db: Math.round(floorDb), unmuted_at: null,
               flushed: null, false_alarm: null };
    S.ducks.push(ducked);
  }
  function ensureTimer() {
    if (!timer) timer = setInterval(tick, POLL_MS);
  }

  const md = navigator.mediaDevices;
  if (md && md.getUserMedia) {
    const orig = md.getUserMedia.bind(md);
    md.getUserMedia = async function (constraints) {
      const stream = await orig(constraints);
      const a = stream.getAudioTracks()[0];
      if (a) {
        if (mic) release(mic);
        try { mic = analyse(a, REMOTE_WINDOW); recent.length = 0; loudPolls = 0; ensureTimer(); } catch (_) { mic = null; }
      }
      return stream;
    };
  }
  if (window.RTCPeerConnection) {
    const origCDC = RTCPeerConnection.prototype.createDataChannel;
    RTCPeerConnection.prototype.createDataChannel = function () {
      const ch = origCDC.apply(this, arguments);
      ch.addEventListener("message", (ev) => {
        if (typeof ev.data !== "string" || ev.data.indexOf('"flush"') < 0) return;
        let m = null;
        try { m = JSON.parse(ev.data); } catch (_) { return; }
        if (m && m.type === "flush") onServerFlush(performance.now());
      });
      return ch;
    };
    const origSRD = RTCPeerConnection.prototype.setRemoteDescription;
    RTCPeerConnection.prototype.setRemoteDescription = async function () {
      const out = await origSRD.apply(this, arguments);
      for (const rx of this.getReceivers()) {
        const t = rx.track;
        if (!t || t.kind !== "audio" || remote.some((r) => r.track === t)) continue;
        try { remote.push(analyse(t, REMOTE_WINDOW)); ensureTimer(); coupling.length = 0; } catch (_) {}
      }
      if (ducked) unmute(performance.now());  // a new connection starts unmuted
      return out;
    };
  }
})();
