"""/v1/responses and /v1/messages over real HTTP, before the real SmolLM2: greedy text and usage equal
the chat path's for the same prompt, streamed or not; stop sequences, refusals and continuous usage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lossless.server.launch import start_embedded
from lossless.server.options import ServeOptions

pytestmark = pytest.mark.slow
ASK = "Name three colours."
MESSAGES = [{"role": "user", "content": ASK}]
SYSTEM = "You are terse."
TOKENS = 12


@pytest.fixture(scope="module")
def client(smollm2_path: Path) -> Iterator[httpx.Client]:
    with (
        start_embedded(ServeOptions(model=str(smollm2_path), speculative="ngram")) as base_url,
        httpx.Client(base_url=base_url, trust_env=False, timeout=120) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def chat(client: httpx.Client) -> dict[str, Any]:
    """The chat path's greedy answer to the system prompt and question every test here asks."""
    fields = {"messages": [{"role": "system", "content": SYSTEM}, *MESSAGES], "max_tokens": TOKENS}
    return client.post("/chat/completions", json={**fields, "temperature": 0}).json()


def events(client: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    kinds = [line[7:] for line in lines if line.startswith("event: ")]
    data = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert kinds == [d["type"] for d in data]  # an event line naming each data object's type
    return data


def test_responses_text_and_usage_equal_the_chat_paths(client: httpx.Client, chat: dict[str, Any]) -> None:
    text, usage = chat["choices"][0]["message"]["content"], chat["usage"]
    body = {"instructions": SYSTEM, "input": ASK, "max_output_tokens": TOKENS, "temperature": 0}
    r = client.post("/responses", json=body)
    whole = r.json()
    assert r.status_code == 200 and whole["object"] == "response"
    assert whole["output"][0]["content"][0]["text"] == text
    assert whole["usage"]["input_tokens"] == usage["prompt_tokens"]
    assert whole["usage"]["output_tokens"] == usage["completion_tokens"]
    assert whole["usage"]["total_tokens"] == usage["total_tokens"]
    assert whole["status"] == (
        "incomplete" if chat["choices"][0]["finish_reason"] == "length" else "completed"
    )
    assert whole["system_fingerprint"] == chat["system_fingerprint"]
    streamed = events(client, "/responses", body)
    assert [e["sequence_number"] for e in streamed] == list(range(len(streamed)))
    assert "".join(e["delta"] for e in streamed if e["type"] == "response.output_text.delta") == text
    final = streamed[-1]["response"]
    assert final["usage"] == whole["usage"] and final["status"] == whole["status"]


def test_messages_text_and_usage_equal_the_chat_paths(client: httpx.Client, chat: dict[str, Any]) -> None:
    text, usage = chat["choices"][0]["message"]["content"], chat["usage"]
    body = {"system": SYSTEM, "messages": MESSAGES, "max_tokens": TOKENS, "temperature": 0}
    whole = client.post("/messages", json=body, headers={"anthropic-version": "2023-06-01"}).json()
    assert whole["type"] == "message" and whole["content"] == [{"type": "text", "text": text}]
    assert whole["usage"]["input_tokens"] == usage["prompt_tokens"]
    assert whole["usage"]["output_tokens"] == usage["completion_tokens"]
    reason = {"length": "max_tokens", "stop": "end_turn"}[chat["choices"][0]["finish_reason"]]
    assert whole["stop_reason"] == reason
    streamed = events(client, "/messages", body)
    assert streamed[0]["message"]["usage"]["input_tokens"] == usage["prompt_tokens"]
    assert "".join(e["delta"].get("text", "") for e in streamed if e["type"] == "content_block_delta") == text
    assert streamed[-2]["usage"]["output_tokens"] == usage["completion_tokens"]
    assert streamed[-2]["delta"]["stop_reason"] == reason


def test_a_stop_sequence_is_named(client: httpx.Client, chat: dict[str, Any]) -> None:
    text = chat["choices"][0]["message"]["content"]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    body = {"system": SYSTEM, "messages": MESSAGES, "max_tokens": TOKENS, "temperature": 0}
    whole = client.post("/messages", json={**body, "stop_sequences": ["@@never", stop]}).json()
    assert whole["content"][0]["text"] == text[: text.find(stop)]
    assert (whole["stop_reason"], whole["stop_sequence"]) == ("stop_sequence", stop)


def test_continuous_usage_rises_to_the_final_count(client: httpx.Client, chat: dict[str, Any]) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    body = {"messages": MESSAGES, "max_tokens": TOKENS, "temperature": 0, "stream_options": options}
    chunks = events_plain(client, "/chat/completions", body)
    running = [c["usage"]["completion_tokens"] for c in chunks]
    assert (
        running == sorted(running)
        and running[0] == 0
        and running[-1] == chunks[-1]["usage"]["completion_tokens"]
    )
    assert len(set(running)) > 2  # it rises chunk by chunk, not only at the end
    whole = client.post(
        "/chat/completions", json={k: v for k, v in body.items() if k != "stream_options"}
    ).json()
    assert chunks[-1]["usage"] == whole["usage"]
    assert {c["usage"]["prompt_tokens"] for c in chunks} == {whole["usage"]["prompt_tokens"]}


def events_plain(client: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with client.stream("POST", path, json={**body, "stream": True}) as r:
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/messages", {"messages": MESSAGES}, 400, "max_tokens"),
        ("/messages", {"messages": MESSAGES, "max_tokens": 4, "model": "nope"}, 404, "nope"),
        ("/messages", {"messages": "hi", "max_tokens": 4}, 400, "messages"),
        ("/responses", {"input": ASK, "max_output_tokens": -1}, 400, "max_output_tokens"),
        ("/responses", {"input": ASK, "previous_response_id": "resp_1"}, 400, "previous_response_id"),
    ],
)
def test_bad_input_is_a_one_line_error_in_the_apis_shape(
    client: httpx.Client, path: str, body: dict[str, Any], status: int, words: str
) -> None:
    r = client.post(path, json=body)
    assert r.status_code == status
    error = r.json()["error"]
    if path == "/messages":
        assert r.json()["type"] == "error"
        assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    else:
        assert error["type"] == "invalid_request_error" and error["param"] == words
    assert words in error["message"] and "\n" not in error["message"]
    assert client.post(path, content=b"{not json").status_code == 400


def test_unknown_fields_are_named_in_the_header(client: httpx.Client) -> None:
    body = {"messages": MESSAGES, "max_tokens": 1, "metadata": {"user_id": "u"}}
    assert client.post("/messages", json=body).headers["x-lossless-ignored-params"] == "metadata"
    r = client.post("/responses", json={"input": ASK, "max_output_tokens": 1, "n": 2, "store": False})
    assert r.headers["x-lossless-ignored-params"] == "n,store"
