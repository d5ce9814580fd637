"""The Responses API over the chat path: requests translate into the chat request that asks the same,
refusals speak the API's field names, and a job's events come out as the API's event sequence."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from lossless.engine.engine import Delta
from lossless.server.dialects import openai_responses, openai_responses_stream, pieces
from lossless.server.jobs import EngineJob, Event, Failed, Finished
from lossless.server.openai import tool_calls
from lossless.server.openai.bodies import Head
from lossless.server.openai.protocol import ApiRequest, InvalidRequest, parse

MODEL = "m"
HEAD = Head("resp_1", MODEL, 0, "fp")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "name": "get_time", "description": "Local time", "parameters": SCHEMA}
CHAT_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "Local time", "parameters": SCHEMA},
}


def responses_req(**fields: Any) -> ApiRequest:
    return openai_responses.parse({"input": "hi", **fields}, MODEL, frozenset())


def chat_req(**fields: Any) -> ApiRequest:
    return tool_calls.apply(parse("chat", fields, MODEL, frozenset()), fields)


def test_a_request_asks_what_the_same_chat_request_asks() -> None:
    got = responses_req(
        instructions="Be brief.", max_output_tokens=5, temperature=0.5, top_p=0.9, seed=7, top_k=3
    )
    want = chat_req(
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        max_tokens=5,
        temperature=0.5,
        top_p=0.9,
        seed=7,
        top_k=3,
    )
    assert (got.messages, got.params, got.max_tokens) == (want.messages, want.params, want.max_tokens)
    assert got.api == "chat" and got.ignored == ()


def test_a_tool_loop_history_becomes_chat_turns() -> None:
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Time in Paris?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_time", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "12:00"},
        {"type": "reasoning", "summary": []},  # none of ours: skipped
    ]
    got = responses_req(input=items, tools=[TOOL])
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_time", "arguments": '{"city":"Paris"}'},
    }
    want = chat_req(
        messages=[
            {"role": "user", "content": "Time in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
        ],
        tools=[CHAT_TOOL],
    )
    assert got.messages == want.messages and got.structured == want.structured


def test_tool_choice_text_format_and_logprobs_translate() -> None:
    named = responses_req(tools=[TOOL], tool_choice={"type": "function", "name": "get_time"})
    assert named.structured.choice == "function" and named.structured.function == "get_time"
    assert named.params.grammar is not None
    form = {"type": "json_schema", "name": "city", "schema": SCHEMA}
    assert responses_req(text={"format": form}).structured.response_format == "json_schema"
    assert responses_req(include=[openai_responses.LOGPROBS], top_logprobs=2).logprobs == 2
    assert responses_req(top_logprobs=2).logprobs is None  # asked for only through include


def test_unknown_fields_are_listed_and_stateful_ones_refused() -> None:
    assert responses_req(n=2, store=False, reasoning={}).ignored == ("n", "reasoning", "store")
    for key in openai_responses.REFUSED:
        with pytest.raises(InvalidRequest) as caught:
            responses_req(**{key: "resp_0"})
        assert caught.value.param == key and caught.value.code == "unsupported_parameter"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"input": []}, "input"),
        ({"input": 5}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0]"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].arguments"),
        ({"input": [{"type": "web_search_call"}]}, "input[0].type"),
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"tool_choice": 3}, "tool_choice"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format"),
        ({"instructions": ["x"]}, "instructions"),
        # repeated in the answer as sent, so a lone surrogate anywhere in them (a key too) is refused
        ({"text": {"\ud800": None}}, "text"),
        ({"tools": [{**TOOL, "strict": {"x": "\udfff"}}]}, "tools"),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "name": "get_time", "\udc00": 1}},
            "tool_choice",
        ),
    ],
)
def test_refusals_name_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        responses_req(**fields)
    assert caught.value.param == param and caught.value.status == 400
    assert "\n" not in caught.value.message


TOKENIZER = SimpleNamespace(eos_ids=frozenset({0}), decode=lambda ids: "")


def stream(req: ApiRequest, events: list[Event]) -> list[dict[str, Any]]:
    async def main() -> list[bytes]:
        job = EngineJob([1, 2, 3], req.params, asyncio.get_running_loop())
        for event in events:
            job.events.put_nowait(event)
        read = pieces.pieces(req, job, TOKENIZER)  # type: ignore[arg-type]
        return [b async for b in openai_responses_stream.events(req, HEAD, 3, read)]

    out = b"".join(asyncio.run(main())).decode()
    blocks = [b.split("\n") for b in out.strip().split("\n\n")]
    assert all(kind.removeprefix("event: ") == json.loads(data[6:])["type"] for kind, data in blocks)
    return [json.loads(data[6:]) for _, data in blocks]


def test_a_text_stream_is_the_apis_event_sequence() -> None:
    got = stream(
        responses_req(stream=True),
        [
            Delta("Hel", (5,)),
            Delta("lo", (6,)),
            Delta("", (7,), finish_reason="length"),
            Finished("length", 3, 0, 0),
        ],
    )
    assert [e["type"].removeprefix("response.") for e in got] == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "incomplete",
    ]
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    final = got[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["content"][0]["text"] == "Hello" == got[6]["text"]
    assert final["usage"]["input_tokens"] == 3 and final["usage"]["output_tokens"] == 3
    assert final["usage"]["total_tokens"] == 6


def test_a_streamed_call_is_a_function_call_item() -> None:
    req = responses_req(stream=True, tools=[TOOL])
    text = ["<tool_call>\n", '{"name": "get_time", ', '"arguments": {"city": ', '"Paris"}}\n</tool_call>']
    deltas: list[Event] = [Delta(t, (i + 5,)) for i, t in enumerate(text)]
    got = stream(req, [*deltas, Delta("", (0,), finish_reason="stop"), Finished("stop", 5, 0, 0)])
    kinds = [e["type"].removeprefix("response.") for e in got]
    assert kinds[:3] == ["created", "in_progress", "output_item.added"]
    assert kinds[-3:] == ["function_call_arguments.done", "output_item.done", "completed"]
    assert got[2]["item"]["type"] == "function_call" and got[2]["item"]["name"] == "get_time"
    arguments = "".join(e["delta"] for e in got if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"city": "Paris"} == json.loads(got[-3]["arguments"])
    (item,) = got[-1]["response"]["output"]
    assert item["call_id"] == got[2]["item"]["call_id"] and item["status"] == "completed"


def test_a_failed_generation_ends_the_stream_with_response_failed() -> None:
    got = stream(responses_req(stream=True), [Delta("Hi", (5,)), Failed("the server is shutting down", 503)])
    assert got[-1]["type"] == "response.failed" and got[-1]["response"]["status"] == "failed"
    assert got[-1]["response"]["error"]["message"] == "the server is shutting down"
