"""The server against hostile clients, over raw sockets on 127.0.0.1 (nothing between us and the bytes).

Every request must end in its documented outcome: a 2xx, or a 4xx with an OpenAI error body
({"error": {"message", "type", "param", "code"}}); never a 5xx, never a connection closed without a
response. Property-based fuzzing (hypothesis, derandomized: the same examples every run) covers bodies and
headers; the faults found by hand are explicit tests below it. The model is the shared tiny checkpoint with
a 128-token context, so no generation is long; queue and shutdown tests use an "endless" copy that never
ends a sequence by itself, so a generation runs as long as they need.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import re
import select
import shutil
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lossless.server.http.limits import MAX_BODY_BYTES, RequestLimits
from lossless.server.launch import start_embedded
from lossless.server.main import LoadedModel, load_model
from lossless.server.options import ServeOptions

SHORT = RequestLimits(head_timeout_s=1.0, body_timeout_s=1.0)  # the deadlines, short enough to wait for here
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # a fixed sequence of examples: the suite cannot flake on a lucky draw
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ERROR_KEYS = {"message", "type", "param", "code"}
pytestmark = pytest.mark.usefixtures("torch_one_thread")  # the tiny model: ~3 ms a request, not ~140


@dataclass(frozen=True)
class Server:
    port: int

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Path) -> LoadedModel:
    return load_model(ServeOptions(model=str(tiny_checkpoint), max_context=128))


@pytest.fixture(scope="module")
def server(tiny: LoadedModel) -> Iterator[Server]:
    """With the default limits: a busy machine never turns a fuzzed request into a time-out."""
    with start_embedded(ServeOptions(max_queue=8), loaded=tiny) as url:
        yield Server(int(url.split(":")[2].split("/")[0]))


@pytest.fixture(scope="module")
def impatient(tiny: LoadedModel) -> Iterator[Server]:
    with start_embedded(ServeOptions(max_queue=8), loaded=tiny, limits=SHORT) as url:
        yield Server(int(url.split(":")[2].split("/")[0]))


@pytest.fixture(scope="module")
def endless(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    """The tiny checkpoint with its special tokens unreachable (greedy never ends a sequence) and a
    4096-token context: a greedy generation to the end of it takes seconds."""
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer

    folder = tmp_path_factory.mktemp("endless") / "endless-tiny"
    shutil.copytree(tiny_checkpoint, folder)
    weights = load_file(folder / "model.safetensors")
    specials = list(Tokenizer.from_file(str(folder / "tokenizer.json")).get_added_tokens_decoder())
    weights["lm_head.weight"][specials] = 0.0
    save_file(weights, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 4096}))
    return load_model(ServeOptions(model=str(folder)))


# --- a raw HTTP/1.1 client ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Headers = Sequence[tuple[bytes, bytes]]


def request_bytes(
    path: str, body: bytes, headers: Headers = (), *, method: str = "POST", length: bool = True
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1".encode(), b"host: 127.0.0.1", b"connection: close"]
    if length:
        lines.append(b"content-length: %d" % len(body))
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def read_answer(sock: socket.socket) -> Answer:
    """The response on ``sock``; http.client's RemoteDisconnected if the server closed without one."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    return Answer(response.status, response.headers, response.read())


def exchange(server: Server, raw: bytes, timeout: float = 30) -> Answer:
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it may answer before reading
            sock.sendall(raw)
        return read_answer(sock)


def post(server: Server, path: str, body: Any, headers: Headers = ()) -> Answer:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return exchange(server, request_bytes(path, raw, headers))


def get(server: Server, path: str) -> Any:
    return exchange(server, request_bytes(path, b"", method="GET")).json()


def metrics(server: Server) -> dict[str, float]:
    text = exchange(server, request_bytes("/metrics", b"", method="GET")).body.decode()
    return {k: float(v) for k, v in (ln.rsplit(" ", 1) for ln in text.splitlines() if not ln.startswith("#"))}


