"""The server over real HTTP on 127.0.0.1, with the real engine on a tiny random checkpoint.

The checkpoint is the shared tiny one with two changes so that lengths are under the test's control:
its special tokens (end of turn among them) get an all-zero output row, so greedy decoding never ends
a sequence by itself, and its context is 2048 tokens, so a long generation takes about a second.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lossless.server.launch import start_embedded
from lossless.server.main import LoadedModel, load_model
from lossless.server.options import ServeOptions

CONTEXT = 2048
HELLO = [{"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def endless_checkpoint(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer

    folder = tmp_path_factory.mktemp("endless") / "endless-tiny"
    shutil.copytree(tiny_checkpoint, folder)
    weights = load_file(folder / "model.safetensors")
    specials = list(Tokenizer.from_file(str(folder / "tokenizer.json")).get_added_tokens_decoder())
    # logit 0 while the max of ~300 random logits is ~+4: greedy never picks a special token
    weights["lm_head.weight"][specials] = 0.0
    save_file(weights, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": CONTEXT}))
    return folder


@pytest.fixture(scope="module")
def loaded(endless_checkpoint: Path) -> LoadedModel:
    return load_model(ServeOptions(model=str(endless_checkpoint)))


@pytest.fixture(scope="module")
def base_url(loaded: LoadedModel) -> Iterator[str]:
    with start_embedded(ServeOptions(max_queue=2), loaded=loaded) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, trust_env=False, timeout=30) as c:
        yield c


def sse(response: httpx.Response) -> list[Any]:
    """The data of every SSE event; ``[DONE]`` stays a string."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
        else:
            assert line == "", line
    return events


def metrics(client: httpx.Client) -> dict[str, float]:
    text = client.get(str(client.base_url).removesuffix("/v1/") + "/metrics").text
    return {k: float(v) for k, v in (ln.rsplit(" ", 1) for ln in text.splitlines() if not ln.startswith("#"))}


def health(client: httpx.Client) -> dict[str, Any]:
    body: dict[str, Any] = client.get(str(client.base_url).removesuffix("/v1/") + "/health").json()
    return body


def greedy_chat(client: httpx.Client, **fields: Any) -> httpx.Response:
    return client.post("/chat/completions", json={"messages": HELLO, "temperature": 0, **fields})


# --- shapes -----------------------------------------------------------------------------------------


def test_models_lists_the_served_name_and_aliases_are_accepted(
    client: httpx.Client, loaded: LoadedModel
) -> None:
    listed = client.get("/models").json()
    assert [m["id"] for m in listed["data"]] == [loaded.name]
    assert listed["data"][0]["max_model_len"] == CONTEXT
    assert (
        greedy_chat(client, model="endless-tiny", max_tokens=1).json()["model"] == loaded.name
    )  # the dir name
    refused = greedy_chat(client, model="gpt-4o", max_tokens=1)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"
    assert health(client)["status"] == "ok"


def test_chat_completion_body_and_headers(client: httpx.Client) -> None:
    r = greedy_chat(client, max_tokens=5)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] == "length" and choice["logprobs"] is None
    usage = body["usage"]
    assert usage["completion_tokens"] == 5 and usage["prompt_tokens"] > 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
    assert re.fullmatch(
        r"queue;dur=[\d.]+, prefill;dur=[\d.]+, decode;dur=[\d.]+", r.headers["server-timing"]
    )
    assert r.headers["x-lossless-ignored-params"] == ""


def test_client_request_id_is_echoed_on_success_and_error(client: httpx.Client) -> None:
    assert greedy_chat(client, max_tokens=1, headers=None).status_code == 200
    ok = client.post(
        "/chat/completions", json={"messages": HELLO, "max_tokens": 1}, headers={"x-request-id": "a-1"}
    )
    bad = client.post("/chat/completions", content=b"{", headers={"x-request-id": "b-2"})
    assert (ok.headers["x-request-id"], bad.headers["x-request-id"]) == ("a-1", "b-2")


