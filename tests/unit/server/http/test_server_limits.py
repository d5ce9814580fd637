"""The server's bounds as pure functions and a scripted worker: the ignored-fields header, what a body
may hold, error messages that never echo a huge value, a queue slot freed the moment its client leaves,
and shutdown (503 for the queue, a cut for the running job after its grace)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from lossless.engine.engine import Delta
from lossless.engine.model.sampling import SamplingParams
from lossless.server.http.metrics import ExportedMetrics
from lossless.server.http.worker import QueueFull, ShuttingDown, Worker
from lossless.server.jobs import EngineJob, Event, Failed, Finished, Started
from lossless.server.openai.protocol import (
    IGNORED_HEADER_BYTES,
    MIN_JSON_VALUES,
    InvalidRequest,
    ignored_header,
    parse,
    parse_json,
)


def test_the_ignored_header_lists_safe_names_and_counts_the_rest() -> None:
    assert ignored_header([]) == ""
    assert ignored_header(["frequency_penalty", "x.y-z"]) == "frequency_penalty,x.y-z"
    assert ignored_header(["a\r\nb", "中文", "ok", "x" * 65, ""]) == "ok,+4 more"
    many = [f"field_{i:05d}" for i in range(5000)]
    header = ignored_header(many)
    *listed, more = header.split(",")
    assert len(header) <= IGNORED_HEADER_BYTES and header.isascii()
    assert listed == many[: len(listed)] and more == f"+{5000 - len(listed)} more"
    assert len(header) > IGNORED_HEADER_BYTES - 30  # as many as fit, not a few


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"seed": ' + b"9" * 5000 + b"}", "too many digits"),
        (b"[" + b"0," * (MIN_JSON_VALUES + 1) + b"0]", "more than"),
        (b"\xff{}", "not valid JSON"),
        (b"[]", "must be a JSON object"),
    ],
)
def test_bodies_no_request_needs_are_400s(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as refused:
        parse_json(raw)
    assert refused.value.status == 400 and refused.value.code == "invalid_json"


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "hi", "temperature": "x" * 10**6},
        {"prompt": "hi", "seed": 10**4000},
        {"prompt": "hi", "echo": [[[[[]]]]] * 1000},
        {"prompt": "hi", "model": "m" * 10**6},
    ],
)
def test_error_messages_never_echo_a_huge_value(body: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse("completions", body, "tiny", frozenset())
    assert len(refused.value.message) < 200


def test_lone_surrogates_are_refused_where_text_goes_to_the_tokenizer() -> None:
    for body, param in [
        ({"prompt": "a\ud800"}, "prompt"),
        ({"prompt": "a", "stop": ["\udfff"]}, "stop"),
    ]:
        with pytest.raises(InvalidRequest) as refused:
            parse("completions", body, "tiny", frozenset())
        assert refused.value.param == param
    chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}]}
    with pytest.raises(InvalidRequest, match="lone surrogate"):
        parse("chat", chat, "tiny", frozenset())


# --- the worker --------------------------------------------------------------------------------------


class EndlessEngine:
    """One delta every millisecond until cancelled; ``started`` is set once it runs."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def generate(self, ids: list[int], params: SamplingParams, cancel: threading.Event) -> Iterator[Delta]:
        self.started.set()
        while not cancel.is_set():
            time.sleep(0.001)
            yield Delta("x", (1,))
        yield Delta("", (), finish_reason="cancelled")


async def drain(job: EngineJob) -> list[Event]:
    events: list[Event] = []
    while not events or not isinstance(events[-1], Finished | Failed):
        events.append(await asyncio.wait_for(job.events.get(), 5))
    return events


def make(max_queue: int) -> tuple[Worker, EndlessEngine, asyncio.AbstractEventLoop]:
    engine = EndlessEngine()
    worker = Worker(engine, ExportedMetrics(), max_queue)  # type: ignore[arg-type]
    return worker, engine, asyncio.get_running_loop()


def test_a_withdrawn_job_frees_its_slot_and_ends_at_once() -> None:
    async def main() -> None:
        worker, engine, loop = make(max_queue=1)
        running, waiting = EngineJob([1], SamplingParams(), loop), EngineJob([2], SamplingParams(), loop)
        worker.start()
        try:
            worker.submit(running)
            await asyncio.to_thread(engine.started.wait, 5)
            worker.submit(waiting)
            with pytest.raises(QueueFull):
                worker.submit(EngineJob([3], SamplingParams(), loop))
            worker.withdraw(waiting)
            assert worker.queue_length() == 0
            assert await drain(waiting) == [Finished("cancelled", 0, None, 0.0)]
            worker.submit(EngineJob([4], SamplingParams(), loop))  # the freed slot takes the next one
            assert worker.metrics.cancelled.value() == 1
        finally:
            worker.stop()

    asyncio.run(main())


def test_shutdown_fails_the_queue_now_and_cuts_the_running_job_after_its_grace() -> None:
    async def main() -> None:
        worker, engine, loop = make(max_queue=4)
        running, waiting = EngineJob([1], SamplingParams(), loop), EngineJob([2], SamplingParams(), loop)
        worker.start()
        try:
            worker.submit(running)
            await asyncio.to_thread(engine.started.wait, 5)
            worker.submit(waiting)
            start = time.perf_counter()
            worker.begin_shutdown(0.2)
            assert await drain(waiting) == [Failed("the server is shutting down", status=503)]
            with pytest.raises(ShuttingDown):
                worker.submit(EngineJob([3], SamplingParams(), loop))
            events = await drain(running)
            elapsed = time.perf_counter() - start
        finally:
            worker.stop()
        assert isinstance(events[0], Started) and events[-1] == Failed("the server is shutting down", 503)
        assert 0.2 <= elapsed < 2
        assert worker.metrics.cancelled.value() == 0  # nobody left: the server cut it

    asyncio.run(main())
