"""Our server with the client people use: the official ``openai`` Python package against ``lossless
serve`` (SmolLM2, n-gram speculative decoding), every answer parsed into the client's own types."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from lossless.server.launch import start_embedded
from lossless.server.options import ServeOptions

pytestmark = pytest.mark.slow
HELLO = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def client(smollm2_path: Path) -> Iterator[tuple[openai.OpenAI, str]]:
    served = start_embedded(ServeOptions(model=str(smollm2_path), dtype="float32", speculative="ngram"))
    with served as url, openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120) as c:
        yield c, c.models.list().data[0].id


def test_models_list_names_the_served_model(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    assert model == "smollm2-135m-instruct"
    assert c.models.retrieve(model).id == model


def test_chat_with_logprobs(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    r = c.chat.completions.create(
        model=model, messages=HELLO, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3
    )
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage is not None and r.usage.completion_tokens == len(choice.logprobs.content)
    for token in choice.logprobs.content:
        assert token.logprob <= 0 and len(token.top_logprobs) == 3
        assert token.top_logprobs[0].logprob >= token.top_logprobs[-1].logprob
    assert r.system_fingerprint == "lossless-0.1.0-float32-ngram"


def test_chat_stream_with_usage_equals_the_whole_answer(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    whole = c.chat.completions.create(model=model, messages=HELLO, max_tokens=16, temperature=0)
    stream = c.chat.completions.create(
        model=model, messages=HELLO, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(ch.usage is None for ch in chunks[:-1])


def test_a_streamed_tool_call_accumulates_into_the_whole_one(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    tool = {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 24}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    ask: dict[str, Any] = {
        "model": model, "messages": [{"role": "user", "content": "Time in Paris?"}], "tools": [tool],
        "tool_choice": "required", "max_tokens": 60, "temperature": 0,
    }  # fmt: skip
    whole = c.chat.completions.create(**ask).choices[0]
    with c.chat.completions.stream(**ask) as events:
        kinds = [event.type for event in events]
        final = events.get_final_completion().choices[0]
    assert kinds.count("tool_calls.function.arguments.delta") >= 2  # the arguments come as generated
    (streamed,), (expected,) = final.message.tool_calls, whole.message.tool_calls
    assert streamed.function.name == expected.function.name == "get_time"
    assert json.loads(streamed.function.arguments) == json.loads(expected.function.arguments)
    assert final.finish_reason == "tool_calls" == whole.finish_reason


def test_completions_echo_scores_the_prompt(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    prompt = "The capital of France is"
    for max_tokens in (0, 1):  # 0: score only (ours honours it; llama.cpp reads it as "no limit")
        r = c.completions.create(
            model=model, prompt=prompt, echo=True, logprobs=5, max_tokens=max_tokens, temperature=0
        )
        choice = r.choices[0]
        lp = choice.logprobs
        assert choice.text.startswith(prompt) and lp is not None
        assert lp.text_offset is not None and lp.tokens is not None and lp.token_logprobs is not None
        prompt_rows = [i for i, at in enumerate(lp.text_offset) if at < len(prompt)]
        assert "".join(lp.tokens[i] for i in prompt_rows) == prompt
        assert lp.token_logprobs[0] is None and all(v is not None for v in lp.token_logprobs[1:])
        assert len(lp.tokens) == len(prompt_rows) + max_tokens


def test_errors_come_back_as_the_clients_own_exceptions(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="no-such-model", messages=HELLO, max_tokens=4)
    with pytest.raises(openai.BadRequestError) as caught:
        c.chat.completions.create(model=model, messages=HELLO, max_tokens=4, temperature=-1)
    assert "temperature" in str(caught.value)
