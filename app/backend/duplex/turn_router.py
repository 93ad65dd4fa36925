"""TurnRouter: turns the turn tracker's signals into reply decisions.

A session's :class:`~app.backend.duplex.turn_tracker.TurnTracker` says *what the user did* (speech
started, a pause, the end of a turn, a resumption); this collaborator decides *what the reply does*
about it, through the session's :class:`~app.backend.duplex.replies.ReplyRunner`:

* a pause starts a speculative reply (prepared, not shown); a resumption drops it without a trace;
* an end of turn confirms that reply (or starts one), released at once (``reply_at: end_of_turn``)
  or at the next unit boundary;
* the user going on right after a wrong end of turn (within ``turn_policy.resume_window_ms``) drops
  the reply to the fragment, and the next reply answers fragment + rest;
* speech over a reply: a barge-in (``overlap_policy: barge_in_on_speech``) cancels it; otherwise
  ``barge_in_ms`` of it ends the reply (a soft interrupt: at the next unit boundary, or, where the
  detector reads words, as soon as they are read and are not only a listener response ("mm-hm",
  "yeah"), noise or the reply's own echo: a read as short as a listener response must say so twice
  in a row (the words are read as they go on and at each pause) unless it asks to stop ("wait"),
  or the whole utterance must); the utterance said over it is deferred and answered when the reply
  ends (:meth:`promote_deferred`); a listener response is never answered.

It owns no state of its own: the tracker, the runner, the playback ledger and the history own theirs;
the session hands it their references and small callables (``emit``, ``epoch``, ``settings``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from app.backend.duplex.camera import Camera
from app.backend.duplex.history import History
from app.backend.duplex.playback import PlaybackLedger
from app.backend.duplex.replies import ReplyRunner, meaningful
from app.backend.duplex.settings import SessionSettings
from app.backend.duplex.turn_tracker import TurnTracker
from app.backend.protocol import events as E
from app.backend.turns.detector import TurnSignal
from app.backend.turns.text_cues import (
    asks_to_stop,
    backchannel,
    backchannel_length,
    echoes,
    may_be_backchannel,
)
from app.constants import INPUT_SAMPLE_RATE_HZ

log = logging.getLogger(__name__)


def _ms(sample: int) -> int:
    return int(sample * 1000 / INPUT_SAMPLE_RATE_HZ)


class TurnRouter:
    """Reply decisions for one session's turn signals (runs on the session's owner task only).

    Args:
        session_id: for logs.
        turn_policy: the deploy config's ``turn_policy`` (``resume_window_ms``, ``reply_at``,
            ``overlap_short_ack_ms``).
        turns, replies, camera, ledger, history: the session's collaborators.
        emit: sends one server event (the session's outbox).
        epoch: the current epoch (hard interrupts advance it).
        settings: the session's current :class:`~app.backend.duplex.settings.SessionSettings`.
        unit: the unit in progress (``response.listen`` names it).
    """

    def __init__(self, session_id: str, turn_policy: Any, *, turns: TurnTracker, replies: ReplyRunner,
                 camera: Camera, ledger: PlaybackLedger, history: History, emit: Callable[[E.ServerEvent], None],
                 epoch: Callable[[], int], settings: Callable[[], SessionSettings],
                 unit: Callable[[], int]) -> None:
        self._session_id = session_id
        self._tcfg = turn_policy
        self._resume_window = int(turn_policy.resume_window_ms) * INPUT_SAMPLE_RATE_HZ // 1000  # samples
        self._turns = turns
        self._replies = replies
        self._camera = camera
        self._ledger = ledger
        self._history = history
        self._emit = emit
        self._epoch = epoch
        self._settings = settings
        self._unit = unit

    def cancel_reply(self, reason: str | None) -> None:
        """Hard interrupt of the reply in progress; an utterance deferred over it is dropped too."""
        if self._replies.active is None:
            return
        self._replies.cancel(reason)
        self._turns.drop_deferred()

    def on_signal(self, sig: TurnSignal, *, commit: bool = False) -> None:
        """Act on one turn signal; ``commit``: it comes from the client's ``input_audio_buffer.commit``."""
        replies = self._replies
        if sig.kind == "speech_started":
            if self._turns.resumes(sig.at_sample, self._resume_window):
                r0 = replies.active
                # the user was already talking again when the reply's first audio went out (its onset
                # comes before the release in media time; the input was held for an end-of-turn score
                # meanwhile): nobody heard it, and no echo of it can come first
                if r0 is None or not r0.clock.started or sig.at_sample < r0.clock.speak_sample:
                    self._resume_turn(sig)
                    return
                # its audio is already out: the reply runs on as any reply the user talks over (a soft
                # interrupt, or an echo that must not stop it); the words join the fragment's when answered
                item = self._turns.continue_turn()
            else:
                item = self._turns.start_item(over_reply=replies.active_response_id is not None)
            self._emit(E.SpeechStarted(epoch=self._epoch(), item_id=item, audio_start_ms=_ms(sig.at_sample)))
            self._camera.maybe_read(force=True)
            rid = replies.active_response_id
            if rid is not None and self._settings().overlap_policy == "barge_in_on_speech":
                self.cancel_reply("barge_in")
                self._emit(E.OutputAudioCleared(epoch=self._epoch(), response_id=rid))
            return
        if sig.kind == "end_of_turn":
            self._camera.turn_ended()
        item_id = self._turns.current_item()
        utt = sig.utterance if sig.utterance is not None else np.zeros(0, np.float32)
        r = replies.active
        if not (r is not None and r.created):
            utt = self._turns.joined(utt)  # a turn the user went on with: fragment + rest
        if r is not None and r.created:
            if sig.kind == "end_of_turn":
                self._emit(E.SpeechStopped(epoch=self._epoch(), item_id=item_id, audio_end_ms=_ms(sig.at_sample)))
                self._overlap_ended(sig, item_id, utt)
            return
        log.debug("session %s: turn signal %s at %d (%r)", self._session_id, sig.kind, sig.at_sample, sig.text)
        if sig.kind == "resumed":  # the pause was not the end: drop the speculative reply
            if r is not None and not r.confirmed:
                self.cancel_reply(None)
            return
        if sig.kind == "pause":  # prepare the reply now, show it only if the turn really ends
            if r is not None and r.confirmed:
                return  # the reply to an earlier turn is still being made: this one waits its turn
            if r is not None:
                self.cancel_reply(None)
            if self._settings().auto_response:
                replies.start(utt, item_id, drain=False, confirmed=False, seen_text=self._camera.seen_text)
            return
        self._emit(E.SpeechStopped(epoch=self._epoch(), item_id=item_id, audio_end_ms=_ms(sig.at_sample)))
        if not commit and sig.text is not None and self._turns.began_over_reply and self._only_listening(sig.text, ""):
            # "yeah, okay" said over a reply that has ended meanwhile: acknowledged, not answered
            if r is not None and not r.confirmed:
                self.cancel_reply(None)
            return
        self._turns.note_turn_end(item_id, utt, sig.at_sample)
        if not self._settings().auto_response:
            self._turns.hold(item_id, utt)
            return
        now = commit or self._tcfg.reply_at == "end_of_turn"  # else: wait for the next unit boundary
        if r is not None and not r.confirmed:  # the speculative reply answers exactly this turn
            replies.confirm(drain=commit, boundary_passed=now)
            return
        if r is not None and not commit:  # a second turn while the first is being answered: next
            self._turns.defer(item_id, utt)
            return
        if r is not None:  # a commit answers what the user just committed
            self.cancel_reply(None)
        replies.start(utt, item_id, drain=commit, boundary_passed=now, seen_text=self._camera.seen_text)

    def check_overlap(self, unit_index: int, at_sample: int) -> bool:
        """The user has spoken at least ``barge_in_ms`` over the open reply. When the words can be
        read (:attr:`TurnTracker.reads_words`) they are transcribed first, as soon as that much is
        heard (and again after each further ``barge_in_ms`` while they read as a listener
        response; the input is held meanwhile, so the decision stays at this sample) and
        :meth:`overlap_heard` decides. Otherwise (the silence detector) the reply ends now, at the
        unit boundary the session calls this at (a soft interrupt).

        Returns:
            True when the reply ended now; False while its words are read (it goes on meanwhile).
        """
        if self._turns.read_overlap(at_sample, unit_index):
            log.debug("session %s: reading the words over the reply at %d", self._session_id, at_sample)
            return False
        self._end_for_overlap(unit_index)
        return True

    def overlap_heard(self, text: str | None, unit_index: int, speech_ms: float = 0.0) -> None:
        """The words said over the reply at a boundary: a listener response, noise or the reply's own
        words coming back leave the reply playing, and so does one word a letter away from a listener
        response while the words are still short (:func:`~app.backend.turns.text_cues.may_be_backchannel`:
        Whisper read "Yeah" 350 ms into it as "Yet"); other words end it: at once when they are
        longer than any listener response or when they ask to stop
        (:func:`~app.backend.turns.text_cues.asks_to_stop`: "wait", "stop"), otherwise once two
        reads in a row say so (:meth:`TurnTracker.confirm_overlap`: a short read mid-word is often
        a misread "yeah"), or when the utterance ends and is read whole (:meth:`_overlap_ended`).
        (Reads come as the words go on and at the first check of each pause, :meth:`overlap_paused`.)
        Unread words (``None``: the transcript failed or timed out, as on a machine too busy to
        transcribe within ``SCORE_TIMEOUT_S``) are judged by their length, as when no transcript is
        read at all: under ``overlap_short_ack_ms`` of speech (``speech_ms``) they may be a "yeah"
        and the reply plays on (they are read again as they go on); longer ones end it."""
        r = self._replies.active
        if r is None or not r.created:
            return  # it ended meanwhile
        short = speech_ms < self._tcfg.overlap_short_ack_ms
        if text is not None and (self._only_listening(text, r.clock.text_sent) or (short and may_be_backchannel(text))):
            self._turns.confirm_overlap(False)
            log.debug("session %s: %r over the reply is not a barge-in (yet)", self._session_id, text)
            return
        if text is not None:
            if not self._turns.confirm_overlap(True) and backchannel_length(text) and not asks_to_stop(text):
                log.debug("session %s: %r over the reply (%.0f ms of speech) may take the turn: read again",
                          self._session_id, text, speech_ms)
                return
            log.debug("session %s: %r over the reply (%.0f ms of speech) takes the turn", self._session_id, text,
                      speech_ms)
        elif short:
            log.info("session %s: words over the reply unread after %.0f ms of speech: short, the reply plays on",
                     self._session_id, speech_ms)
            return
        self._end_for_overlap(unit_index)

    def overlap_paused(self, text: str, speech_ms: float) -> None:
        """The user fell silent while talking over the open reply, and the detector's check of the
        pause read the words so far (``text``, ``speech_ms`` of speech): one more read of them, as
        :meth:`overlap_heard` judges reads while they are said (the session calls this at the first
        check of each pause only: the later ones read the same audio), so a "Wait, stop." ends the reply
        now and not when the turn is decided (the end-of-turn model may take seconds to call
        espeak-ng's flat words complete). It is not the end of the utterance: the pause may be
        the one inside "Yeah, right.", whose "Yeah" Whisper base read there as "yet"."""
        if self._turns.began_over_reply:
            self._turns.note_overlap_read()
            self.overlap_heard(text, self._unit(), speech_ms)

    @staticmethod
    def _only_listening(text: str, reply_text: str) -> bool:
        """Words over a reply that do not take the turn: no words, a backchannel, or an echo."""
        return not meaningful(text) or backchannel(text) or echoes(text, reply_text)

    def _end_for_overlap(self, unit_index: int) -> None:
        rid = self._replies.end_for_overlap()
        self._emit(E.ResponseListen(epoch=self._epoch(), session_id=self._session_id, unit_index=unit_index,
                                    response_id=rid, reason="user_overlap"))
        self.promote_deferred()

    def _overlap_ended(self, sig: TurnSignal, item_id: str, utt: np.ndarray) -> None:
        """An utterance said over the open reply ended before the reply did.

        With its transcript (the learned detector's text cue): a listener response ("mm-hm",
        "yeah", :func:`~app.backend.turns.text_cues.backchannel`) is acknowledged and dropped, and so
        are the reply's own words coming back (:func:`~app.backend.turns.text_cues.echoes`);
        any other words ("wait, stop", a new question) take the turn: the reply ends now (a soft
        interrupt, as at a unit boundary) and the words are answered. Without a transcript, the
        length decides: a short one (a backchannel) is dropped, one of at least
        ``overlap_short_ack_ms`` of speech is answered when the reply ends.
        """
        if sig.text is not None:
            r = self._replies.active
            if r is None or self._only_listening(sig.text, r.clock.text_sent):
                return
            if self._settings().auto_response:
                self._turns.defer(item_id, self._turns.joined(utt))
            self._end_for_overlap(self._unit())
            return
        if sig.speech_ms >= self._tcfg.overlap_short_ack_ms and self._settings().auto_response:
            self._turns.defer(item_id, self._turns.joined(utt))

    def _resume_turn(self, sig: TurnSignal) -> None:
        """The user went on right after a turn end, before any of the reply was heard (or began to speak
        before its first audio was released): that end was
        wrong. The reply to the fragment is dropped (cancelled, ``user_resumed``, if it was already
        open; taken out of the history if it had already finished), and the utterance now starting
        joins the fragment: the next reply answers the whole of it. (Once the reply's audio is out,
        the user's words are handled as any overlap, and join the fragment when answered.)"""
        rid = self._replies.active_response_id
        self.cancel_reply("user_resumed" if rid else None)
        if rid is not None:  # opened, nothing of it played yet
            self._emit(E.OutputAudioCleared(epoch=self._epoch(), response_id=rid))
        item = self._turns.continue_turn()
        answered = self._ledger.last_answer_to(item)
        if answered is not None and self._history.drop(answered.item_id):
            self._emit(E.ItemDeleted(epoch=self._epoch(), item_id=answered.item_id))
        self._emit(E.SpeechStarted(epoch=self._epoch(), item_id=item, audio_start_ms=_ms(sig.at_sample)))
        self._camera.maybe_read(force=True)

    def promote_deferred(self) -> None:
        """Answer the utterance said over the reply that just ended (if any, and nothing else is under way)."""
        if self._replies.active is not None:
            return
        deferred = self._turns.take_deferred()
        if deferred is None:
            return
        item_id, utt = deferred
        self._replies.start(utt, item_id, drain=False, boundary_passed=self._tcfg.reply_at == "end_of_turn",
                            seen_text=self._camera.seen_text)