def assert_documented(answer: Answer) -> None:
    """A 2xx with a whole body (a stream ends with [DONE]), or a 4xx with an OpenAI error body."""
    assert answer.status < 500, (answer.status, answer.body[:300])
    assert answer.headers["x-request-id"]
    if answer.status < 300:
        if answer.headers["content-type"].startswith("text/event-stream"):
            events = [ln.removeprefix(b"data: ") for ln in answer.body.split(b"\n\n") if ln]
            assert events[-1] == b"[DONE]", answer.body[-300:]
            assert all("error" not in json.loads(e) for e in events[:-1])
        else:
            assert answer.json()["choices"], answer.body[:300]
        return
    assert 400 <= answer.status < 500, answer.status
    error = answer.json()["error"]
    assert set(error) == ERROR_KEYS and isinstance(error["message"], str) and error["message"]
    assert error["type"] in ("invalid_request_error", "rate_limit_error"), error


# --- fuzzing -----------------------------------------------------------------------------------------

ODD_CHARS = [
    "\ud800",
    "\udfff",
    "\x00",
    "\r\n",
    "\u2028",
    "\ufeff",
    "😀",
    "é",
    "<|im_start|>",
    "{{",
    "%s",
    "\\",
]
odd_text = st.lists(
    st.one_of(
        st.characters(),
        st.sampled_from(ODD_CHARS),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),  # lone surrogates, which JSON can spell
    ),
    max_size=12,
).map("".join)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # NaN and Infinity too: json.dumps writes them and Python's json.loads reads them
    odd_text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(odd_text, inner, max_size=4),
    max_leaves=10,
)


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def plausible(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly values of the right kind (so requests get past the first check), sometimes anything."""
    return st.one_of(good, good, json_values, st.integers(1, 500).map(nested))


message = st.fixed_dictionaries(
    {
        "role": plausible(st.sampled_from(["system", "developer", "user", "assistant", "tool", "robot"])),
        "content": plausible(
            odd_text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": odd_text}))
        ),
    }
)
COMMON = {
    "model": plausible(st.sampled_from(["tiny", "gpt-4o", ""])),
    "stream": plausible(st.booleans()),
    "stream_options": plausible(st.fixed_dictionaries({"include_usage": plausible(st.booleans())})),
    "temperature": plausible(st.floats(0, 2)),
    "top_p": plausible(st.floats(0, 1)),
    "top_k": plausible(st.integers(-2, 400)),
    "seed": plausible(st.integers(-(2**64), 2**65)),
    "stop": plausible(odd_text | st.lists(odd_text, max_size=20)),
    "n": plausible(st.integers(0, 3)),
    "max_tokens": plausible(st.integers(-1, 4)),
    "frequency_penalty": json_values,
    "logit_bias": json_values,
}
CHAT = {
    **COMMON,
    "messages": plausible(st.lists(message, max_size=3)),
    "max_completion_tokens": plausible(st.integers(-1, 4)),
    "logprobs": plausible(st.booleans()),
    "top_logprobs": plausible(st.integers(-1, 25)),
}
COMPLETIONS = {
    **COMMON,
    "prompt": plausible(
        odd_text | st.lists(st.integers(-3, 400), max_size=6) | st.lists(odd_text, max_size=2)
    ),
    "echo": plausible(st.booleans()),
    "logprobs": plausible(st.integers(-1, 25) | st.booleans()),
}


def bodies(fields: dict[str, st.SearchStrategy[Any]], base: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """A JSON body: ``base`` (a small max_tokens), fields of the API with any value, unknown fields with
    odd names; written with or without ASCII escapes (raw surrogates then make invalid UTF-8)."""
    known = st.fixed_dictionaries({}, optional=fields)
    unknown = st.dictionaries(odd_text, json_values, max_size=3)
    body = st.tuples(known, unknown).map(lambda kv: {**base, **kv[1], **kv[0]})
    return st.tuples(body, st.booleans()).map(
        lambda b: json.dumps(b[0], ensure_ascii=b[1]).encode("utf-8", "surrogatepass")
    )


@FUZZ
@given(raw=bodies(CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
def test_fuzzed_chat_bodies_get_a_documented_answer(server: Server, raw: bytes) -> None:
    assert_documented(post(server, "/v1/chat/completions", raw))


@FUZZ
@given(raw=bodies(COMPLETIONS, {"prompt": "hi", "max_tokens": 2}))
def test_fuzzed_completion_bodies_get_a_documented_answer(server: Server, raw: bytes) -> None:
    assert_documented(post(server, "/v1/completions", raw))


@settings(FUZZ, max_examples=60)
@given(
    raw=st.one_of(
        st.binary(max_size=64),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.integers(1, 5000).map(lambda d: b'{"prompt": "hi", "stop": ' + b"[" * d + b"]" * d + b"}"),
    )
)
def test_fuzzed_raw_bodies_get_a_documented_answer(server: Server, raw: bytes) -> None:
    assert_documented(post(server, "/v1/chat/completions", raw))


def assert_documented_in(answer: Answer, api: str) -> None:
    """The translated APIs: a 2xx whose body or stream ends as the API ends one, or a 4xx with an error
    body in the API's shape (OpenAI's for /v1/responses, Anthropic's for /v1/messages)."""
    assert answer.status < 500, (answer.status, answer.body[:300])
    if answer.status < 300:
        if not answer.headers["content-type"].startswith("text/event-stream"):
            assert answer.json()["type" if api == "messages" else "object"] in ("message", "response")
            return
        last = json.loads(answer.body.strip().split(b"\n\n")[-1].split(b"data: ", 1)[1])
        assert last["type"] in ("message_stop", "response.completed", "response.incomplete"), last
        return
    body = answer.json()
    if api == "messages":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        assert body["error"]["type"] in ("invalid_request_error", "not_found_error"), body
    else:
        assert set(body["error"]) == ERROR_KEYS and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] and "\n" not in body["error"]["message"]


