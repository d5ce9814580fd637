"""Tool calls and structured output over real HTTP on 127.0.0.1, with the real engine on the tiny random
checkpoint: whatever a random model would say, a forced call or a json_schema answer comes out whole
and valid, streamed or not (the schemas leave it few choices, so it ends within max_tokens: ~90 of the
tiny tokenizer's tokens for a call)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from lossless.server.launch import start_embedded
from lossless.server.options import ServeOptions

UNIT = {
    "type": "object",
    "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"enum": [1, 2, 3]},
    },
    "required": ["unit", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "forecast", "parameters": UNIT}},
    {
        "type": "function",
        "function": {
            "name": "sunrise",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
]
ASK: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Hello there"}],
    "max_tokens": 200,
    "temperature": 0,
}


@pytest.fixture(scope="module")
def client(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    # the tools' system prompt is ~700 tiny-tokenizer tokens: a longer context than the tiny 256
    folder = tmp_path_factory.mktemp("tools") / "tiny-2k"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2048}))
    served = start_embedded(ServeOptions(model=str(folder), speculative="ngram"))
    with served as url, httpx.Client(base_url=url, trust_env=False, timeout=60) as c:
        yield c


def sse(response: httpx.Response) -> list[dict[str, Any]]:
    lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_required_call_is_whole_and_valid(client: httpx.Client, seed: int) -> None:
    body = {**ASK, "tools": TOOLS, "tool_choice": "required", "temperature": 1.0, "seed": seed}
    r = client.post("/chat/completions", json=body)
    assert r.status_code == 200 and r.headers["x-lossless-ignored-params"] == "", r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call["function"]["name"]]
    jsonschema.validate(json.loads(call["function"]["arguments"]), schema)


def test_a_streamed_call_is_a_name_delta_then_its_arguments_as_generated(client: httpx.Client) -> None:
    body = {**ASK, "tools": TOOLS, "tool_choice": "required", "temperature": 1.0, "seed": 4}
    whole = client.post("/chat/completions", json=body).json()["choices"][0]
    with client.stream("POST", "/chat/completions", json={**body, "stream": True}) as r:
        chunks = sse(r)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    first, *more = [tc for d in deltas for tc in d.get("tool_calls", [])]
    (call,) = whole["message"]["tool_calls"]
    assert first["index"] == 0 and first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"] == {"name": call["function"]["name"], "arguments": ""}
    assert len(more) >= 2 and all(tc.keys() == {"index", "function"} and tc["index"] == 0 for tc in more)
    arguments = "".join(tc["function"]["arguments"] for tc in more)
    assert arguments.startswith("{") and arguments.endswith("}")  # not the call's own } nor its tag
    assert json.loads(arguments) == json.loads(call["function"]["arguments"])
    assert not any(d.get("content") for d in deltas)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls" == whole["finish_reason"]


def test_the_openai_clients_stream_helper_accumulates_the_same_call(client: httpx.Client) -> None:
    openai = pytest.importorskip("openai")
    body = {**ASK, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "forecast"}}}
    with openai.OpenAI(base_url=str(client.base_url), api_key="unused", max_retries=0, timeout=60) as c:
        model = c.models.list().data[0].id
        whole = c.chat.completions.create(model=model, **body).choices[0]
        with c.chat.completions.stream(model=model, **body) as events:
            kinds = [event.type for event in events]
            final = events.get_final_completion().choices[0]
    assert kinds.count("tool_calls.function.arguments.delta") >= 2
    (streamed,), (expected,) = final.message.tool_calls, whole.message.tool_calls
    assert streamed.id.startswith("call_") and streamed.function.name == expected.function.name == "forecast"
    assert json.loads(streamed.function.arguments) == json.loads(expected.function.arguments)
    assert final.finish_reason == "tool_calls" == whole.finish_reason


def test_json_schema_answers_validate(client: httpx.Client) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "u", "schema": UNIT, "strict": True}}
    r = client.post("/chat/completions", json={**ASK, "response_format": fmt, "temperature": 1.0, "seed": 5})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), UNIT)


def test_a_schema_that_cannot_be_enforced_is_a_400(client: httpx.Client) -> None:
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "string", "format": "nope"}},
    }
    r = client.post("/chat/completions", json={**ASK, "response_format": fmt})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"


def test_completions_ignore_tools_and_say_so(client: httpx.Client) -> None:
    r = client.post("/completions", json={"prompt": "Hi", "max_tokens": 2, "tools": TOOLS})
    assert r.status_code == 200 and "tools" in r.headers["x-lossless-ignored-params"]
