"""Our server with Anthropic's official client: the ``anthropic`` Python package against ``lossless
serve``'s /v1/messages (SmolLM2, n-gram speculative decoding), every answer parsed into the client's own
types: whole and streamed messages agree, a tool loop runs two turns, errors are the client's own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from lossless.server.launch import start_embedded
from lossless.server.options import ServeOptions

pytestmark = pytest.mark.slow
MODEL = "smollm2-135m-instruct"
GREEDY = {"temperature": 0}  # not a parameter of the client's create() any more: sent as extra body
HELLO: list[Any] = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
TIME_TOOL: Any = {
    "name": "get_time",
    "description": "Local time in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 24}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def client(smollm2_path: Path) -> Iterator[anthropic.Anthropic]:
    served = start_embedded(ServeOptions(model=str(smollm2_path), dtype="float32", speculative="ngram"))
    with served as url:
        # the client appends /v1/messages itself; x-api-key and anthropic-version go along, unread
        root = url.removesuffix("/v1")
        with anthropic.Anthropic(base_url=root, api_key="unused", max_retries=0, timeout=120) as c:
            yield c


def test_whole_and_streamed_messages_agree(client: anthropic.Anthropic) -> None:
    whole = client.messages.create(model=MODEL, max_tokens=20, messages=HELLO, extra_body=GREEDY)
    (block,) = whole.content
    assert block.type == "text" and "Paris" in block.text
    assert whole.stop_reason == "end_turn" and whole.stop_sequence is None
    assert whole.usage.output_tokens > 0 and whole.usage.cache_read_input_tokens == 0
    with client.messages.stream(model=MODEL, max_tokens=20, messages=HELLO, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == block.text and [b.model_dump(exclude={"parsed_output"}) for b in final.content] == [
        b.model_dump() for b in whole.content
    ]
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.usage.output_tokens == whole.usage.output_tokens
    cut = client.messages.create(model=MODEL, max_tokens=1, messages=HELLO, extra_body=GREEDY)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 1


def test_a_tool_loop_of_two_turns(client: anthropic.Anthropic) -> None:
    history: list[Any] = [{"role": "user", "content": "What time is it in Paris?"}]
    ask: dict[str, Any] = {"model": MODEL, "max_tokens": 60, "tools": [TIME_TOOL], "extra_body": GREEDY}
    first = client.messages.create(**ask, messages=history, tool_choice={"type": "any"})
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use" and use.name == "get_time" and use.input["city"]
    with client.messages.stream(**ask, messages=history, tool_choice={"type": "any"}) as stream:
        kinds = {event.type for event in stream}
        streamed = [b for b in stream.get_final_message().content if b.type == "tool_use"]
    assert "input_json" in kinds  # the arguments came as they were generated
    assert [s.input for s in streamed] == [use.input]
    history += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "09:30"}]},
    ]
    second = client.messages.create(
        **{**ask, "max_tokens": 8}, messages=history, tool_choice={"type": "none"}
    )
    assert second.content and all(b.type == "text" for b in second.content)
    assert json.dumps(use.input)  # the input is plain JSON, as the client sent it back


def test_errors_come_back_as_the_clients_own_exceptions(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="no-such-model", max_tokens=4, messages=HELLO)
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=MODEL, max_tokens=4, messages=HELLO, extra_body={"temperature": 1.5})
    assert "temperature" in str(caught.value)
