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


# ---- a reply cut by max_tokens (issue 11 part 3): finish_reason "length", speech ends on a boundary

def test_a_reply_cut_by_max_tokens_ends_at_its_last_sentence():
    from app.backend.models.tiny.llm import finish_reply

    r = finish_reply("It is spring. The weather gets warmer and", True, max_sentences=3)
    assert (r.text, r.finish_reason) == ("It is spring.", "length")


def test_without_a_sentence_end_it_ends_at_the_last_clause_boundary():
    from app.backend.models.tiny.llm import finish_reply

    r = finish_reply("In spring the days grow longer, the weather gets warmer and", True)
    assert (r.text, r.finish_reason) == ("In spring the days grow longer.", "length")


def test_with_no_boundary_the_dangling_words_are_dropped():
    from app.backend.models.tiny.llm import finish_reply

    assert finish_reply("The sun is the brightest object in the", True).text == "The sun is the brightest object."
    assert finish_reply("Summer is a beautiful time of", True).text == "Summer is a beautiful time."
    assert finish_reply("The", True).text == "The."  # (one word is kept)


def test_a_reply_that_ended_by_itself_or_was_capped_by_the_sentence_rule_is_stop():
    from app.backend.models.tiny.llm import finish_reply

    assert finish_reply("The capital of France is Paris.", False) == finish_reply("The capital of France is Paris.", True)
    assert finish_reply("The capital of France is Paris.", True).finish_reason == "stop"
    # the cut fell in a third sentence, which the two-sentence cap drops anyway
    r = finish_reply("Paris is the capital. It is big. It has many", True, max_sentences=2)
    assert (r.text, r.finish_reason) == ("Paris is the capital. It is big.", "stop")
    # the model began a new line: the first line is complete
    assert finish_reply("Paris is the capital\nUser: and", True).finish_reason == "stop"
    assert finish_reply("The sun is hot and", False).finish_reason == "stop"  # not cut: kept as the model ended it
