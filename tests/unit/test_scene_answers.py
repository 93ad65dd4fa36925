"""Camera questions answered from the ``tiny`` eyes' scene description (scene_answers)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageDraw

from app.backend.models.tiny.scene_answers import camera_reply, parse_scene
from app.backend.models.tiny.vision import SceneDescriber

LINE = ("a white background with three red circles, one blue square on the right and two green triangles; "
        "the text: OPEN, 24 HOURS; a clock showing 3:40")


def test_the_description_is_read_back_into_its_parts():
    s = parse_scene(LINE)
    assert s.background == "white"
    assert s.groups == (("red", "circle", 3), ("blue", "square", 1), ("green", "triangle", 2))
    assert s.text == "OPEN, 24 HOURS"
    assert s.clock == "3:40"


@pytest.mark.parametrize(("question", "reply"), [
    ("How many circles do you see?", "I see three circles."),
    ("Count the triangles.", "I see two triangles."),
    ("How many squares are there?", "I see one square."),
    ("How many stars are there?", "I don't see any stars."),
    ("How many shapes can you see?", "I see six shapes."),
    ("What colour is the square?", "The square is blue."),
    ("What color is the background?", "The background is white."),
    ("What colour is the star?", "I don't see a star."),
    ("What does the sign say?", "It says OPEN, 24 HOURS."),
    ("Can you read the word I'm showing you?", "It says OPEN, 24 HOURS."),
    ("What time does the clock show?", "The clock shows 3:40."),
    ("Is there a circle?", "Yes, there are three red circles."),
    ("Is there a hexagon in the picture?", "No, I don't see a hexagon."),
    ("What do you see?", f"I see {LINE}."),
])
def test_a_question_the_description_answers_gets_its_answer(question, reply):
    assert camera_reply(question, ["", LINE]) == reply


def test_shapes_of_several_colours_are_all_named():
    line = "a white background with one red circle on the left and one blue circle on the right"
    assert camera_reply("What colour is the circle?", [line]) == "There are red and blue circles."


def test_no_writing_is_said_so():
    assert camera_reply("What is written here?", ["a plain white background"]) == "I can't see any writing."


@pytest.mark.parametrize(("question", "seen"), [
    ("How many legs does a dog have?", [LINE]),          # not about the frame
    ("What colour is the sky?", [LINE]),                 # a thing the eyes have no name for
    ("What colour is the car?", [LINE]),
    ("What time is it?", ["a white background with a red circle"]),  # no clock in view
    ("How many circles do you see?", []),                 # nothing seen
    ("How many circles do you see?", ["  "]),
    ("What does the sign say?", ["OPEN 24 HOURS"]),       # not the eyes' grammar: the LM reads it
    ("", [LINE]),
])
def test_other_questions_are_left_to_the_language_model(question, seen):
    assert camera_reply(question, seen) is None


@given(st.text(max_size=80), st.lists(st.text(max_size=120), max_size=3))
def test_never_raises_on_any_text(question, seen):
    out = camera_reply(question, seen)
    assert out is None or out.strip()


def _stars_frame(n: int) -> np.ndarray:
    img = Image.new("RGB", (640, 480), "white")
    draw = ImageDraw.Draw(img)
    for i in range(n):
        cx, cy, r = 100 + 110 * i, 240, 40
        pts = [(cx + (r if k % 2 == 0 else r * 0.45) * np.sin(k * np.pi / 5),
                cy - (r if k % 2 == 0 else r * 0.45) * np.cos(k * np.pi / 5)) for k in range(10)]
        draw.polygon(pts, fill=(40, 160, 60))
    return np.asarray(img)


def test_shapes_that_ocr_reads_as_glyphs_are_still_counted():
    """RapidOCR reads a solid star as "★"; its box must not hide the star from the shape reader."""
    from app.backend.models.tiny.ocr import RapidOcr

    line = SceneDescriber(RapidOcr()).describe(_stars_frame(4))
    assert camera_reply("How many stars do you see?", [line]) == "I see four stars.", line
