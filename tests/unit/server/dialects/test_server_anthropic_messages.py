"""The Messages API over the chat path: requests translate into the chat request that asks the same,
refusals come in Anthropic's error shape, and a job's events come out as the API's event sequence."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from lossless.engine.engine import Delta
from lossless.server.dialects import anthropic_messages, anthropic_messages_stream, pieces
from lossless.server.jobs import EngineJob, Event, Failed, Finished
from lossless.server.openai import tool_calls
from lossless.server.openai.bodies import Head
from lossless.server.openai.protocol import ApiRequest, InvalidRequest, parse

MODEL = "m"
HEAD = Head("msg_1", MODEL, 0, "fp")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"name": "get_time", "description": "Local time", "input_schema": SCHEMA}
CHAT_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "parameters": SCHEMA, "description": "Local time"},
}
HI = [{"role": "user", "content": "hi"}]
IMAGE = {"type": "image", "source": {}}
USE = {"type": "tool_use", "id": "t", "name": "f", "input": {}}  # in a user turn


def messages_req(**fields: Any) -> ApiRequest:
    return anthropic_messages.parse({"messages": HI, "max_tokens": 8, **fields}, MODEL, frozenset())


def chat_req(**fields: Any) -> ApiRequest:
    return tool_calls.apply(parse("chat", fields, MODEL, frozenset()), fields)


def test_a_request_asks_what_the_same_chat_request_asks() -> None:
    got = messages_req(
        system=[{"type": "text", "text": "Be brief."}],
        temperature=0,
        top_p=0.9,
        top_k=4,
        stop_sequences=["\n"],
    )
    want = chat_req(
        messages=[{"role": "system", "content": "Be brief."}, *HI],
        max_tokens=8,
        temperature=0,
        top_p=0.9,
        top_k=4,
        stop=["\n"],
    )
    assert (got.messages, got.params, got.max_tokens) == (want.messages, want.params, want.max_tokens)
    assert messages_req(metadata={"user_id": "u"}, thinking=None).ignored == ("metadata", "thinking")


def test_tool_use_and_tool_result_blocks_become_chat_turns() -> None:
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Time in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {"city": "Paris"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "12:00"}],
                },
                {"type": "text", "text": "Thanks."},
            ],
        },
    ]
    got = messages_req(messages=history, tools=[TOOL], tool_choice={"type": "auto"})
    call = {
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "get_time", "arguments": '{"city": "Paris"}'},
    }
    want = chat_req(
        messages=[
            {"role": "user", "content": "Time in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "12:00"},
            {"role": "user", "content": "Thanks."},
        ],
        tools=[CHAT_TOOL],
        tool_choice="auto",
    )
    assert got.messages == want.messages and got.structured == want.structured


def test_tool_choice_translates() -> None:
    assert messages_req(tools=[TOOL], tool_choice={"type": "any"}).structured.choice == "required"
    named = messages_req(tools=[TOOL], tool_choice={"type": "tool", "name": "get_time"}).structured
    assert (named.choice, named.function) == ("function", "get_time")
    assert messages_req(tools=[TOOL], tool_choice={"type": "none"}).structured.calls is False
    single = messages_req(tools=[TOOL], tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert single.structured.parallel is False


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
        ({"stop_sequences": "x"}, "stop_sequences"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [IMAGE]}]}, "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": [USE]}]}, "messages[0].content[0]"),
        ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
        ({"system": 3}, "system"),
    ],
)
def test_refusals_name_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        messages_req(**fields)
    assert caught.value.param == param and caught.value.status == 400
    assert "\n" not in caught.value.message


def test_errors_are_in_anthropics_shape() -> None:
    kinds = {
        s: anthropic_messages.error_body(s, "m")["error"]["type"] for s in (400, 401, 404, 429, 500, 503)
    }
    assert kinds == {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
        500: "api_error",
        503: "overloaded_error",
    }
    assert anthropic_messages.error_body(400, "bad") == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
    }


class Tokenizer(SimpleNamespace):
    eos_ids = frozenset({0})

    def decode(self, ids: list[int]) -> str:  # token 7 is " STOP", which the engine cut from the text
        return "Hi" + (" STOP" if ids[-1] == 7 else "")


def stream(req: ApiRequest, events: list[Event]) -> list[tuple[str, dict[str, Any]]]:
    async def main() -> list[bytes]:
        job = EngineJob([1, 2, 3], req.params, asyncio.get_running_loop())
        for event in events:
            job.events.put_nowait(event)
        read = pieces.pieces(req, job, Tokenizer())  # type: ignore[arg-type]
        return [b async for b in anthropic_messages_stream.events(req, HEAD, 3, read)]

    out = b"".join(asyncio.run(main())).decode()
    blocks = [b.split("\n") for b in out.strip().split("\n\n")]
    got = [(kind.removeprefix("event: "), json.loads(data[6:])) for kind, data in blocks]
    assert all(kind == data["type"] for kind, data in got)
    return got


def test_a_text_stream_is_the_apis_event_sequence() -> None:
    req = messages_req(stream=True, stop_sequences=[" END", " STOP"])
    got = stream(req, [Delta("Hi", (5,)), Delta("", (7,), finish_reason="stop"), Finished("stop", 2, 0, 0)])
    assert [kind for kind, _ in got] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert got[0][1]["message"]["usage"]["input_tokens"] == 3 and got[0][1]["message"]["content"] == []
    assert got[3][1]["delta"] == {"type": "text_delta", "text": "Hi"}
    assert got[5][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": " STOP"}
    assert got[5][1]["usage"] == {"output_tokens": 2}
    ended = stream(req, [Delta("Hi", (5,)), Delta("", (0,), finish_reason="stop"), Finished("stop", 2, 0, 0)])
    assert ended[5][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}


def test_a_streamed_call_is_a_tool_use_block() -> None:
    req = messages_req(stream=True, tools=[TOOL])
    text = [
        "Let me check.",
        "<tool_call>\n",
        '{"name": "get_time", ',
        '"arguments": {"city": ',
        '"Paris"}}\n</tool_call>',
    ]
    deltas: list[Event] = [Delta(t, (i + 8,)) for i, t in enumerate(text)]
    got = stream(req, [*deltas, Delta("", (0,), finish_reason="stop"), Finished("stop", 6, 0, 0)])
    starts = [data["content_block"] for kind, data in got if kind == "content_block_start"]
    assert [b["type"] for b in starts] == ["text", "tool_use"]
    assert (
        starts[1]["name"] == "get_time" and starts[1]["id"].startswith("toolu_") and starts[1]["input"] == {}
    )
    partial = "".join(d["delta"].get("partial_json", "") for k, d in got if k == "content_block_delta")
    assert json.loads(partial) == {"city": "Paris"}
    assert [d["index"] for k, d in got if k == "content_block_stop"] == [0, 1]
    assert got[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_a_failed_generation_ends_with_an_error_event() -> None:
    got = stream(messages_req(stream=True), [Delta("Hi", (5,)), Failed("the server is shutting down", 503)])
    assert got[-1] == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "the server is shutting down"}},
    )
