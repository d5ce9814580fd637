"""Request parsing: what is honoured, what is refused with which param, what is listed as ignored."""

from __future__ import annotations

from typing import Any

import pytest

from lossless.engine.engine import TokenLogprob
from lossless.server.openai.bodies import LegacyLogprobs, first_token_text
from lossless.server.openai.protocol import InvalidRequest, parse, parse_json

MODEL = "smollm2-135m-instruct"
ALIASES = frozenset({"SmolLM2-135M-Instruct.Q4_1"})
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def chat(**fields: Any) -> Any:
    return parse("chat", {**CHAT, **fields}, MODEL, ALIASES)


def completion(**fields: Any) -> Any:
    return parse("completions", {"prompt": "hi", **fields}, MODEL, ALIASES)


def test_defaults_follow_the_openai_api() -> None:
    req = chat()
    assert req.max_tokens is None  # chat: the rest of the context
    assert (req.params.temperature, req.params.top_p, req.params.top_k) == (1.0, 1.0, 0)
    assert req.params.seed is None and req.params.stop == () and req.logprobs is None
    assert completion().max_tokens == 16  # the legacy API's default


def test_explicit_nulls_mean_the_default() -> None:
    nulls = dict.fromkeys(
        [
            "model",
            "n",
            "temperature",
            "top_p",
            "top_k",
            "seed",
            "stop",
            "max_tokens",
            "stream",
            "stream_options",
            "logprobs",
            "top_logprobs",
        ]
    )
    assert chat(**nulls) == chat()
    assert chat(logprobs=False, top_logprobs=0).logprobs is None


def test_sampling_fields_reach_sampling_params() -> None:
    req = chat(temperature=0, top_p=0.5, top_k=7, seed=3, stop="\n", max_tokens=9, model=MODEL)
    p = req.params
    assert (p.temperature, p.top_p, p.top_k, p.seed, p.stop, req.max_tokens) == (0.0, 0.5, 7, 3, ("\n",), 9)
    assert chat(stop=["a", "b", ""]).params.stop == ("a", "b")
    assert chat(max_tokens=5, max_completion_tokens=7).max_tokens == 7  # the newer name wins
    assert chat(top_k=-1).params.top_k == 0  # vLLM's "off"


def test_model_aliases_and_omission() -> None:
    assert chat(model="SmolLM2-135M-Instruct.Q4_1").model == MODEL
    assert chat().model == MODEL
    with pytest.raises(InvalidRequest) as err:
        chat(model="gpt-4o")
    assert err.value.param == "model" and err.value.code == "model_not_found" and err.value.status == 404


def test_logprob_forms() -> None:
    assert chat(logprobs=True).logprobs == 0
    req = chat(logprobs=True, top_logprobs=3)
    assert req.logprobs == 3 and req.params.logprobs and req.params.top_logprobs == 3
    assert completion(logprobs=2, echo=True).logprobs == 2
    with pytest.raises(InvalidRequest, match="top_logprobs needs logprobs"):
        chat(top_logprobs=2)


def test_unhonoured_fields_are_listed_not_refused() -> None:
    assert chat(presence_penalty=0.5, canary_xyz=1, user="u").ignored == (
        "canary_xyz",
        "presence_penalty",
        "user",
    )
    assert completion(echo=True).ignored == ()
    assert "echo" in chat(echo=True).ignored  # echo means nothing to chat completions


def test_messages_are_normalised() -> None:
    req = chat(
        messages=[
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": None, "tool_calls": []},
        ]
    )
    assert req.messages == (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": ""},
    )


def test_prompt_forms() -> None:
    assert completion(prompt=["one"]).prompt == "one"
    assert completion(prompt=[1, 2, 3]).prompt == (1, 2, 3)
    assert completion(prompt=[[4, 5]]).prompt == (4, 5)
    with pytest.raises(InvalidRequest, match="one prompt per request"):
        completion(prompt=["a", "b"])


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.01}, "top_p"),
        ({"top_k": 1.5}, "top_k"),
        ({"seed": "1"}, "seed"),
        ({"seed": 2**70}, "seed"),
        ({"max_tokens": 0}, "max_tokens"),  # chat needs at least one token
        ({"max_tokens": "9"}, "max_tokens"),
        ({"max_completion_tokens": -1}, "max_completion_tokens"),
        ({"stop": 5}, "stop"),
        ({"stop": ["a", 1]}, "stop"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": []}, "stream_options"),
        ({"logprobs": 1}, "logprobs"),  # chat's logprobs is a switch
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"n": 2}, "n"),
        ({"n": 0}, "n"),
        ({"model": 7}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "king", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
    ],
)
def test_chat_refusals_name_the_param(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        chat(**fields)
    assert err.value.param == param
    body = err.value.body()["error"]
    assert body["type"] == "invalid_request_error" and body["param"] == param and body["message"]


def test_n_above_one_says_so() -> None:
    with pytest.raises(InvalidRequest, match=r"n > 1 is not supported"):
        chat(n=3)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"prompt": None}, "prompt"),
        ({"prompt": 5}, "prompt"),
        ({"prompt": [1, -2]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"logprobs": True}, "logprobs"),  # the legacy logprobs is an integer
        ({"logprobs": 21}, "logprobs"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"echo": 1}, "echo"),
    ],
)
def test_completion_refusals_name_the_param(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        completion(**fields)
    assert err.value.param == param


def test_max_tokens_zero_is_allowed_for_completions() -> None:
    assert completion(max_tokens=0, echo=True, logprobs=1).max_tokens == 0


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_parse_json_refuses_non_objects(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_json(raw)
    assert err.value.code == "invalid_json" and err.value.status == 400


def test_legacy_logprobs_offsets_run_across_prompt_and_completion() -> None:
    scored = [None, TokenLogprob(5, "lo", -1.0, ((5, "lo", -1.0), (6, "la", -2.0)))]
    legacy = LegacyLogprobs()
    legacy.add_prompt(first_token_text("Hello", scored), scored)
    legacy.add_generated([TokenLogprob(7, "!", -0.5)])
    assert legacy.body() == {
        "tokens": ["Hel", "lo", "!"],
        "token_logprobs": [None, -1.0, -0.5],
        "top_logprobs": [None, {"lo": -1.0, "la": -2.0}, {}],
        "text_offset": [0, 3, 5],
    }
    assert legacy.since(2)["tokens"] == ["!"]
