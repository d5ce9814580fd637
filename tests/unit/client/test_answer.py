"""``client.answer.Answer``: the one accumulator of bench's calls, agent turns and probe's and verify's
replies. Events folded by kind and by choice, tool calls assembled from their deltas, and a bad event
meaning the same to every reader: raised, or kept as the reply's problem by a lenient one."""

from __future__ import annotations

import json

import pytest

from lossless.client.answer import Answer, MalformedStream, StreamError, ToolCall
from lossless.records import CONTENT, EMPTY, TOOL, USAGE


def event(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def delta(i: int, finish: str | None = None, **fields: object) -> bytes:
    return event(choices=[{"index": i, "delta": fields, "finish_reason": finish}])


def test_tool_calls_are_assembled_from_their_deltas_and_count_as_token_events() -> None:
    acc = Answer("chat")

    def chunk(delta: dict) -> dict:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}

    acc.add(chunk({"role": "assistant"}), 1, stream=True)
    acc.add(
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x"'}}]}),
        2,
        True,
    )
    acc.add(
        chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
        3,
        True,
    )
    acc.add(chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}), 4, True)
    acc.add(chunk({"content": "ok"}), 5, True)
    assert acc.tool_calls() == (ToolCall("a", "f", '{"x": 1}'), ToolCall("b", "g", "{}"))
    assert "".join(acc.kinds) == "n" + TOOL * 3 + CONTENT
    whole = Answer("chat")
    call = {"id": "c", "type": "function", "function": {"name": "h", "arguments": "[]"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    whole.add({"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}, 9, stream=False)
    assert whole.tool_calls() == (ToolCall("c", "h", "[]"),) and whole.finish_reason() == "tool_calls"
    with pytest.raises(ValueError):
        Answer("chat").add(chunk({"tool_calls": [{"index": "zero"}]}), 1, True)


def test_choices_are_folded_by_their_index_and_events_by_kind() -> None:
    answer = Answer("chat")
    done = answer.read(1, [delta(0, role="assistant"), delta(1, content="b1"), delta(0, content="a1")])
    done |= answer.read(2, [delta(1, "stop", content="b2"), delta(0, "length")])
    usage = {"prompt_tokens": 3, "completion_tokens": 4}
    done |= answer.read(3, [event(choices=[], usage=usage), b"[DONE]", b"not read after [DONE]"])
    assert done and answer.done and answer.finished()
    assert (answer.text(0), answer.text(1), answer.text()) == ("a1", "b1b2", "a1")
    assert (answer.finish_reason(0), answer.finish_reason(1)) == ("length", "stop")
    assert answer.event_ns == [1, 1, 1, 2, 2, 3] and answer.usage == usage and answer.events == 6
    assert "".join(answer.kinds) == EMPTY + CONTENT * 3 + EMPTY + USAGE


def test_a_bad_event_is_raised_to_a_strict_reader_and_kept_by_a_lenient_one() -> None:
    error = event(error={"message": "overloaded"})
    for bad, kind in ((b"{not json", MalformedStream), (error, StreamError), (b"[1, 2]", MalformedStream)):
        with pytest.raises(kind):
            Answer("chat").read(1, [delta(0, content="x"), bad])
        lenient = Answer("chat", lenient=True)
        assert not lenient.read(1, [delta(0, content="x"), bad, delta(0, "stop", content="y")])
        assert lenient.problem is not None and lenient.text() == "xy" and lenient.finished()
    with pytest.raises(MalformedStream, match="content"):  # a field of the wrong type
        Answer("chat").read(1, [delta(0, content=5)])


def test_a_cut_stream_is_not_finished_and_a_whole_body_is() -> None:
    cut = Answer("completions")
    cut.read(1, [event(choices=[{"index": 0, "text": "half"}])])
    assert not cut.finished() and cut.text() == "half"
    whole = Answer(None)  # the API told by the choice's shape
    whole.whole(json.dumps({"choices": [{"index": 0, "text": "all", "finish_reason": "stop"}]}).encode(), 7)
    assert whole.finished() and whole.end_ns == 7 and whole.text() == "all" and whole.kinds == [CONTENT]
    with pytest.raises(MalformedStream, match="not a completion object"):
        Answer("chat").whole(b"<html>", 1)
