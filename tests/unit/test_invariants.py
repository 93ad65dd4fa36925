"""Unit tests of the protocol checker (app.client.invariants) on hand-built event logs.

Each rule has a good log that passes and at least one bad log that fails with a message naming
the rule's subject.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from app.client.invariants import check_invariants, load_events_jsonl


def _response(
    rid: str, epoch: int = 0, texts: tuple[str, ...] = ("Hi ", "there")
) -> list[dict[str, Any]]:
    """One well-formed speaking response: created .. n x (audio, transcript) .. done, rate_limits."""
    meta = {"epoch": epoch}
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response_id": rid,
            "response": {"id": rid, "status": "in_progress", "metadata": meta},
        },
        {"type": "response.output_item.added", "response_id": rid, "item": {"id": f"item_{rid}"}},
        {"type": "response.speak", "response_id": rid, "metadata": meta},
    ]
    for text in texts:
        events.append(
            {
                "type": "response.output_audio.delta",
                "response_id": rid,
                "delta": "AAAA",
                "metadata": meta,
            }
        )
        events.append(
            {"type": "response.output_audio_transcript.delta", "response_id": rid, "delta": text}
        )
    events += [
        {"type": "response.output_audio.done", "response_id": rid},
        {
            "type": "response.output_audio_transcript.done",
            "response_id": rid,
            "transcript": "".join(texts),
        },
        {"type": "response.output_item.done", "response_id": rid, "item": {"id": f"item_{rid}"}},
        {"type": "response.done", "response": {"id": rid, "status": "completed", "metadata": meta}},
        {"type": "rate_limits.updated", "rate_limits": []},
    ]
    return events


def _session(*middle: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "session.created", "session": {"id": "s", "epoch": 0}},
        {"type": "session.updated", "session": {"id": "s"}},
        {"type": "response.listen", "epoch": 0, "response": {"status": "listening"}},
    ]
    for block in middle:
        events += block
    events.append({"type": "session.closed", "reason": "client_close"})
    for seq, event in enumerate(events, start=1):
        event["server_event_seq"] = seq
    return events


def _index(
    events: list[dict[str, Any]], event_type: str, rid: str | None = None, nth: int = 0
) -> int:
    hits = [
        i
        for i, e in enumerate(events)
        if e["type"] == event_type
        and (rid is None or rid in (e.get("response_id"), (e.get("response") or {}).get("id")))
    ]
    return hits[nth]


def _assert_one(violations: list[str], fragment: str) -> None:
    assert violations, "expected a violation"
    assert any(fragment in v for v in violations), violations


@pytest.fixture
def good() -> list[dict[str, Any]]:
    return _session(_response("r1"), _response("r2"))


def test_good_log_passes(good: list[dict[str, Any]]) -> None:
    assert check_invariants(good) == []


def test_beta_names_and_id_less_listen_pass() -> None:
    events = _session(_response("r1"))
    for event in events:
        event["type"] = {
            "response.output_audio.delta": "response.audio.delta",
            "response.output_audio_transcript.delta": "response.audio_transcript.delta",
            "response.output_audio.done": "response.audio.done",
        }.get(event["type"], event["type"])
    assert check_invariants(events) == []


def test_cancelled_response_then_new_epoch_passes() -> None:
    first = _response("r1", epoch=0, texts=("a",))
    done = next(e for e in first if e["type"] == "response.done")
    done["response"]["status"] = "cancelled"
    for event in first:  # a cancel ends the response early: no audio/transcript done
        if event["type"] in {"response.output_audio.done", "response.output_audio_transcript.done"}:
            first.remove(event)
    assert check_invariants(_session(first, _response("r2", epoch=1))) == []


# Rule 1: response.created exactly once, before output.
def test_output_before_created(good: list[dict[str, Any]]) -> None:
    created = good.pop(_index(good, "response.created", "r2"))
    good.insert(_index(good, "response.output_audio.delta", "r2") + 1, created)
    _assert_one(check_invariants(good), "before response.created")


def test_created_twice_is_reused_id(good: list[dict[str, Any]]) -> None:
    good.insert(
        _index(good, "response.done", "r1"),
        copy.deepcopy(good[_index(good, "response.created", "r1")]),
    )
    _assert_one(check_invariants(good), "reused")


def test_response_id_reused_after_done() -> None:
    events = _session(_response("r1"), _response("r1"))
    _assert_one(check_invariants(events), "response id r1 reused")


# Rule 2: response.speak <= 1, not after the first audio delta.
def test_speak_twice(good: list[dict[str, Any]]) -> None:
    good.insert(
        _index(good, "response.speak", "r1"),
        copy.deepcopy(good[_index(good, "response.speak", "r1")]),
    )
    _assert_one(check_invariants(good), "more than one response.speak")


def test_speak_after_audio(good: list[dict[str, Any]]) -> None:
    speak = good.pop(_index(good, "response.speak", "r1"))
    good.insert(_index(good, "response.output_audio.delta", "r1") + 1, speak)
    _assert_one(check_invariants(good), "response.speak after the first audio delta")


# Rule 3: one transcript delta per audio delta; concatenation == transcript.done.
def test_missing_transcript_delta(good: list[dict[str, Any]]) -> None:
    good.pop(_index(good, "response.output_audio_transcript.delta", "r1"))
    violations = check_invariants(good)
    _assert_one(violations, "2 audio deltas but 1 transcript deltas")


def test_transcript_done_mismatch(good: list[dict[str, Any]]) -> None:
    good[_index(good, "response.output_audio_transcript.done", "r2")]["transcript"] = "Hi there!"
    _assert_one(check_invariants(good), "!= joined deltas")


# Rule 4: response.output_audio.done <= 1 and before response.done.
def test_audio_done_twice(good: list[dict[str, Any]]) -> None:
    index = _index(good, "response.output_audio.done", "r1")
    good.insert(index, copy.deepcopy(good[index]))
    _assert_one(check_invariants(good), "more than one response.output_audio.done")


def test_audio_done_after_response_done(good: list[dict[str, Any]]) -> None:
    audio_done = good.pop(_index(good, "response.output_audio.done", "r1"))
    good.insert(_index(good, "rate_limits.updated", nth=0) + 1, audio_done)
    _assert_one(check_invariants(good), "response.output_audio.done after response.done")


def test_audio_delta_after_audio_done(good: list[dict[str, Any]]) -> None:
    delta = good.pop(_index(good, "response.output_audio.delta", "r1", nth=1))
    transcript = good.pop(_index(good, "response.output_audio_transcript.delta", "r1", nth=1))
    at = _index(good, "response.output_audio.done", "r1") + 1
    good[at:at] = [delta, transcript]
    _assert_one(check_invariants(good), "audio delta after response.output_audio.done")


# Rule 5: response.done exactly once, then rate_limits.updated; nothing after done.
def test_missing_response_done(good: list[dict[str, Any]]) -> None:
    good.pop(_index(good, "response.done", "r2"))
    _assert_one(check_invariants(good), "response r2: no response.done")


def test_response_done_twice(good: list[dict[str, Any]]) -> None:
    index = _index(good, "response.done", "r1")
    good[index + 2 : index + 2] = copy.deepcopy(good[index : index + 2])
    _assert_one(check_invariants(good), "more than one response.done")


def test_response_done_for_unknown_response(good: list[dict[str, Any]]) -> None:
    good.insert(-1, {"type": "response.done", "response": {"id": "ghost", "status": "completed"}})
    good.insert(-1, {"type": "rate_limits.updated", "rate_limits": []})
    _assert_one(check_invariants(good), "response ghost: response.done before response.created")


def test_rate_limits_missing_after_done(good: list[dict[str, Any]]) -> None:
    good.pop(_index(good, "rate_limits.updated", nth=0))
    _assert_one(
        check_invariants(good), "response r1: response.done not followed by rate_limits.updated"
    )


def test_rate_limits_missing_at_end_of_log() -> None:
    events = _session(_response("r1"))[:-2]  # cut rate_limits.updated and session.closed
    _assert_one(check_invariants(events), "not followed by rate_limits.updated")


def test_output_after_response_done(good: list[dict[str, Any]]) -> None:
    late = {"type": "response.output_audio.delta", "response_id": "r1", "delta": "AAAA"}
    good.insert(_index(good, "response.created", "r2"), late)
    _assert_one(check_invariants(good), "after response.done")


# Rule 6: nothing from an old epoch after that epoch's terminal.
def test_old_epoch_after_new_epoch() -> None:
    events = _session(_response("r1", epoch=0), _response("r2", epoch=1))
    events.insert(-1, {"type": "response.listen", "epoch": 0, "response": {"status": "listening"}})
    _assert_one(check_invariants(events), "epoch 0 after that epoch ended")


def test_late_output_of_cancelled_response() -> None:
    first = _response("r1", epoch=3, texts=("a",))
    next(e for e in first if e["type"] == "response.done")["response"]["status"] = "cancelled"
    late = {
        "type": "response.output_audio.delta",
        "response_id": "r1",
        "delta": "AAAA",
        "metadata": {"epoch": 3},
    }
    events = _session(first, [late])
    _assert_one(
        check_invariants(events), "response r1: response.output_audio.delta after response.done"
    )


def test_cancelled_done_stamped_with_new_epoch_passes() -> None:
    first = _response("r1", epoch=0, texts=("a",))
    done = next(e for e in first if e["type"] == "response.done")
    done["response"].update(status="cancelled", metadata={"epoch": 1})
    events = _session(
        first,
        [{"type": "response.listen", "epoch": 1, "response": {"status": "listening"}}],
        _response("r2", epoch=1),
    )
    assert check_invariants(events) == []


def test_epoch_in_metadata_is_read() -> None:
    events = _session(_response("r1", epoch=2))
    events.insert(-1, {"type": "overlap.decision", "metadata": {"epoch": 1}})
    _assert_one(check_invariants(events), "epoch 1 after that epoch ended")


# Rule 7: server_event_seq increasing, session.created first, session.closed last.
def test_server_event_seq_not_increasing(good: list[dict[str, Any]]) -> None:
    good[5]["server_event_seq"] = good[4]["server_event_seq"]
    _assert_one(check_invariants(good), "not greater than previous")


def test_event_after_session_closed(good: list[dict[str, Any]]) -> None:
    good.append({"type": "response.listen", "epoch": 0, "server_event_seq": 10_000})
    _assert_one(check_invariants(good), "event after session.closed")


def test_response_before_session_created(good: list[dict[str, Any]]) -> None:
    good.insert(0, good.pop(_index(good, "response.listen")))
    for seq, event in enumerate(good, start=1):
        event["server_event_seq"] = seq
    _assert_one(check_invariants(good), "response event before session.created")


def test_load_events_jsonl_round_trip(tmp_path: Path, good: list[dict[str, Any]]) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in good) + "\n\n", encoding="utf-8")
    assert load_events_jsonl(path) == good
    path.write_text('{"type": "x"}\n[1]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=":2: not a JSON object"):
        load_events_jsonl(path)
    path.write_text("{oops\n", encoding="utf-8")
    with pytest.raises(ValueError, match=":1: not JSON"):
        load_events_jsonl(path)
