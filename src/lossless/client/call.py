"""One call to an endpoint -> one RequestRecord, with a timestamp for every SSE event.

Every event of a network read gets the time that read returned: that is when the bytes reached us.
A failure of any kind ends as a record with ``error_kind`` set; only cancellation escapes, as
``CallCancelled`` carrying the record of what had arrived.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lossless.client.answer import Answer, MalformedStream, StreamError
from lossless.client.api_names import PATHS
from lossless.client.endpoints import Endpoint
from lossless.client.http import Connection, Session, TransportError
from lossless.client.openai import cached_tokens, error_of, reasoning_tokens, request_body
from lossless.client.prompt import Prompt
from lossless.client.sse import read_events
from lossless.records import Failure, RequestRecord, http_failure


@dataclass(frozen=True)
class CallOptions:
    api: str  # one of ``api_names.APIS``
    stream: bool
    max_tokens: int
    first_token_timeout: float | None  # seconds from sending to the first token event
    total_timeout: float | None  # seconds from sending to the end of the stream


@dataclass(frozen=True)
class Job:
    endpoint: Endpoint
    prompt: Prompt
    request_index: int
    load: str  # load level label
    warmup: bool
    scheduled_ns: int
    session: str | None = None  # a conversation's turn: which conversation
    turn: int | None = None  # ... and which turn, from 1
    cooldown: bool = False  # sent after a level's measured requests, to keep the load up (unmeasured)
    probe: bool = False  # a light request beside the load (bench --probe-rate), reported apart


class CallCancelled(asyncio.CancelledError):
    def __init__(self, record: RequestRecord) -> None:
        super().__init__("cancelled")
        self.record = record


async def call(
    session: Session,
    job: Job,
    attempt: int,
    opts: CallOptions,
    clock: Callable[[], int] = time.perf_counter_ns,
    first_token: asyncio.Event | None = None,
) -> RequestRecord:
    if job.endpoint.stream is not None:  # bench --stream both: each endpoint twice, streamed and whole
        opts = replace(opts, stream=job.endpoint.stream)
    got = _Got(Answer(opts.api, first_token))
    body = json.dumps(request_body(job.endpoint, job.prompt, opts.api, opts.stream, opts.max_tokens)).encode()
    kind: str | None = None
    message: str | None = None
    sent, start = clock(), asyncio.get_running_loop().time()
    first, total = opts.first_token_timeout, opts.total_timeout
    limit = min((t for t in (first, total) if t is not None), default=None)
    try:
        async with asyncio.timeout_at(None if limit is None else start + limit) as deadline:
            await _exchange(session, PATHS[opts.api], body, got, opts, clock, deadline, start)
    except TimeoutError:
        kind = (
            Failure.TIMEOUT_TOTAL if got.answer.first_token or first is None else Failure.TIMEOUT_FIRST_TOKEN
        )
        message = (
            f"no token within {first} s"
            if kind == Failure.TIMEOUT_FIRST_TOKEN
            else f"not done within {total} s"
        )
    except TransportError as exc:
        kind, message = exc.kind, str(exc)
        got.connection = exc.connection
    except MalformedStream as exc:
        kind, message = Failure.MALFORMED_STREAM, session.redact(str(exc))
    except StreamError as exc:
        kind, message = Failure.STREAM_ERROR, session.redact(str(exc))
    except asyncio.CancelledError as exc:
        record = _record(job, attempt, opts, sent, clock(), got, Failure.CANCELLED, "run interrupted")
        raise CallCancelled(record) from exc
    except Exception as exc:  # whatever one answer does, the run and the other records go on
        kind, message = Failure.CLIENT_ERROR, session.redact(f"{type(exc).__name__}: {exc}")[:300]
    if kind is None and got.status is not None and got.status != 200:
        kind = http_failure(got.status)
        message = session.redact(error_of(got.error_body)[1][:300]) or f"HTTP {got.status}"
        if 300 <= got.status < 400:  # see Session.post
            message = f"HTTP {got.status}: a redirect, not followed (it would take the key's headers along)"
    end = got.answer.end_ns if kind is None and got.answer.end_ns is not None else clock()
    return _record(job, attempt, opts, sent, end, got, kind, message)


@dataclass
class _Got:
    """What came back: the response's status and headers, and its answer (or its error body)."""

    answer: Answer
    headers_ns: int | None = None
    status: int | None = None
    server_headers: tuple[tuple[str, str], ...] = ()
    error_body: str = ""
    connection: Connection = field(default_factory=Connection)


