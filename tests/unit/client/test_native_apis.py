"""``client.apis`` and ``client.native``: a chat body in the Responses and Messages APIs' own words, and
their answers (streamed event by event, or whole) folded by ``Answer`` as chat chunks are: text, reasoning,
tool calls, stop reasons and usage in chat's names, one timed event per event that came."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lossless.client.answer import Answer
from lossless.client.apis import native_body, path_of
from lossless.records import CONTENT, EMPTY, REASONING, TOOL

CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {"name": "weather", "description": "now", "parameters": {"type": "object"}},
        }
    ],
    "tool_choice": "required",
    "max_tokens": 32,
    "stop": "\n",
    "temperature": 0,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def feed(api: str, events: list[dict[str, Any]]) -> Answer:
    answer = Answer(api)
    for t, e in enumerate(events):
        if answer.read(t, [json.dumps(e).encode()]):
            break
    return answer


def test_a_chat_body_in_the_responses_api_s_words() -> None:
    body = native_body("responses", CHAT)
    assert body["input"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
    ]
    assert body["tools"] == [
        {"type": "function", "name": "weather", "description": "now", "parameters": {"type": "object"}}
    ]
    assert body["max_output_tokens"] == 32 and "max_tokens" not in body and "messages" not in body
    assert "stream_options" not in body and body["stream"] is True
    assert body["stop"] == "\n"  # no Responses name for it: sent as asked, the server says
    assert path_of("responses", "/chat/completions") == "/responses"
    assert path_of("responses", "/completions") == "/completions"


def test_a_chat_body_in_the_messages_api_s_words() -> None:
    body = native_body("messages", CHAT)
    assert body["system"] == "Be brief."
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Paris"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "18 C"}]},
    ]
    assert body["tools"] == [{"name": "weather", "input_schema": {"type": "object"}, "description": "now"}]
    assert body["tool_choice"] == {"type": "any"}
    assert body["stop_sequences"] == ["\n"] and body["max_tokens"] == 32
    assert native_body("messages", {"messages": [{"role": "user", "content": "x"}]})["max_tokens"] > 0


def test_a_responses_stream_is_folded_as_chat_chunks_are() -> None:
    events = [
        {"type": "response.created", "response": {"model": "m1", "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}},
        {"type": "response.reasoning_text.delta", "delta": "hmm"},
        {
            "type": "response.output_text.delta",
            "delta": "Hel",
            "logprobs": [{"token": "Hel", "logprob": -0.1}],
        },
        {"type": "response.output_text.delta", "delta": "lo"},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "function_call", "call_id": "c9", "name": "f", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"a":'},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": " 1}"},
        {
            "type": "response.completed",
            "response": {
                "model": "m1",
                "status": "completed",
                "output": [{"type": "function_call"}],
                "usage": {
                    "input_tokens": 7,
                    "output_tokens": 5,
                    "total_tokens": 12,
                    "input_tokens_details": {"cached_tokens": 3},
                    "output_tokens_details": {"reasoning_tokens": 1},
                },
            },
        },
        {"type": "response.output_text.delta", "delta": "after the end: not read"},
    ]
    a = feed("responses", events)
    assert a.done and a.finished()
    assert a.text() == "Hello" and a.reasoning() == "hmm" and a.model == "m1"
    assert a.kinds == [EMPTY, EMPTY, REASONING, CONTENT, CONTENT, TOOL, TOOL, TOOL, EMPTY]
    assert [(c.id, c.name, c.arguments) for c in a.tool_calls()] == [("c9", "f", '{"a": 1}')]
    assert a.finish_reason() == "tool_calls"
    assert a.usage == {
        "prompt_tokens": 7,
        "completion_tokens": 5,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    assert a.logprobs[0] == [{"content": [{"token": "Hel", "logprob": -0.1}]}]


def test_a_responses_answer_cut_by_its_limit_stops_for_length() -> None:
    a = feed(
        "responses",
        [
            {"type": "response.output_text.delta", "delta": "x"},
            {
                "type": "response.incomplete",
                "response": {
                    "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"},
                    "output": [],
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            },
        ],
    )
    assert a.finish_reason() == "length" and a.usage is not None and a.usage["completion_tokens"] == 1


def test_a_messages_stream_is_folded_as_chat_chunks_are() -> None:
    events = [
        {
            "type": "message_start",
            "message": {
                "model": "claude-x",
                "content": [],
                "usage": {"input_tokens": 4, "cache_read_input_tokens": 6, "output_tokens": 1},
            },
        },
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "so"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "t1", "name": "g", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": "{}"},
        },
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    a = feed("messages", events)
    assert a.done and a.text() == "Hi" and a.reasoning() == "so" and a.model == "claude-x"
    assert a.kinds == [EMPTY, EMPTY, EMPTY, REASONING, EMPTY, EMPTY, CONTENT, TOOL, TOOL, EMPTY, EMPTY]
    assert [(c.id, c.name, c.arguments) for c in a.tool_calls()] == [("t1", "g", "{}")]
    assert a.finish_reason() == "tool_calls"
    # cache reads are input tokens too: Anthropic counts them apart from input_tokens
    assert a.usage == {
        "prompt_tokens": 10,
        "completion_tokens": 9,
        "total_tokens": 19,
        "prompt_tokens_details": {"cached_tokens": 6},
    }
    assert a.tokens[-2] == 9


def test_an_error_event_means_the_same_in_every_api() -> None:
    for api, error in (
        ("messages", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
        ("responses", {"type": "error", "code": "server_error", "message": "busy"}),
    ):
        a = Answer(api, lenient=True)
        a.read(0, [json.dumps(error).encode()])
        assert a.problem is not None and "busy" in a.problem


def test_whole_answers_of_both_apis() -> None:
    r = Answer("responses")
    r.whole(
        json.dumps(
            {
                "model": "m",
                "status": "completed",
                "output": [
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
                    {
                        "type": "message",
                        "content": [{"type": "output_text", "text": "Paris", "logprobs": []}],
                    },
                ],
                "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
            }
        ).encode(),
        1,
    )
    assert (r.text(), r.reasoning(), r.finish_reason()) == ("Paris", "think", "stop")
    assert r.usage is not None and r.usage["completion_tokens"] == 2
    m = Answer("messages")
    m.whole(
        json.dumps(
            {
                "type": "message",
                "model": "m",
                "stop_reason": "max_tokens",
                "content": [
                    {"type": "text", "text": "Par"},
                    {"type": "tool_use", "id": "t", "name": "f", "input": {"x": 1}},
                ],
                "usage": {"input_tokens": 3, "output_tokens": 2},
            }
        ).encode(),
        1,
    )
    assert (m.text(), m.finish_reason()) == ("Par", "length")
    assert [(c.name, json.loads(c.arguments)) for c in m.tool_calls()] == [("f", {"x": 1})]


def test_the_key_travels_as_each_api_s_clients_send_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from lossless.client.apis import session
    from lossless.client.endpoints import Endpoint

    monkeypatch.setenv("K", "sk-test-key")
    endpoint = Endpoint("e", "http://127.0.0.1:9/v1", "m", api_key_env="K", headers={"x-extra": "1"})
    chat_headers = session(endpoint, "chat", 1.0)._headers
    assert chat_headers["authorization"] == "Bearer sk-test-key" and "x-api-key" not in chat_headers
    messages = session(endpoint, "messages", 1.0)._headers
    assert messages["x-api-key"] == "sk-test-key" and "authorization" not in messages
    assert messages["anthropic-version"] == "2023-06-01" and messages["x-extra"] == "1"
