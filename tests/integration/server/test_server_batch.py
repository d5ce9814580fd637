"""``serve --max-batch`` over real HTTP on 127.0.0.1: requests decoded together in a continuous batch.

The model is the tiny checkpoint as llama.cpp writes SmolLM2 (Q4_1 layers, a Q8_0 output layer: the
numerics the embedded model is served in here, whose batch is invariant), its special tokens unreachable
so that greedy generations never end by themselves, with a 2048-token context. What is checked: each
request's answer under load is its answer alone; requests really run together (their tokens interleave,
and /metrics says how many run and what the KV cache holds); the queue, its 429s, clients that leave and
shutdown behave as with one request at a time; logprobs, echo scoring and a JSON schema work in the batch.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tiny_gguf import Q, write_gguf

from lossless.server.http.limits import RequestLimits
from lossless.server.launch import start_embedded
from lossless.server.main import LoadedModel, load_model
from lossless.server.options import ServeOptions

SLOTS, QUEUE = 3, 2
BATCHED = ServeOptions(max_batch=SLOTS, max_queue=QUEUE)


@pytest.fixture(scope="module")
def endless_gguf(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer

    folder = tmp_path_factory.mktemp("endless") / "endless-tiny"
    shutil.copytree(tiny_checkpoint, folder)
    weights = load_file(folder / "model.safetensors")
    specials = list(Tokenizer.from_file(str(folder / "tokenizer.json")).get_added_tokens_decoder())
    weights["lm_head.weight"][specials] = 0.0  # greedy never picks a special token
    save_file(weights, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2048}))
    return write_gguf(folder, folder.parent / "endless-tiny-q4_1.gguf", Q.Q4_1, output=Q.Q8_0)


@pytest.fixture(scope="module")
def endless(endless_gguf: Path) -> LoadedModel:
    return load_model(ServeOptions(model=str(endless_gguf), speculative="none", dtype="int4"))


@pytest.fixture(scope="module")
def base_url(endless: LoadedModel) -> Iterator[str]:
    with start_embedded(BATCHED, loaded=endless) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, trust_env=False, timeout=60) as c:
        yield c


def metrics(client: httpx.Client) -> dict[str, float]:
    text = client.get(str(client.base_url).removesuffix("/v1/") + "/metrics").text
    return {k: float(v) for k, v in (ln.rsplit(" ", 1) for ln in text.splitlines() if not ln.startswith("#"))}


def counts(usage: dict[str, Any]) -> dict[str, Any]:
    """A usage's token counts but how many prompt tokens were found cached (which depends on what came
    before, not on what the answer is)."""
    return {k: v for k, v in usage.items() if k != "prompt_tokens_details"}


def complete(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    reply = client.post("/completions", json={"temperature": 0, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


class Stream:
    """A greedy completion stream, sent and read by a thread (a queued stream's head waits for its turn):
    its status, its events, and when each text chunk came."""

    def __init__(self, base_url: str, max_tokens: int, prompt: str = "Tell me a long story") -> None:
        self.client = httpx.Client(base_url=base_url, trust_env=False, timeout=60)
        self.body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
        self.response: httpx.Response | None = None
        self.status: int | None = None
        self.chunks: list[tuple[float, str]] = []
        self.events: list[Any] = []
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            request = self.client.build_request("POST", "/completions", json=self.body)
            self.response = self.client.send(request, stream=True)
            self.status = self.response.status_code
            for line in self.response.iter_lines():
                if line.startswith("data: "):
                    data = line.removeprefix("data: ")
                    event = data if data == "[DONE]" else json.loads(data)
                    self.events.append(event)
                    if isinstance(event, dict) and event.get("choices") and event["choices"][0]["text"]:
                        self.chunks.append((time.monotonic(), event["choices"][0]["text"]))
        except (httpx.HTTPError, RuntimeError):  # closed by the test
            pass
        finally:
            self.done.set()

    def wait_for_text(self, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while not self.chunks:
            assert time.monotonic() < deadline and not self.done.is_set(), (self.status, self.events)
            time.sleep(0.01)

    def close(self) -> None:
        """The client leaves: its connection closes."""
        if self.response is not None:
            self.response.close()
        self.client.close()
        self._thread.join(10)


def health(client: httpx.Client) -> dict[str, Any]:
    reply: dict[str, Any] = client.get(str(client.base_url).removesuffix("/v1/") + "/health").json()
    return reply


def wait_until(condition: Any, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


BODIES = [
    {"prompt": "Hello there", "max_tokens": 20},
    {"prompt": "One two three four five six seven eight nine ten " * 12, "max_tokens": 9},  # two chunks
    {"prompt": "Tell me about the sea", "max_tokens": 30, "temperature": 0.8, "seed": 7},
    {"prompt": "x", "max_tokens": 14, "stop": ["e"]},
    {"prompt": "The quick brown fox", "max_tokens": 25, "logprobs": 2},
]


def test_each_answer_under_load_is_its_answer_alone(client: httpx.Client, base_url: str) -> None:
    alone = [complete(client, body) for body in BODIES]
    assert alone[0]["system_fingerprint"].endswith(f"-batch{SLOTS}-none")  # invariant: no "-variant"
    together: dict[int, dict[str, Any]] = {}

    def ask(i: int) -> None:
        with httpx.Client(base_url=base_url, trust_env=False, timeout=60) as own:
            together[i] = complete(own, BODIES[i])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(BODIES))]
    for thread in threads:  # staggered: each joins a batch already running
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join(60)
    for i, answer in enumerate(alone):
        assert together[i]["choices"] == answer["choices"], BODIES[i]
        assert counts(together[i]["usage"]) == counts(answer["usage"])


def test_a_repeated_prompt_starts_from_its_cached_keys_and_values_with_the_same_answer(
    client: httpx.Client,
) -> None:
    """The second time a prompt comes, every token of it but the last is found in the slot the first
    left (usage says how many: OpenAI's prompt_tokens_details.cached_tokens), and the answer is the same."""
    body = {"prompt": "Asked twice, word for word, by two clients", "max_tokens": 12}
    first, second = complete(client, body), complete(client, body)
    n = first["usage"]["prompt_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] < n // 2  # nothing like it came before
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == n - 1
    assert second["choices"] == first["choices"]


def test_requests_drafting_in_the_batch_get_plain_decoding_s_answers(
    client: httpx.Client, endless_gguf: Path
) -> None:
    """A batch whose requests each draft n-gram chains: every greedy answer under load is the plain batch's
    answer alone, and /metrics counts their drafts (the tiny random model's text rarely repeats, so they are
    rejected: acceptance in the batch is shown on SmolLM2, tests/integration/engine/test_batch_real.py)."""
    # and a long answer: the tiny model's greedy text falls into a loop, which n-gram drafts then copy
    greedy = [body for body in BODIES if "temperature" not in body] + [
        {"prompt": "Keep going", "max_tokens": 200}
    ]
    alone = [complete(client, body) for body in greedy]  # the plain batch, one request at a time
    drafting = load_model(ServeOptions(model=str(endless_gguf), speculative="ngram", dtype="int4"))
    together: dict[int, dict[str, Any]] = {}
    with start_embedded(BATCHED, loaded=drafting) as url:

        def ask(i: int) -> None:
            with httpx.Client(base_url=url, trust_env=False, timeout=60) as own:
                together[i] = complete(own, greedy[i])

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(greedy))]
        for thread in threads:
            thread.start()
            time.sleep(0.05)
        for thread in threads:
            thread.join(60)
        with httpx.Client(base_url=url, trust_env=False, timeout=10) as c:
            drafted = metrics(c)["lossless_spec_drafted_tokens_total"]
    assert together[0]["system_fingerprint"].endswith(f"-batch{SLOTS}-ngram")
    for i, answer in enumerate(alone):
        assert together[i]["choices"] == answer["choices"], greedy[i]
        assert counts(together[i]["usage"]) == counts(answer["usage"])
    assert drafted > 0


def test_requests_run_together_and_metrics_say_so(client: httpx.Client, base_url: str) -> None:
    before = metrics(client)
    first = Stream(base_url, max_tokens=600)
    first.wait_for_text()
    second = Stream(base_url, max_tokens=600, prompt="Another story, please")
    second.wait_for_text()
    during = metrics(client)
    assert not first.done.is_set()  # the second's first text came while the first still ran
    assert during["lossless_requests_running"] == 2 and during["lossless_kv_slots_used"] == 2
    assert during["lossless_kv_slots"] == SLOTS and during["lossless_kv_positions_used"] > 20
    time.sleep(0.3)
    first_times = [t for t, _ in first.chunks if t > second.chunks[0][0]]
    assert first_times  # the first went on generating once the second had joined: they interleave
    first.close()
    second.close()
    wait_until(lambda: metrics(client)["lossless_requests_running"] == 0)
    after = metrics(client)
    assert after["lossless_batch_size_count"] > before.get("lossless_batch_size_count", 0)
    steps = after["lossless_batch_size_count"] - before.get("lossless_batch_size_count", 0)
    sizes = after["lossless_batch_size_sum"] - before.get("lossless_batch_size_sum", 0)
    assert sizes / steps > 1.2  # most steps ran both
    assert after["lossless_kv_slots_used"] == 0 and after["lossless_kv_positions_used"] == 0


def test_a_full_batch_and_queue_answer_429_and_a_leaving_client_frees_its_slot(
    client: httpx.Client, base_url: str
) -> None:
    cancelled = metrics(client)["lossless_requests_cancelled_total"]
    running = [Stream(base_url, max_tokens=1500) for _ in range(SLOTS)]
    for stream in running:
        stream.wait_for_text()
    queued = [Stream(base_url, max_tokens=5) for _ in range(QUEUE)]
    wait_until(lambda: health(client)["queue_length"] == QUEUE)
    refused = client.post("/completions", json={"prompt": "hi", "max_tokens": 2})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    running[0].close()  # a client leaves mid-batch: its slot goes to the first in the queue at once
    queued[0].done.wait(20)
    assert queued[0].events[-1] == "[DONE]" and queued[0].chunks
    assert all(not s.done.is_set() for s in running[1:])  # it ran beside the others
    wait_until(lambda: metrics(client)["lossless_requests_cancelled_total"] == cancelled + 1)
    for stream in running[1:] + queued:
        stream.close()
    wait_until(lambda: metrics(client)["lossless_requests_running"] == 0)


def test_nothing_is_lost_when_a_neighbour_leaves(client: httpx.Client, base_url: str) -> None:
    alone = complete(client, {"prompt": "Keep going", "max_tokens": 60})
    leaving = Stream(base_url, max_tokens=1500)
    leaving.wait_for_text()
    staying: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: staying.update(complete(client, {"prompt": "Keep going", "max_tokens": 60}))
    )
    thread.start()
    time.sleep(0.2)
    leaving.close()
    thread.join(60)
    assert staying["choices"] == alone["choices"] and staying["usage"]["completion_tokens"] == 60