async def _exchange(
    session: Session,
    path: str,
    body: bytes,
    got: _Got,
    opts: CallOptions,
    clock: Callable[[], int],
    deadline: asyncio.Timeout,
    start: float,
) -> None:
    async with session.post(path, body) as resp:
        got.headers_ns = clock()
        got.status = resp.status
        got.connection = resp.connection
        got.server_headers = resp.headers
        answer = got.answer
        if resp.status != 200:
            got.error_body = (await resp.read(2000)).decode("utf-8", "replace").replace("\n", " ")
            return
        if not opts.stream:
            raw = await resp.whole()
            answer.whole(raw, clock())
            return
        # After the first token only the total limit applies.
        relax = opts.first_token_timeout is not None

        def on_read(t: int, payloads: list[bytes]) -> bool:
            nonlocal relax
            done = answer.read(t, payloads)
            if relax and answer.first_token:
                relax = False
                total = opts.total_timeout
                deadline.reschedule(None if total is None else start + total)
            return done

        answer.end_ns = await read_events(resp, on_read, clock)
        if not answer.finished():
            raise MalformedStream("stream ended without [DONE] or a finish_reason")


def unfinished(
    job: Job, attempt: int, opts: CallOptions, sent: int, kind: str, message: str
) -> RequestRecord:
    """The record an attempt sent at ``sent`` leaves when nothing of it comes back (its process was lost):
    no answer, ended when it was sent; whoever learns of the loss sets the end."""
    return _record(job, attempt, opts, sent, sent, _Got(Answer(opts.api)), kind, message)


def _record(
    job: Job,
    attempt: int,
    opts: CallOptions,
    sent: int,
    end: int,
    got: _Got,
    kind: str | None,
    message: str | None,
) -> RequestRecord:
    answer = got.answer
    usage = answer.usage
    n_out = usage.get("completion_tokens") if usage else None
    n_in = usage.get("prompt_tokens") if usage else None
    return RequestRecord(
        endpoint=job.endpoint.name,
        request_index=job.request_index,
        attempt=attempt,
        prompt_id=job.prompt.id,
        prompt_class=job.prompt.cls,
        api=opts.api,
        stream=opts.stream,
        warmup=job.warmup,
        cooldown=job.cooldown,
        probe=job.probe,
        load=job.load,
        scheduled_ns=job.scheduled_ns,
        sent_ns=sent,
        headers_ns=got.headers_ns,
        event_ns=tuple(answer.event_ns),
        event_kinds="".join(answer.kinds),
        event_tokens=tuple(answer.tokens),
        end_ns=end,
        status=got.status,
        error_kind=kind,
        error=message,
        retried=False,
        n_in=n_in if isinstance(n_in, int) else None,
        n_out=n_out if isinstance(n_out, int) else None,
        n_out_source="usage" if isinstance(n_out, int) else "none",
        n_reasoning=reasoning_tokens(usage),
        n_cached=cached_tokens(usage),
        asked_in=job.prompt.input_tokens,
        asked_out=job.prompt.output_tokens,
        session=job.session,
        turn=job.turn,
        finish_reason=answer.finish_reason(),
        text="" if got.status != 200 else answer.text(),
        reasoning_text=answer.reasoning(),
        tool_call_chars=answer.tool_chars,
        server_headers=got.server_headers,
        server_timings=tuple(sorted(answer.timings.items())),
        served_model=answer.model,
        system_fingerprint=answer.fingerprint,
        connection=got.connection.kind,
        dns_ns=got.connection.dns_ns,
        connect_ns=got.connection.connect_ns,
        tls_ns=got.connection.tls_ns,
    )