def test_chat_stream_carries_role_then_text_then_usage_then_done(client: httpx.Client) -> None:
    fields = {"messages": HELLO, "temperature": 0.8, "seed": 11, "max_tokens": 12}
    whole = client.post("/chat/completions", json=fields).json()
    stream_fields = {**fields, "stream": True, "stream_options": {"include_usage": True}}
    with client.stream("POST", "/chat/completions", json=stream_fields) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        assert re.fullmatch(r"queue;dur=[\d.]+", r.headers["server-timing"])  # sent before generation
        events = sse(r)
    assert events[-1] == "[DONE]"
    chunks, usage_chunk = events[:-2], events[-2]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["usage"] is None for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]  # same seed, same text
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == whole["usage"]


def test_completions_stream_matches_and_seed_decides(client: httpx.Client) -> None:
    def complete(seed: int, stream: bool = False) -> str:
        fields = {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 1.0, "seed": seed}
        if not stream:
            body = client.post("/completions", json=fields).json()
            assert body["object"] == "text_completion" and body["choices"][0]["finish_reason"] == "length"
            return str(body["choices"][0]["text"])
        with client.stream("POST", "/completions", json={**fields, "stream": True}) as r:
            events = sse(r)
        assert events[-1] == "[DONE]" and "usage" not in events[0]  # no include_usage: no usage field
        return "".join(e["choices"][0]["text"] for e in events[:-1])

    assert complete(5) == complete(5) == complete(5, stream=True)
    assert complete(5) != complete(6)


def test_max_tokens_is_clamped_to_the_context(client: httpx.Client) -> None:
    assert greedy_chat(client, max_completion_tokens=2).json()["usage"]["completion_tokens"] == 2
    # eos ignored: a sampled eos within the 8 tokens left would end it early (seen once in CI)
    fields = {"prompt": [5] * (CONTEXT - 8), "max_tokens": 100, "ignore_eos": True}
    body = client.post("/completions", json=fields).json()
    assert body["usage"] == {
        "prompt_tokens": CONTEXT - 8,
        "completion_tokens": 8,
        "total_tokens": CONTEXT,
        "prompt_tokens_details": {"cached_tokens": 0},  # one request at a time: no prefix kept
    }
    assert body["choices"][0]["finish_reason"] == "length"


def test_stop_sequences_cut_the_text(client: httpx.Client) -> None:
    fields = {"prompt": "The weather today", "max_tokens": 40, "temperature": 0}
    text = client.post("/completions", json=fields).json()["choices"][0]["text"]
    at = next(i for i in range(8, len(text) - 2) if "\ufffd" not in text[i : i + 2])
    stop = text[at : at + 2]
    for stops in (stop, ["never-there", stop]):
        body = client.post("/completions", json={**fields, "stop": stops}).json()
        assert body["choices"][0]["text"] == text[: text.index(stop)]
        assert body["choices"][0]["finish_reason"] == "stop"


def test_chat_logprobs_in_the_chat_format(client: httpx.Client) -> None:
    body = greedy_chat(client, max_tokens=6, logprobs=True, top_logprobs=3).json()
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == 6
    for entry in content:
        assert entry["logprob"] <= 0 and entry["bytes"] == list(entry["token"].encode())
        tops = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert entry["logprob"] == pytest.approx(tops[0])  # greedy picks the likeliest
    stream = {"messages": HELLO, "temperature": 0, "max_tokens": 6, "logprobs": True, "stream": True}
    with client.stream("POST", "/chat/completions", json=stream) as r:
        streamed = [
            e
            for c in sse(r)[:-1]
            if c["choices"][0]["logprobs"]
            for e in c["choices"][0]["logprobs"]["content"]
        ]
    assert [e["token"] for e in streamed] == [e["token"] for e in content]