texts = plausible(
    odd_text | st.lists(st.fixed_dictionaries({"type": plausible(st.just("text")), "text": odd_text}))
)
TOOL_BODY = st.fixed_dictionaries({"name": plausible(odd_text), "input_schema": json_values})
RESPONSES = {
    **{k: COMMON[k] for k in ("model", "stream", "temperature", "top_p", "seed")},
    "input": plausible(
        odd_text
        | st.lists(
            json_values
            | st.fixed_dictionaries(
                {
                    "role": plausible(st.sampled_from(["user", "assistant", "developer"])),
                    "content": texts,
                }
            ),
            max_size=3,
        )
    ),
    "instructions": plausible(odd_text),
    "max_output_tokens": plausible(st.integers(-1, 3)),
    "tools": plausible(st.lists(TOOL_BODY.map(lambda t: {"type": "function", **t}), max_size=2)),
    "tool_choice": plausible(st.sampled_from(["auto", "none", "required"])),
    "text": json_values,
    "include": plausible(st.lists(st.just("message.output_text.logprobs") | odd_text, max_size=2)),
}
BLOCKS = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": odd_text}),
    st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": odd_text, "name": odd_text, "input": json_values}
    ),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": odd_text, "content": texts}),
    json_values,
)
MESSAGES = {
    **{k: COMMON[k] for k in ("model", "stream", "top_p", "top_k")},
    "messages": plausible(
        st.lists(
            st.fixed_dictionaries(
                {
                    "role": plausible(st.sampled_from(["user", "assistant"])),
                    "content": plausible(odd_text | st.lists(BLOCKS, max_size=3)),
                }
            ),
            min_size=1,
            max_size=3,
        )
    ),
    "system": texts,
    "max_tokens": plausible(st.integers(-1, 3)),
    "temperature": plausible(st.floats(-0.5, 1.5)),
    "stop_sequences": plausible(st.lists(odd_text, max_size=3)),
    "tools": plausible(st.lists(TOOL_BODY, max_size=2)),
    "tool_choice": plausible(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["auto", "any", "tool", "none"])}, optional={"name": odd_text}
        )
    ),
}


@FUZZ
@given(raw=bodies(RESPONSES, {"input": "hi", "max_output_tokens": 2}))
def test_fuzzed_responses_bodies_get_a_documented_answer(server: Server, raw: bytes) -> None:
    assert_documented_in(post(server, "/v1/responses", raw), "responses")


