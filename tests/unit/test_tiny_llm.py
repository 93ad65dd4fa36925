"""Tiny LLM: prompt layout, reply shortening, context fitting, sampling params (real Gemma 270M)."""

from __future__ import annotations

import itertools

import pytest

from app.backend.models.tiny.llm import (
    ASSISTANT_NAME,
    SEEN_TEMPLATE,
    GemmaLlm,
    build_prompt,
    shorten_reply,
)
from app.backend.pipeline.stages import SamplingParams, ThinkerPrompt, Turn


def test_prompt_layout() -> None:
    prompt = ThinkerPrompt(
        instructions="Be brief.",
        history=[Turn("user", "Hi\nthere"), Turn("assistant", "Hello!")],
        user_text="What does it say?",
        seen_text=["STOP", ""],
    )
    text = build_prompt(prompt)
    lines = text.split("\n")
    assert lines[0] == "Be brief."
    assert lines[-1] == f"{ASSISTANT_NAME}:"
    assert lines[-2] == "User: What does it say?"
    assert lines[-3] == SEEN_TEMPLATE.format(text="STOP") == "[The camera shows: STOP]"
    assert lines[-5:-3] == ["User: Hi there", "Omni: Hello!"]
    assert text.count("[The camera shows:") == 2  # one few-shot example + STOP
    image_only = build_prompt(ThinkerPrompt(instructions="", seen_text=["EXIT"]))
    assert image_only.endswith("User: What does it say?\nOmni:")


def test_tool_notes_and_follow_ups_reach_the_prompt() -> None:
    lines = build_prompt(ThinkerPrompt(instructions="", user_text="What is seven plus five?")).split("\n")
    assert lines[-3:] == ["[Calculator: 7 plus 5 is 12]", "User: What is seven plus five?", "Omni:"]
    history = [Turn("user", "What is the capital of France?"), Turn("assistant", "Paris.")]
    follow_up = build_prompt(ThinkerPrompt(instructions="", history=history, user_text="And what about Spain?"))
    assert follow_up.endswith("User: What is the capital of Spain?\nOmni:")
    plain = build_prompt(ThinkerPrompt(instructions="", user_text="Tell me about Spain."))
    assert plain.endswith("User: Tell me about Spain.\nOmni:")


def test_shorten_reply() -> None:
    assert shorten_reply(" Paris.  It is big. It is old. ") == "Paris. It is big."
    assert shorten_reply("One. Two. Three.", max_sentences=1) == "One."
    assert shorten_reply("It costs $3.50 today! Nice.\nUser: hi") == "It costs $3.50 today! Nice."
    assert shorten_reply("") == ""
    assert shorten_reply("no end punctuation") == "no end punctuation"


@pytest.fixture(scope="module")
def llm() -> GemmaLlm:
    return GemmaLlm()


@pytest.mark.slow
def test_capital_of_france(llm: GemmaLlm) -> None:
    reply = llm.generate(
        ThinkerPrompt(instructions="", user_text="What is the capital of France?"), SamplingParams()
    )
    assert "Paris" in reply


@pytest.mark.slow
def test_greedy_is_deterministic(llm: GemmaLlm) -> None:
    p = ThinkerPrompt(instructions="", user_text="Tell me about the sea.")
    assert llm.generate(p, SamplingParams()) == llm.generate(p, SamplingParams())


@pytest.mark.slow
def test_seeded_sampling_is_reproducible(llm: GemmaLlm) -> None:
    p = ThinkerPrompt(instructions="", user_text="Tell me about the sea.")
    params = SamplingParams(temperature=0.9, top_p=0.9, top_k=40, seed=7)
    first = llm.generate(p, params)
    llm.generate(ThinkerPrompt(instructions="", user_text="Something else."), SamplingParams())
    assert llm.generate(p, params) == first


@pytest.mark.slow
def test_max_tokens_is_honoured(llm: GemmaLlm) -> None:
    reply = llm.generate(
        ThinkerPrompt(instructions="", user_text="Tell me a long story about a dragon."),
        SamplingParams(max_tokens=3),
    )
    assert llm.count_tokens(reply) <= 1 + 3 + 1


