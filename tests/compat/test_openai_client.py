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
        model=model,
        messages=HELLO,
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
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
        "model": model,
        "messages": [{"role": "user", "content": "Time in Paris?"}],
        "tools": [tool],
        "tool_choice": "required",
        "max_tokens": 60,
        "temperature": 0,
    }
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


# --- the Responses API --------------------------------------------------------------------------------

TIME_TOOL = {
    "type": "function",
    "name": "get_time",
    "description": "Local time in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 24}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def test_responses_whole_and_streamed_agree(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    ask: dict[str, Any] = {"model": model, "input": HELLO, "max_output_tokens": 12, "temperature": 0}
    whole = c.responses.create(**ask)
    chat = c.chat.completions.create(model=model, messages=HELLO, max_tokens=12, temperature=0)
    assert whole.object == "response" and whole.output_text == chat.choices[0].message.content
    assert whole.usage is not None and chat.usage is not None
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (
        chat.usage.prompt_tokens,
        chat.usage.completion_tokens,
    )
    assert whole.usage.input_tokens_details.cached_tokens == 0
    assert whole.usage.output_tokens_details.reasoning_tokens == 0
    kinds = [event.type for event in c.responses.create(**ask, stream=True)]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert whole.status == "incomplete" and whole.incomplete_details is not None  # cut at 12 tokens
    assert kinds[-1] == "response.incomplete"
    # the client's stream helper wants response.completed: an answer that ends by itself
    short = {**ask, "input": "What is the capital of France? Answer in one word.", "max_output_tokens": 20}
    with c.responses.stream(**short) as events:
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        final = events.get_final_response()
    whole = c.responses.create(**short)
    assert final.status == "completed" == whole.status and "Paris" in whole.output_text
    assert deltas == final.output_text == whole.output_text
    assert final.usage == whole.usage


def test_responses_tool_loop_of_two_turns(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    history: list[Any] = [{"role": "user", "content": "What time is it in Paris?"}]
    ask: dict[str, Any] = {"model": model, "tools": [TIME_TOOL], "max_output_tokens": 60, "temperature": 0}
    first = c.responses.create(**ask, input=history, tool_choice="required")
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_time" and json.loads(call.arguments)["city"]
    with c.responses.stream(**ask, input=history, tool_choice="required") as events:
        streamed = [item for item in events.get_final_response().output if item.type == "function_call"]
    assert [json.loads(s.arguments) for s in streamed] == [json.loads(call.arguments)]
    history += [*first.output, {"type": "function_call_output", "call_id": call.call_id, "output": "09:30"}]
    second = c.responses.create(**{**ask, "max_output_tokens": 8}, input=history, tool_choice="none")
    assert second.output_text and all(item.type == "message" for item in second.output)


def test_responses_errors_are_the_clients_own_exceptions(client: tuple[openai.OpenAI, str]) -> None:
    c, model = client
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="no-such-model", input="hi", max_output_tokens=4)
    with pytest.raises(openai.BadRequestError) as caught:
        c.responses.create(model=model, input="hi", max_output_tokens=4, previous_response_id="resp_1")
    assert "previous_response_id" in str(caught.value)
