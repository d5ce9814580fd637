"""tools / tool_choice / response_format: parsed and refused as documented in server/openai/tool_calls.py, the
tools shown to the model, and tagged calls read back out of whole and streamed text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from lossless.server.openai import tool_calls, tool_stream
from lossless.server.openai.protocol import InvalidRequest, parse

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def chat(**fields: Any) -> Any:
    body = {"messages": ASK, **fields}
    return tool_calls.apply(parse("chat", body, "m", frozenset()), body)


def test_no_tool_fields_leave_the_request_alone() -> None:
    req = chat()
    assert req.structured is None and req.params.grammar is None and req.messages == tuple(ASK)


def test_tools_are_honoured_fields_and_listed_in_a_system_prompt() -> None:
    req = chat(tools=[WEATHER])
    assert req.ignored == () and req.structured.choice == "auto" and req.params.grammar is None
    system = req.messages[0]
    assert (
        system["role"] == "system" and "<tools>" in system["content"] and '"get_weather"' in system["content"]
    )
    assert req.messages[1:] == tuple(ASK)


@pytest.mark.parametrize(
    "choice",
    ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named"],
)
def test_a_forced_call_sets_a_grammar(choice: Any) -> None:
    req = chat(tools=[WEATHER], tool_choice=choice)
    assert req.params.grammar is not None and req.structured.calls


def test_tool_choice_none_hides_the_tools() -> None:
    req = chat(tools=[WEATHER], tool_choice="none")
    assert req.messages == tuple(ASK) and not req.structured.calls and req.params.grammar is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": "x"}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}},
            "tool_choice",
        ),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": 3}}}, "response_format"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"type": "string", "pattern": "(("}},
                }
            },
            "response_format",
        ),
        ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ],
)
def test_mistakes_are_400s_naming_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        chat(**fields)
    assert info.value.param == param and info.value.status == 400


def test_response_formats_set_a_grammar() -> None:
    assert chat(response_format={"type": "json_object"}).params.grammar is not None
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert chat(
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    ).params.grammar
    assert chat(response_format={"type": "text"}).params.grammar is None


def test_earlier_calls_and_results_are_written_for_the_model() -> None:
    messages = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    body = {"messages": messages, "tools": [WEATHER]}
    req = tool_calls.apply(parse("chat", body, "m", frozenset()), body)
    assert (
        req.messages[2]["content"]
        == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    assert req.messages[3] == {"role": "tool", "content": "<tool_response>\nsunny\n</tool_response>"}


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_split_calls_reads_tagged_calls_and_leaves_the_rest() -> None:
    content, calls = tool_calls.split_calls("Let me look.\n" + CALL)
    assert content == "Let me look." and [c.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].arguments) == {"city": "Paris"} and calls[0].id.startswith("call_")
    broken = "<tool_call>\nnot json\n</tool_call>"
    assert tool_calls.split_calls(broken) == (broken, [])


def test_with_calls_makes_an_openai_message() -> None:
    body = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": CALL}, "finish_reason": "stop"}]
    }
    out = tool_calls.with_calls(body, tool_calls.Structured(tools=({"name": "get_weather"},)))
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def stream_out(text: str, cuts: list[int], parallel: bool = True) -> tuple[str, list[dict[str, Any]]]:
    """``text`` fed to a CallStream in pieces cut at ``cuts`` -> (the content, the calls as a client
    accumulates them), checking the deltas' shape on the way: a first delta with id, type, name and
    the arguments text generated with the name (often none), then only index and more arguments."""
    stream = tool_stream.CallStream(parallel)
    shown: list[str] = []
    calls: list[dict[str, Any]] = []
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        content, deltas = stream.feed(text[start:end])
        shown.append(content)
        for delta in deltas:
            if "id" in delta:
                assert delta["index"] == len(calls) and delta["type"] == "function"
                assert delta["id"].startswith("call_") and delta["function"]["name"]
                calls.append({"name": delta["function"]["name"], "arguments": delta["function"]["arguments"]})
            else:
                assert delta.keys() == {"index", "function"} and delta["function"].keys() == {"arguments"}
                assert delta["function"]["arguments"] and delta["index"] == len(calls) - 1
                calls[-1]["arguments"] += delta["function"]["arguments"]
    shown.append(stream.flush())
    return "".join(shown), calls


ARGS = (
    r'{"s": "a}b\"c{ ]", "u": "é\u00e9 ✓ 🌍", "n": {"x": [1, {"y": []}], "z": null}, "e": "\\", "f": -1.5e3}'
)
TRICKY = "<tool_call>\n" + '{"name": "lookup",  "arguments":' + ARGS + "}\n</tool_call>"
TEXTS = {
    "two calls and text": "Sure <tool an aside. " + CALL + "\n" + CALL.replace("Paris", "Oslo") + " done",
    "tricky arguments": "Let me see.\n" + TRICKY + "\n\n",
    "compact, no newlines": '<tool_call>{"name":"f","arguments":{"a":[{}]}}</tool_call>',
    "arguments first": '<tool_call>\n{"arguments": {"a": 1}, "name": "f"}\n</tool_call>',
    "arguments as a string": '<tool_call>\n{"name": "f", "arguments": "{\\"a\\": \\"}\\"}"}\n</tool_call>',
    "no arguments": '<tool_call>\n{"name": "f", "id": 3}\n</tool_call>',
    "not a call": "<tool_call>\nnot json\n</tool_call> and <tool_call>{}</tool_call>",
}


def split_everywhere(text: str) -> list[list[int]]:
    return [[], list(range(1, len(text))), *[[i] for i in range(1, len(text))]]


@pytest.mark.parametrize("name", TEXTS)
def test_call_stream_matches_the_whole_answer_however_the_text_is_cut(name: str) -> None:
    text = TEXTS[name]
    content, calls = tool_calls.split_calls(text)
    whole = [{"name": c.name, "arguments": json.loads(c.arguments)} for c in calls]
    for cuts in split_everywhere(text):
        shown, streamed = stream_out(text, cuts)
        assert [{**c, "arguments": json.loads(c["arguments"])} for c in streamed] == whole, cuts
        assert shown.strip() == content.strip() if calls else shown == text


def test_streamed_arguments_are_the_generated_text_up_to_the_objects_end() -> None:
    for cuts in split_everywhere(TRICKY):
        assert stream_out(TRICKY, cuts)[1] == [{"name": "lookup", "arguments": ARGS}]


def test_a_call_goes_out_as_soon_as_its_name_is_known() -> None:
    stream = tool_stream.CallStream()
    assert stream.feed('<tool_call>\n{"name": "get_weather"') == ("", [])
    content, (first,) = stream.feed(", ")
    assert content == "" and first["function"] == {"name": "get_weather", "arguments": ""}
    assert stream.feed('"arguments": ')[1] == [] and stream.feed("")[1] == []
    assert stream.feed('{"ci')[1] == [{"index": 0, "function": {"arguments": '{"ci'}}]
    assert stream.feed('ty": "Pa')[1] == [{"index": 0, "function": {"arguments": 'ty": "Pa'}}]
    assert stream.feed('ris"}}\n</tool_call>\n')[1] == [{"index": 0, "function": {"arguments": 'ris"}'}}]
    assert stream.flush() == ""


def test_parallel_false_sends_the_first_call_only() -> None:
    text = TEXTS["two calls and text"]
    for cuts in split_everywhere(text):
        shown, calls = stream_out(text, cuts, parallel=False)
        assert [json.loads(c["arguments"]) for c in calls] == [{"city": "Paris"}]
        assert shown == "Sure <tool an aside. \n done"


def test_call_stream_gives_back_a_call_cut_before_its_name() -> None:
    stream = tool_stream.CallStream()
    assert stream.feed(CALL[:30]) == ("", [])
    assert stream.flush() == CALL[:30]


def test_a_call_cut_after_its_name_keeps_what_was_sent() -> None:
    text = "Hm. " + TRICKY[:60]
    for cuts in split_everywhere(text):
        shown, calls = stream_out(text, cuts)
        assert shown.strip() == "Hm." and calls == [
            {"name": "lookup", "arguments": TRICKY[TRICKY.index(ARGS[:5]) : 60]}
        ]


def test_a_call_malformed_after_its_name_stays_a_call_and_drops_the_rest() -> None:
    # the closing tag ends a call even inside a string, as it does for a whole answer
    text = '<tool_call>\n{"name": "f", "arguments": {"a": "x}\n</tool_call> then text'
    for cuts in split_everywhere(text):
        shown, calls = stream_out(text, cuts)
        assert shown == " then text" and calls == [{"name": "f", "arguments": '{"a": "x}\n'}]
    assert tool_calls.split_calls(text) == (text, [])  # the whole answer has no call: it is text
    trailer = '<tool_call>{"name": "f", "arguments": {"a": 1}, "b": [}</tool_call>'
    assert stream_out(trailer, [])[1] == [{"name": "f", "arguments": '{"a": 1}'}]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(TEXTS)), st.lists(st.floats(0, 1), max_size=12))
def test_call_stream_is_the_same_for_random_cuts(name: str, fractions: list[float]) -> None:
    text = TEXTS[name]
    cuts = sorted({int(f * len(text)) for f in fractions} - {0, len(text)})
    # blanks next to a call may show or not, as the text comes: a whole answer strips them
    shown, calls = stream_out(text, cuts)
    whole_shown, whole_calls = stream_out(text, [])
    assert shown.strip() == whole_shown.strip() and calls == whole_calls
