"""Client JSON whose strings are real Unicode: a lone UTF-16 surrogate is refused where it comes in,
with the field named; valid text (astral characters, an escaped backslash) passes unchanged."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.backend.protocol.commands import ProtocolError, decode_command
from app.backend.protocol.json_text import LoneSurrogateError, loads_text


@pytest.mark.parametrize(("raw", "path"), [
    ('"\\ud800"', ""),
    ('{"messages": [{"role": "user", "content": "hi \\udfff"}]}', "messages[0].content"),
    ('{"a": [1, {"b": ["ok", "\\uDBFF x"]}]}', "a[1].b[1]"),
    ('{"\\ud800": 1}', "\\ud800"),  # a key: named by its escape, so the error itself stays valid text
    ('{"pair then lone": "\\ud83d\\ude00\\ud83d"}', "pair then lone"),
])
def test_a_lone_surrogate_is_refused_and_named(raw: str, path: str) -> None:
    for doc in (raw, raw.encode("utf-8"), raw.encode("utf-16")):
        with pytest.raises(LoneSurrogateError) as err:
            loads_text(doc)
        assert err.value.path == path
        str(err.value).encode("utf-8")  # the message is valid text


@pytest.mark.parametrize("raw", ['{"face": "\\ud83d\\ude00"}', '"\\\\ud800"', '{"k": "\\u00e9\\u4e2d"}', "[]"])
def test_valid_text_decodes_as_json_loads_does(raw: str) -> None:
    assert loads_text(raw) == json.loads(raw) == loads_text(raw.encode("utf-8"))


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
                    max_leaves=20))
def test_any_json_of_valid_text_round_trips(value) -> None:
    for raw in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert loads_text(raw) == value


def test_the_realtime_decoder_answers_invalid_json_with_the_field() -> None:
    with pytest.raises(ProtocolError) as err:
        decode_command('{"type": "session.update", "session": {"instructions": "be \\ud800 nice"}}', max_bytes=1 << 20)
    assert (err.value.code, err.value.param) == ("invalid_json", "session.instructions")