def test_echo_scores_the_prompt_in_the_legacy_format(client: httpx.Client) -> None:
    prompt = "The quick brown fox"
    body = client.post(
        "/completions", json={"prompt": prompt, "echo": True, "logprobs": 2, "max_tokens": 0}
    ).json()
    (choice,) = body["choices"]
    lp = choice["logprobs"]
    assert choice["text"] == prompt and choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 0 and body["usage"]["prompt_tokens"] == len(lp["tokens"])
    assert "".join(lp["tokens"]) == prompt
    assert lp["token_logprobs"][0] is None and all(x <= 0 for x in lp["token_logprobs"][1:])
    assert lp["top_logprobs"][0] is None and all(1 <= len(t) <= 2 for t in lp["top_logprobs"][1:])
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]

    more = client.post(
        "/completions",
        json={"prompt": prompt, "echo": True, "logprobs": 0, "max_tokens": 3, "temperature": 0},
    ).json()
    lp3 = more["choices"][0]["logprobs"]
    assert more["choices"][0]["text"].startswith(prompt) and len(lp3["tokens"]) == len(lp["tokens"]) + 3
    assert lp3["token_logprobs"][: len(lp["tokens"])] == pytest.approx(lp["token_logprobs"])
    with client.stream(
        "POST",
        "/completions",
        json={
            "prompt": prompt,
            "echo": True,
            "logprobs": 1,
            "max_tokens": 3,
            "temperature": 0,
            "stream": True,
        },
    ) as r:
        events = sse(r)
    assert events[0]["choices"][0]["text"] == prompt  # the echo comes first, with the prompt's scores
    assert events[0]["choices"][0]["logprobs"]["tokens"] == lp["tokens"]
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == more["choices"][0]["text"]

    only_echo = {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 0, "stream": True}
    with client.stream("POST", "/completions", json=only_echo) as r:
        events = sse(r)
    assert events[0]["choices"][0]["text"] == prompt and events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"


# --- refusals ---------------------------------------------------------------------------------------

BAD = [
    ("/chat/completions", b"{not json", None),
    ("/chat/completions", b"[]", None),
    ("/chat/completions", {"messages": HELLO, "model": "nope"}, "model"),  # a 404, as OpenAI answers
    ("/chat/completions", {"messages": HELLO, "temperature": "warm"}, "temperature"),
    ("/chat/completions", {"messages": HELLO, "temperature": 2.1}, "temperature"),
    ("/chat/completions", {"messages": HELLO, "top_p": 0}, "top_p"),
    ("/chat/completions", {"messages": HELLO, "n": 2}, "n"),
    ("/chat/completions", {}, "messages"),
    ("/chat/completions", {"messages": [{"role": "user"}]}, "messages[0].content"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "word " * CONTEXT}]}, "messages"),
    ("/completions", {"max_tokens": 3}, "prompt"),
    ("/completions", {"prompt": "hi", "max_tokens": -1}, "max_tokens"),
    ("/completions", {"prompt": [5] * (CONTEXT + 1), "max_tokens": 0}, "prompt"),
    ("/completions", {"prompt": [5] * CONTEXT}, "prompt"),  # no room for a token
    ("/completions", {"prompt": [10**6]}, "prompt"),
    ("/completions", {"prompt": "hi", "logprobs": 50}, "logprobs"),
]


@pytest.mark.parametrize(("path", "body", "param"), BAD)
def test_bad_input_is_an_openai_400(client: httpx.Client, path: str, body: Any, param: str | None) -> None:
    r = client.post(path, content=body) if isinstance(body, bytes) else client.post(path, json=body)
    assert r.status_code == (404 if param == "model" else 400), r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]
    assert r.headers["x-request-id"]


def test_long_prompt_names_the_context(client: httpx.Client) -> None:
    too_long = [  # the chat one is long enough to be tokenized off the event loop
        client.post("/completions", json={"prompt": [5] * (CONTEXT + 1)}),
        client.post("/chat/completions", json={"messages": [{"role": "user", "content": "word " * CONTEXT}]}),
    ]
    for r in too_long:
        error = r.json()["error"]
        assert error["code"] == "context_length_exceeded" and str(CONTEXT) in error["message"]


def test_unknown_routes_and_methods_answer_in_json(client: httpx.Client) -> None:
    missing, wrong = client.get("/nope"), client.get("/chat/completions")
    assert (missing.status_code, wrong.status_code) == (404, 405)
    assert missing.json()["error"]["message"] and wrong.json()["error"]["message"]


def test_unhonoured_fields_are_listed_in_a_header(client: httpx.Client) -> None:
    r = greedy_chat(client, max_tokens=1, canary_field_xyz=1, frequency_penalty=0.0)
    assert r.status_code == 200
    assert r.headers["x-lossless-ignored-params"] == "canary_field_xyz,frequency_penalty"


# --- queue, cancellation, metrics -------------------------------------------------------------------