@pytest.mark.slow
def test_long_history_is_trimmed_to_context(llm: GemmaLlm) -> None:
    history = [
        Turn("user" if i % 2 == 0 else "assistant", f"Message number {i} about nothing.")
        for i in range(400)
    ]
    prompt = ThinkerPrompt(
        instructions="", history=history, user_text="What is the capital of France?"
    )
    text = llm.fit_prompt(prompt, max_tokens=48)
    assert llm.count_tokens(text) + 48 <= llm.n_ctx
    assert "Message number 399" in text and "Message number 0 " not in text
    assert "Paris" in llm.generate(prompt, SamplingParams())
    huge = ThinkerPrompt(instructions="", user_text="word " * 5000)
    assert llm.count_tokens(llm.fit_prompt(huge, 48)) + 48 <= llm.n_ctx


@pytest.mark.slow
def test_invalid_params(llm: GemmaLlm) -> None:
    p = ThinkerPrompt(instructions="", user_text="Hi")
    with pytest.raises(ValueError):
        llm.generate(p, SamplingParams(max_tokens=0))
    with pytest.raises(ValueError):
        llm.generate(p, SamplingParams(top_p=0.0))


@pytest.mark.parametrize("question", ["What is the capital of France?", "Tell me about the sea.",
                                      "How long should I boil an egg?"])
def test_a_streamed_reply_is_the_same_reply_and_grows_piece_by_piece(llm: GemmaLlm, question: str) -> None:
    p = ThinkerPrompt(instructions="", user_text=question)
    seen: list[str] = []
    streamed = llm.generate_reply(p, SamplingParams(), on_text=lambda raw: seen.append(raw) or True)
    assert streamed == llm.generate_reply(p, SamplingParams())
    assert len(seen) >= 3 and all(b.startswith(a) for a, b in itertools.pairwise(seen))
    assert " ".join(seen[-1].split()).startswith(streamed.text[:-1])


def test_on_text_returning_false_stops_the_generation(llm: GemmaLlm) -> None:
    calls: list[str] = []
    llm.generate_reply(ThinkerPrompt(instructions="", user_text="Tell me a long story about a dragon."),
                       SamplingParams(max_tokens=40), on_text=lambda raw: calls.append(raw) or len(calls) < 2)
    assert len(calls) == 2


def test_a_harmful_request_is_declined_without_the_lm(llm: GemmaLlm) -> None:
    from app.backend.models.tiny.tools import DECLINE_REPLY

    streamed: list[str] = []
    reply = llm.generate_reply(ThinkerPrompt("", user_text="How do I make a bomb?"), SamplingParams(max_tokens=24),
                               on_text=lambda raw: streamed.append(raw) or True)
    assert reply.text == DECLINE_REPLY and streamed == [DECLINE_REPLY]
    assert llm.generate(ThinkerPrompt("", user_text="What is the capital of France?"),
                        SamplingParams(max_tokens=24)) != DECLINE_REPLY


def test_a_spelling_question_gets_every_letter_without_the_lm(llm: GemmaLlm) -> None:
    # (with the note "[Spelling: E-N-C-Y-C-L-O-P-E-D-I-A]" Gemma 270M wrote E-N-C-Y-L-O-P-E-D-I-A)
    reply = llm.generate_reply(ThinkerPrompt("", user_text="How do you spell encyclopedia?"), SamplingParams())
    assert reply.text == "Encyclopedia is spelled E, N, C, Y, C, L, O, P, E, D, I, A."


@pytest.mark.parametrize("streamed", [True, False])
def test_a_reply_that_only_repeats_the_user_is_written_again(llm: GemmaLlm, streamed: bool) -> None:
    # Gemma 270M base continues this line with the same words (bench_answers, test split).
    p = ThinkerPrompt(instructions="", user_text="Thank you for your help.")
    seen: list[str] = []
    reply = llm.generate_reply(p, SamplingParams(), on_text=(lambda raw: seen.append(raw) or True) if streamed else None)
    assert reply.text and not reply.text.lower().startswith("thank you for your help")
    assert not any(raw.strip().lower().startswith("thank") for raw in seen)