@FUZZ
@given(raw=bodies(MESSAGES, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
def test_fuzzed_messages_bodies_get_a_documented_answer(server: Server, raw: bytes) -> None:
    assert_documented_in(post(server, "/v1/messages", raw), "messages")


TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
FRAMING = {"content-length", "transfer-encoding", "host", "connection", "upgrade", "expect", "te", "trailer"}
header_names = st.one_of(
    st.text(TCHAR, min_size=1, max_size=24),
    st.sampled_from(
        ["x-request-id", "content-type", "authorization", "x-forwarded-for", "x-forwarded-proto"]
    ),
).filter(lambda n: n.lower() not in FRAMING)
# visible ASCII, space and tab inside, and obs-text (0x80-0xff): what RFC 9110 lets a field value hold
header_values = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f") | st.just("\t"),
    max_size=300,
)


@settings(FUZZ, max_examples=100)
@given(headers=st.lists(st.tuples(header_names, header_values), max_size=6), stream=st.booleans())
def test_fuzzed_headers_get_a_documented_answer(
    server: Server, headers: list[tuple[str, str]], stream: bool
) -> None:
    raw = [(n.encode(), v.encode("latin-1")) for n, v in headers]
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": stream}
    answer = post(server, "/v1/chat/completions", body, raw)
    assert_documented(answer)
    given_ids = [v.strip(" \t") for n, v in headers if n.lower() == "x-request-id"]
    if given_ids and 0 < len(given_ids[-1]) <= 200:  # the last one given wins
        assert answer.headers["x-request-id"] == given_ids[-1]


# --- 1. what used to be a 500 ------------------------------------------------------------------------


def test_a_body_nested_100000_deep_is_a_400(server: Server) -> None:
    answer = post(server, "/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000)
    assert answer.status == 400 and answer.json()["error"]["code"] == "invalid_json"
    deep_field = b'{"prompt": "hi", "stop": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert post(server, "/v1/completions", deep_field).status == 400


def test_an_integer_too_long_to_read_is_a_400(server: Server) -> None:
    answer = post(server, "/v1/completions", b'{"prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}")
    assert answer.status == 400 and answer.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", rb'{"prompt": "a\ud800b"}', "prompt"),
        ("/v1/completions", rb'{"prompt": ["\udfff"]}', "prompt"),
        ("/v1/completions", rb'{"prompt": "ab", "stop": ["x", "\ud800"]}', "stop"),
        (
            "/v1/chat/completions",
            rb'{"messages": [{"role": "user", "content": "\ud800"}]}',
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            rb'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]}',
            "messages[0].content",
        ),
        ("/v1/responses", rb'{"input": "hi", "max_output_tokens": 2, "text": {"\ud800": null}}', "text"),
    ],
)
def test_a_lone_surrogate_in_text_is_a_400(server: Server, path: str, body: bytes, param: str) -> None:
    answer = post(server, path, body)
    assert answer.status == 400, answer.body
    assert answer.json()["error"]["param"] == param


@pytest.mark.parametrize("name", ["中文", "a\r\nb", "x: y", "é", " ", "\x00"])
def test_an_unknown_field_of_any_name_is_answered_and_counted_once(server: Server, name: str) -> None:
    before = metrics(server)
    answer = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 1, name: 1, "canary": 2})
    assert answer.status == 200
    assert answer.headers["x-lossless-ignored-params"] == "canary,+1 more"  # counted, never echoed
    after = metrics(server)
    key = 'lossless_requests_total{endpoint="/v1/completions",status="200"}'
    assert after[key] - before.get(key, 0) == 1


# --- 2. the ignored-fields header is bounded ---------------------------------------------------------


def test_five_thousand_unknown_fields_make_a_bounded_header(server: Server) -> None:
    names = [f"an_unknown_field_with_a_long_name_{i:05d}" for i in range(5000)]
    answer = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 1, **dict.fromkeys(names, 0)})
    assert answer.status == 200  # http.client read the head: its lines are at most 64 KiB
    header = answer.headers["x-lossless-ignored-params"]
    assert len(header.encode("latin-1")) <= 1024
    *listed, more = header.split(",")
    assert listed == names[: len(listed)] and len(listed) > 10
    assert more == f"+{5000 - len(listed)} more"


# --- 3. and 4. body size -----------------------------------------------------------------------------


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(server: Server) -> None:
    head = request_bytes("/v1/completions", b"")
    head = head.replace(b"content-length: 0", b"content-length: %d" % (10 * 2**20))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head)  # and not a byte of the body
        answer = read_answer(sock)
        assert sock.recv(1) == b""  # then it hangs up: the body is never read
    assert answer.status == 413 and answer.headers["connection"] == "close"
    assert answer.json()["error"] == {
        "message": f"the request body is larger than {MAX_BODY_BYTES} bytes",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_too_large",
    }