def test_metrics_count_requests_tokens_and_latencies(client: httpx.Client) -> None:
    before = metrics(client)
    fields = {"messages": HELLO, "max_tokens": 5, "temperature": 0, "stream": True}
    with client.stream("POST", "/chat/completions", json=fields) as r:
        sse(r)
    after = metrics(client)

    def grew(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert grew('lossless_requests_total{endpoint="/v1/chat/completions",status="200"}') == 1
    assert grew("lossless_generation_tokens_total") == 5
    assert grew("lossless_prompt_tokens_total") > 5
    assert grew("lossless_time_to_first_token_seconds_count") == 1
    # one observation per token after the first delta, which may hold several (held-back UTF-8)
    assert 1 <= grew("lossless_time_per_output_token_seconds_count") <= 4
    assert after["lossless_queue_length"] == 0


def open_stream(client: httpx.Client, max_tokens: int) -> tuple[httpx.Response, Iterator[str]]:
    """A long greedy stream, read until its first text chunk (so it is on the engine now)."""
    request = client.build_request(
        "POST",
        "/completions",
        json={
            "prompt": "Tell me a long story",
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
        },
    )
    response = client.send(request, stream=True)
    lines = response.iter_lines()
    assert next(line for line in lines if line.startswith("data: "))
    return response, lines


def test_a_client_that_leaves_stops_its_generation(client: httpx.Client) -> None:
    before = metrics(client)
    response, lines = open_stream(client, max_tokens=CONTEXT)
    for _ in range(4):
        next(lines)
    response.close()
    deadline = time.monotonic() + 10
    while metrics(client)["lossless_requests_cancelled_total"] == before["lossless_requests_cancelled_total"]:
        assert time.monotonic() < deadline, "the generation was not cancelled"
        time.sleep(0.01)
    generated = (
        metrics(client)["lossless_generation_tokens_total"] - before["lossless_generation_tokens_total"]
    )
    assert generated < CONTEXT / 4  # it ran ~1 s to the end; it stopped within a few dozen tokens

    start = time.monotonic()
    r = greedy_chat(client, max_tokens=3)
    assert r.status_code == 200 and time.monotonic() - start < 2.0
    queue_ms = float(r.headers["server-timing"].split(",")[0].removeprefix("queue;dur="))
    assert queue_ms < 500


def test_a_waiting_non_streaming_client_that_leaves_stops_too(client: httpx.Client, base_url: str) -> None:
    before = metrics(client)["lossless_requests_cancelled_total"]
    fields = {"prompt": "Tell me a long story", "max_tokens": CONTEXT, "temperature": 0}
    with (
        httpx.Client(base_url=base_url, trust_env=False, timeout=0.2) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        impatient.post("/completions", json=fields)
    deadline = time.monotonic() + 10
    while metrics(client)["lossless_requests_cancelled_total"] == before:
        assert time.monotonic() < deadline, "the generation was not cancelled"
        time.sleep(0.01)


def test_full_queue_answers_429_and_the_queue_is_fifo(client: httpx.Client, base_url: str) -> None:
    response, _ = open_stream(client, max_tokens=CONTEXT)  # on the engine for about a second
    started: dict[str, float] = {}

    def queued(name: str) -> None:
        # when its first token arrives, not when it ends: the engine serves one generation at a time, so
        # the second's first token comes 15 tokens after the first's, a margin that thread scheduling on a
        # busy machine does not eat (two 2-token answers ended 0.2 ms apart, recorded in either order)
        with httpx.Client(base_url=base_url, trust_env=False, timeout=30) as own:
            stream, lines = open_stream(own, max_tokens=16)
            started[name] = time.monotonic()
            assert stream.status_code == 200 and "data: [DONE]" in lines
            stream.close()

    threads = []
    for depth, name in enumerate(["first", "second"], start=1):
        threads.append(threading.Thread(target=queued, args=(name,)))
        threads[-1].start()
        deadline = time.monotonic() + 5
        while health(client)["queue_length"] < depth:  # wait until it is in line before the next one
            assert time.monotonic() < deadline
            time.sleep(0.005)
    refused = greedy_chat(client, max_tokens=2)
    response.close()  # free the engine: the queued two run now
    for t in threads:
        t.join(30)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert started["first"] < started["second"]
