"""Tool calls and structured output from ``lossless serve`` (SmolLM2, n-gram speculative decoding, so
the constrained speculative path runs) through the official ``openai`` client: forced calls parse and
their arguments validate against the function's schema, streamed or not, and json_schema answers
validate against their schema."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from lossless.client.endpoints import Endpoint
from lossless.client.wire import Wire
from lossless.probe import tool_checks
from lossless.probe.checks import Settings
from lossless.server.launch import start_embedded
from lossless.server.options import ServeOptions

pytestmark = pytest.mark.slow
PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": PARAMETERS},
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 24}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


@pytest.fixture(scope="module")
def client(smollm2_path: Path) -> Iterator[tuple[openai.OpenAI, str]]:
    served = start_embedded(ServeOptions(model=str(smollm2_path), dtype="float32", speculative="ngram"))
    with served as url, openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120) as c:
        yield c, c.models.list().data[0].id


def check_call(name: str, arguments: str) -> dict[str, Any]:
    schema = {"get_weather": PARAMETERS, "get_time": TIME["function"]["parameters"]}[name]
    parsed = json.loads(arguments)
    jsonschema.validate(parsed, schema)
    return parsed


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_required_tool_call_is_well_formed(client: tuple[openai.OpenAI, str], temperature: float) -> None:
    c, model = client
    r = c.chat.completions.create(
        model=model,
        messages=ASK,
        tools=[WEATHER, TIME],
        tool_choice="required",
        max_tokens=60,
        temperature=temperature,
        seed=3,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    check_call(call.function.name, call.function.arguments)


def test_named_tool_call_streamed_equals_the_whole_one(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    ask: dict[str, Any] = {
        "model": model,
        "messages": ASK,
        "tools": [WEATHER, TIME],
        "max_tokens": 60,
        "temperature": 0,
        "tool_choice": {"type": "function", "function": {"name": "get_time"}},
    }
    whole = c.chat.completions.create(**ask).choices[0]
    chunks = list(c.chat.completions.create(**ask, stream=True))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    assert whole.finish_reason == "tool_calls", whole.message
    # a name delta, then the arguments' text as it is generated (server/openai/tool_stream.py)
    assert [tc.function.name for tc in calls] == ["get_time"] + [None] * (len(calls) - 1)
    assert {tc.index for tc in calls} == {0} and calls[0].id and calls[0].function.arguments == ""
    arguments = "".join(tc.function.arguments for tc in calls)
    assert check_call("get_time", arguments) == json.loads(whole.message.tool_calls[0].function.arguments)
    assert not "".join(d.content or "" for d in deltas).strip()
    assert chunks[-1].choices[0].finish_reason == "tool_calls" == whole.finish_reason


def test_auto_answers_are_well_formed_either_way(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    r = c.chat.completions.create(model=model, messages=ASK, tools=[WEATHER], max_tokens=40, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    for call in choice.message.tool_calls or []:
        assert call.function.name == "get_weather" and isinstance(json.loads(call.function.arguments), dict)


def test_response_format_json_schema_validates(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    schema = {
        "type": "object",
        "properties": {
            "colours": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
            "count": {"type": "integer"},
        },
        "required": ["colours", "count"],
        "additionalProperties": False,
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}
    r = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name three colours."}],
        max_tokens=60,
        temperature=0,
        response_format=response_format,  # type: ignore[arg-type]
    )
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content or ""), schema)


def test_response_format_json_object_is_an_object(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    r = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Give a JSON object with a name."}],
        max_tokens=40,
        temperature=0,
        response_format={"type": "json_object"},
    )
    text = r.choices[0].message.content or ""
    assert text.startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_probe_sees_tools_and_formats_honoured(client: tuple[openai.OpenAI, str]) -> None:
    """probe's tool checks against our server: the forced call, the named function and both formats
    come back as asked (constrained decoding); under auto SmolLM2 answers in text, which is no verdict."""
    c, model = client

    async def checks() -> dict[str, str]:
        settings = Settings(repeats=2, max_tokens=64)
        async with Wire(Endpoint("ours", str(c.base_url), model)) as w:
            found = [
                *await tool_checks.tool_calling(w, settings),
                *await tool_checks.response_format(w, settings),
            ]
        return {check.name: check.verdict for check in found}

    got = asyncio.run(checks())
    for name in (
        "tool_choice=required",
        "tool_choice=function",
        "response_format=json_object",
        "response_format=json_schema",
    ):
        assert got[name] == "honoured", (name, got)
    assert got["tools"] in ("honoured", "unsupported")