def test_logprobs_echo_and_a_json_schema_work_in_the_batch(client: httpx.Client, base_url: str) -> None:
    busy = Stream(base_url, max_tokens=1500)
    busy.wait_for_text()
    echoed = complete(
        client, {"prompt": "Score this text please", "max_tokens": 0, "echo": True, "logprobs": 1}
    )
    scored = echoed["choices"][0]["logprobs"]["token_logprobs"]
    assert scored[0] is None and all(isinstance(v, float) for v in scored[1:])
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    chat = client.post(
        "/chat/completions",
        json={
            "messages": [{"role": "user", "content": "Answer in JSON"}],
            "max_tokens": 40,
            "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
        },
    )
    assert chat.status_code == 200, chat.text
    assert isinstance(json.loads(chat.json()["choices"][0]["message"]["content"])["ok"], bool)
    assert not busy.done.is_set()
    busy.close()


def test_shutdown_answers_the_queue_with_503_and_ends_every_running_stream(endless: LoadedModel) -> None:
    limits = RequestLimits(head_timeout_s=1.0, body_timeout_s=1.0, shutdown_grace_s=0.3)
    with start_embedded(BATCHED, loaded=endless, limits=limits) as url:
        running = [Stream(url, max_tokens=1500) for _ in range(SLOTS)]
        for stream in running:
            stream.wait_for_text()
        queued = [Stream(url, max_tokens=1500) for _ in range(QUEUE)]
        with httpx.Client(base_url=url, trust_env=False, timeout=10) as c:
            wait_until(lambda: health(c)["queue_length"] == QUEUE)
    for stream in running:
        stream.done.wait(10)
        assert stream.events[-1] == "[DONE]"
        assert stream.events[-2]["error"]["code"] == "server_shutting_down"
        stream.close()
    for stream in queued:
        assert stream.status == 503
        stream.close()
