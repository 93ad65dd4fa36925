"""What the user heard: playback.ack truncation of a response transcript."""

from app.backend.duplex.playback import heard_text

TEXT = "The capital of France is Paris. It is lovely."
MARKS = [(31, 2000.0), (len(TEXT), 3500.0)]


def test_whole_response_heard():
    assert heard_text(TEXT, MARKS, 3500) == TEXT
    assert heard_text(TEXT, MARKS, 9000) == TEXT


def test_first_delta_heard_exactly():
    assert heard_text(TEXT, MARKS, 2000) == TEXT[:31].rstrip()


def test_cut_inside_a_delta_is_proportional_and_on_a_word_boundary():
    half = heard_text(TEXT, MARKS, 1000)  # half of the first delta: ~15 chars
    assert TEXT.startswith(half)
    assert 8 <= len(half) <= 16
    assert not half.endswith(" ")
    assert TEXT[len(half)] == " "


def test_nothing_heard():
    assert heard_text(TEXT, MARKS, 0) == ""
    assert heard_text(TEXT, [], 500) == ""


def test_a_whole_millisecond_ack_of_a_fully_played_reply_keeps_the_last_word():
    marks = [(25, 1487.375), (31, 2356.833)]
    assert heard_text("The capital on France is Paris.", marks, 2356.0) == "The capital on France is Paris."
    assert heard_text("The capital on France is Paris.", marks, 2300.0) == "The capital on France is"