def text_prompt_chunks(size: int) -> Iterator[bytes]:
    """A completions body of ``size`` bytes of prompt text, in 64 KiB pieces (never whole in memory)."""
    yield b'{"prompt": "'
    piece = b"word " * 13_107
    for _ in range(size // len(piece)):
        yield piece
    yield b'"}'


def chunked(server: Server, path: str, pieces: Iterator[bytes]) -> Answer:
    """POST ``pieces`` without a Content-Length, stopping as soon as the server answers."""
    head = request_bytes(path, b"", [(b"transfer-encoding", b"chunked")], length=False)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for piece in pieces:
                if select.select([sock], [], [], 0)[0]:
                    break
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            else:
                sock.sendall(b"0\r\n\r\n")
        return read_answer(sock)


def test_a_streamed_body_over_the_limit_is_refused_as_it_arrives(server: Server) -> None:
    sent: list[int] = []
    total = 4 * MAX_BODY_BYTES

    def pieces() -> Iterator[bytes]:
        for piece in text_prompt_chunks(total):
            sent.append(len(piece))
            yield piece

    answer = chunked(server, "/v1/completions", pieces())
    assert answer.status == 413 and answer.json()["error"]["code"] == "request_too_large"
    assert sum(sent) < total - MAX_BODY_BYTES  # it stopped reading near the limit (the rest: buffers)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_refused_bodies_leave_memory_as_it_was(server: Server) -> None:
    start = rss_mb()
    # 10 MB of prompt text each, streamed: the server must not keep what it read
    statuses = [chunked(server, "/v1/completions", text_prompt_chunks(10 * 10**6)).status for _ in range(3)]
    assert rss_mb() - start < 50
    assert statuses == [413] * 3


def test_a_long_prompt_under_the_limit_does_not_stall_other_requests(server: Server) -> None:
    latencies: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            start = time.perf_counter()
            get(server, "/health")
            latencies.append(time.perf_counter() - start)
            time.sleep(0.01)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        time.sleep(0.1)
        answer = post(server, "/v1/completions", {"prompt": "word " * (600 * 2**10)})  # 3 MiB
    finally:
        done.set()
        poller.join()
    assert answer.status == 400 and answer.json()["error"]["code"] == "context_length_exceeded"
    assert max(latencies) < 1.0, max(latencies)  # tokenizing it whole held the GIL for ~2.5 s


# --- 5. deadlines ------------------------------------------------------------------------------------


def closed_within(sock: socket.socket, seconds: float) -> bytes:
    """Everything the server sends until it hangs up, which it must do within ``seconds``."""
    sock.settimeout(seconds)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_an_idle_connection_is_closed(impatient: Server) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port)) as sock:
        assert closed_within(sock, 5) == b""  # nothing was asked, so nothing is answered


def test_a_head_trickled_a_byte_at_a_time_gets_a_408(impatient: Server) -> None:
    before = metrics(impatient).get('lossless_requests_total{endpoint="other",status="408"}', 0)
    with socket.create_connection(("127.0.0.1", impatient.port)) as sock:
        start = time.monotonic()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for byte in request_bytes("/v1/completions", b"{}"):
                if select.select([sock], [], [], 0.05)[0] or time.monotonic() - start > 5:
                    break  # it answered (or hung up): stop sending
                sock.send(bytes([byte]))
        data = closed_within(sock, 5)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
    after = metrics(impatient)['lossless_requests_total{endpoint="other",status="408"}']
    assert after == before + 1


def test_a_kept_alive_connection_trickling_its_next_head_gets_a_408(impatient: Server) -> None:
    first = request_bytes("/health", b"", method="GET").replace(
        b"connection: close", b"connection: keep-alive"
    )
    with socket.create_connection(("127.0.0.1", impatient.port)) as sock:
        sock.sendall(first)
        assert read_answer(sock).status == 200
        sock.sendall(b"POST /v1/com")  # and no more
        data = closed_within(sock, 5)
    assert data.startswith(b"HTTP/1.1 408 ")


def test_a_body_shorter_than_declared_gets_a_408(impatient: Server) -> None:
    raw = request_bytes("/v1/completions", b'{"prompt": "hi"}').replace(
        b"content-length: 16", b"content-length: 100"
    )
    with socket.create_connection(("127.0.0.1", impatient.port)) as sock:
        sock.sendall(raw)
        sock.settimeout(5)
        answer = read_answer(sock)
        assert closed_within(sock, 5) == b""
    assert answer.status == 408 and answer.json()["error"]["code"] == "request_timeout"
    assert answer.headers["x-request-id"]


