"""tools / tool_choice / response_format: parsed and refused as documented in server/tools.py, the
tools shown to the model, and tagged calls read back out of whole and streamed text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lossless.server import tools
from lossless.server.protocol import InvalidRequest, parse

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
    return tools.apply(parse("chat", body, "m", frozenset()), body)


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
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]  # fmt: skip
    body = {"messages": messages, "tools": [WEATHER]}
    req = tools.apply(parse("chat", body, "m", frozenset()), body)
    assert (
        req.messages[2]["content"]
        == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    assert req.messages[3] == {"role": "tool", "content": "<tool_response>\nsunny\n</tool_response>"}


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_split_calls_reads_tagged_calls_and_leaves_the_rest() -> None:
    content, calls = tools.split_calls("Let me look.\n" + CALL)
    assert content == "Let me look." and [c.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].arguments) == {"city": "Paris"} and calls[0].id.startswith("call_")
    broken = "<tool_call>\nnot json\n</tool_call>"
    assert tools.split_calls(broken) == (broken, [])


def test_with_calls_makes_an_openai_message() -> None:
    body = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": CALL}, "finish_reason": "stop"}]
    }
    out = tools.with_calls(body, tools.Structured(tools=({"name": "get_weather"},)))
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_call_stream_releases_text_at_once_and_calls_whole(step: int) -> None:
    text = "Sure <tool an aside. " + CALL + "\n" + CALL.replace("Paris", "Oslo") + " done"
    stream = tools.CallStream()
    shown, calls = [], []
    for i in range(0, len(text), step):
        content, found = stream.feed(text[i : i + step])
        shown.append(content)
        calls += found
    shown.append(stream.flush())
    assert "".join(shown) == "Sure <tool an aside. \n done"
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Paris", "Oslo"]
    single = tools.CallStream(parallel=False)
    assert len(single.feed(text)[1]) == 1


def test_call_stream_gives_back_a_call_cut_short() -> None:
    stream = tools.CallStream()
    assert stream.feed(CALL[:30]) == ("", [])
    assert stream.flush() == CALL[:30]
