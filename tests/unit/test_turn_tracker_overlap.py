"""Words said over a reply, read before they end: one read that would take the turn asks for the
next; two in a row (of one utterance) take it (TurnTracker.confirm_overlap)."""

from __future__ import annotations

from app.backend.duplex.turn_tracker import TurnTracker
from app.backend.turns.silence import SilenceTurnDetector
from app.config import load_deploy_config


def _tracker() -> TurnTracker:
    from app.backend.models.tiny.vad import SileroVad

    return TurnTracker(SilenceTurnDetector(SileroVad(), load_deploy_config().turn_policy))


def test_two_reads_in_a_row_that_take_the_turn_confirm_it() -> None:
    t = _tracker()
    t.start_item(over_reply=True)
    assert t.confirm_overlap(True) is False  # "The air-dower" for "Yeah o...": read again
    assert t.confirm_overlap(True) is True


def test_a_listener_read_between_them_starts_over() -> None:
    t = _tracker()
    t.start_item(over_reply=True)
    assert t.confirm_overlap(True) is False
    assert t.confirm_overlap(False) is False  # "Yeah, okay."
    assert t.confirm_overlap(True) is False
    assert t.confirm_overlap(True) is True


def test_a_new_utterance_does_not_inherit_the_last_ones_read() -> None:
    t = _tracker()
    t.start_item(over_reply=True)
    assert t.confirm_overlap(True) is False
    t.start_item(over_reply=True)
    assert t.confirm_overlap(True) is False


def test_only_reads_as_short_as_a_listener_response_wait_for_a_second_read() -> None:
    from app.backend.turns.text_cues import backchannel_length

    assert backchannel_length("The air-dower") and backchannel_length("EF-O-T") and backchannel_length("Wait, stop.")
    assert not backchannel_length("What is the capital on?")  # five words: no listener response
    assert not backchannel_length("") and not backchannel_length("...")