def test_a_head_over_h11s_size_limit_is_a_400_in_the_api_shape(server: Server) -> None:
    # h11 limits only a head still incomplete after a read (uvloop reads up to 256 KiB at once)
    answer = post(server, "/v1/completions", {"prompt": "hi"}, [(b"x-big", b"a" * 2**20)])
    assert answer.status == 400 and answer.json()["error"]["code"] == "invalid_http"


# --- 6. the queue and shutdown -----------------------------------------------------------------------


def open_request(server: Server, body: dict[str, Any], path: str = "/v1/completions") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(request_bytes(path, json.dumps(body).encode()))
    return sock


def start_stream(server: Server, body: dict[str, Any]) -> tuple[socket.socket, http.client.HTTPResponse]:
    """A stream whose head has come, so its job is on the engine (the head waits for that)."""
    sock = open_request(server, {**body, "stream": True})
    response = http.client.HTTPResponse(sock)
    response.begin()
    assert response.status == 200
    return sock, response


def wait_for(condition: Any, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


LONG = {"prompt": "Tell me a long story", "max_tokens": 4000, "temperature": 0}


def test_a_queued_client_that_leaves_frees_its_slot_at_once(endless: LoadedModel) -> None:
    with start_embedded(ServeOptions(max_queue=2), loaded=endless, limits=SHORT) as url:
        server = Server(int(url.split(":")[2].split("/")[0]))
        running, response = start_stream(server, LONG)
        waiting = [open_request(server, LONG), open_request(server, {**LONG, "stream": True})]
        wait_for(lambda: get(server, "/health")["queue_length"] == 2)
        for sock in waiting:
            sock.close()
        wait_for(lambda: get(server, "/health")["queue_length"] == 0, seconds=1)
        queued = [open_request(server, {**LONG, "max_tokens": 1}) for _ in range(2)]
        wait_for(lambda: get(server, "/health")["queue_length"] == 2)  # both in line: no 429
        response.close()
        running.close()
        for sock in queued:
            with sock:
                assert read_answer(sock).status == 200


def sse_events(body: bytes) -> list[Any]:
    return [e if e == "[DONE]" else json.loads(e) for e in re.findall(r"data: (.*)\n\n", body.decode())]


def test_shutdown_answers_the_queue_with_503_and_ends_the_running_stream(endless: LoadedModel) -> None:
    limits = RequestLimits(head_timeout_s=1.0, body_timeout_s=1.0, shutdown_grace_s=0.3)
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(start_embedded(ServeOptions(max_queue=2), loaded=endless, limits=limits))
        server = Server(int(url.split(":")[2].split("/")[0]))
        running, response = start_stream(server, LONG)
        waiting = [open_request(server, LONG), open_request(server, {**LONG, "stream": True})]
        wait_for(lambda: get(server, "/health")["queue_length"] == 2)
        stopper = threading.Thread(target=stack.close)  # shuts the server down
        stopper.start()
        answers = [read_answer(sock) for sock in waiting]
        stream = response.read()
        stopper.join(30)
        for sock in (running, *waiting):
            sock.close()
    for answer in answers:
        assert answer.status == 503
        assert answer.json()["error"]["code"] == "server_shutting_down"
    events = sse_events(stream)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == "server_shutting_down"
    assert all(e["choices"][0]["finish_reason"] is None for e in events[:-2])


# --- Nagle ------------------------------------------------------------------------------------------


def test_keep_alive_responses_leave_without_waiting_for_a_delayed_ack(tiny: LoadedModel) -> None:
    """`lossless serve` runs uvicorn on asyncio's loop (uvloop, in start_embedded, sets TCP_NODELAY
    itself): there each keep-alive response waited ~40 ms for the client's delayed ACK."""
    from lossless.server.main import bind, build_app, uvicorn_server

    sock = bind("127.0.0.1", 0)
    server = uvicorn_server(build_app(tiny, ServeOptions()))
    thread = threading.Thread(target=asyncio.run, args=(server.serve(sockets=[sock]),))
    thread.start()
    try:
        wait_for(lambda: server.started, seconds=30)
        conn = http.client.HTTPConnection("127.0.0.1", sock.getsockname()[1], timeout=10)
        latencies = []
        for _ in range(10):
            start = time.perf_counter()
            conn.request("GET", "/health")
            conn.getresponse().read()
            latencies.append(time.perf_counter() - start)
        conn.close()
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
    assert sorted(latencies)[5] < 0.02, latencies
