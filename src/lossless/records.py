"""One flat, frozen record per request attempt: its JSON line, and the checks of one read back.

Times are raw ``time.perf_counter_ns`` readings of one monotonic clock; everything derived (TTFT, TPOT,
stalls, goodput) is computed in ``analyze`` and never stored here. Errors are data: a failed attempt is a
record with ``error_kind`` set, never an exception and never dropped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields, replace
from enum import StrEnum
from typing import Any

# Per-event kinds in ``RequestRecord.event_kinds`` (one character per SSE event):
CONTENT = "c"  # answer text
REASONING = "r"  # reasoning_content / reasoning text
TOOL = "t"  # tool-call deltas
USAGE = "u"  # usage-only chunk (no text): never a token time
EMPTY = "n"  # role-only, finish-only or otherwise empty chunk
TOKEN_KINDS = frozenset(CONTENT + REASONING + TOOL)
# Response headers that name the software or machine that answered ("was it the same deployment?"),
# kept in ``server_headers``. A list of names, not a pattern: anything else a response carries (cookies,
# account ids) is never kept.
IDENTITY_HEADERS = frozenset(
    {"server", "via", "x-served-by", "x-powered-by", "x-server", "x-backend", "x-model", "openai-model"}
)


@dataclass(frozen=True)
class RequestRecord:
    endpoint: str  # endpoint name
    request_index: int  # position in the run's schedule; shared by the attempts of one request
    attempt: int  # 0 for the first try; retries count up
    prompt_id: str  # workload prompt id (same id on every endpoint)
    prompt_class: str  # suite label, e.g. "short", "long", "len-1k"
    api: str  # "chat", "completions", "responses" or "messages" (client.api_names)
    stream: bool
    warmup: bool  # excluded from results
    load: str  # load level label, e.g. "c=4" or "rate=2.0"
    scheduled_ns: int  # when the arrival process meant to send it
    sent_ns: int  # just before the request was written
    headers_ns: int | None  # response headers received
    event_ns: tuple[int, ...]  # arrival time of every SSE event (non-streamed: one, at body end)
    event_kinds: str  # one character per event, see CONTENT..EMPTY
    event_tokens: tuple[int, ...]  # cumulative completion_tokens per event when the server says, else -1
    end_ns: int | None  # stream closed (or the attempt failed)
    status: int | None  # HTTP status
    error_kind: str | None  # None = success; a ``Failure``, or "http_<status>"
    error: str | None  # one-line message, never containing a key
    retried: bool  # this attempt failed and another followed
    n_in: int | None  # usage.prompt_tokens
    n_out: int | None  # output tokens
    n_out_source: str  # "usage", "tokenizer:NAME" (whole text, counted after the run) or "none"
    n_reasoning: int | None  # usage.completion_tokens_details.reasoning_tokens
    finish_reason: str | None
    text: str  # answer text
    reasoning_text: str
    tool_call_chars: int  # characters of tool-call names and arguments
    server_headers: tuple[tuple[str, str], ...]  # raw timing, id and identity headers, parsed in analyze
    served_model: str | None = None  # the response's "model" (what the server says it ran)
    # the answer's own timing object, as it gave it (llama.cpp's server: "timings", its prompt and decode
    # time); parsed in analyze beside the timing headers
    server_timings: tuple[tuple[str, float], ...] = ()
    system_fingerprint: str | None = None  # the response's system_fingerprint (its backend configuration)
    n_cached: int | None = None  # prompt tokens served from the server's prefix cache, when it says
    asked_in: int | None = None  # token-exact workloads: the prompt tokens asked for (compare n_in)
    asked_out: int | None = None  # ... and the output tokens (compare n_out)
    # conversations: the session (one conversation; request_index is the session's) and the turn, from 1
    session: str | None = None
    turn: int | None = None
    # Where and on which clock it was measured. ``*_ns`` + wall_anchor_ns = Unix time (ns) on the measuring
    # process's wall clock; + clock_offset_ns = on the driver's (bench --workers / --ray), measured by
    # round trips, to within clock_offset_err_ns. Records of older versions carry none of these.
    worker: int = 0  # which load-generating process (0 in a one-process run)
    host: str | None = None  # the machine it ran on
    wall_anchor_ns: int | None = None
    clock_offset_ns: int = 0
    clock_offset_err_ns: int = 0
    # bench's windows and side traffic: a cool-down request keeps the load up while the measured ones end;
    # a probe is a light request beside the load (what a lone user meets); neither is measured
    cooldown: bool = False
    probe: bool = False
    repeat: int = 0  # which of bench --repeat's whole runs, from 0
    # the connection: "new" or "reused" (None: not known); a new one's DNS lookup (None: cached), TCP
    # connect and TLS handshake (None: plain HTTP), as durations in ns (aiohttp's trace hooks)
    connection: str | None = None
    dns_ns: int | None = None
    connect_ns: int | None = None
    tls_ns: int | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def measured(self) -> bool:
        """Counted in the statistics: neither warm-up, cool-down nor a probe."""
        return not (self.warmup or self.cooldown or self.probe)


class Failure(StrEnum):
    """Why an attempt failed: ``RequestRecord.error_kind`` (and an agent turn's, and verify's counts). An
    HTTP error status is ``http_<status>`` (``http_failure``), not a member: any status may come back."""

    CONNECTION = "connection"  # no connection, or it broke before the answer was whole
    TIMEOUT_CONNECT = "timeout_connect"  # no connection within the connect time-out
    TIMEOUT_FIRST_TOKEN = "timeout_first_token"  # no token within bench's --timeout-first-token
    TIMEOUT_TOTAL = "timeout_total"  # not done within bench's --timeout-total
    TIMEOUT = "timeout"  # one limit for the whole answer (a task's model call, a verify request)
    MALFORMED_STREAM = "malformed_stream"  # not an answer: an event or body of the wrong shape, a cut stream
    STREAM_ERROR = "stream_error"  # the server sent an error event mid-stream
    CLIENT_ERROR = "client_error"  # our side failed on this answer (a bug; the run goes on)
    CANCELLED = "cancelled"  # the run ended (Ctrl-C, SIGTERM) while it was in flight
    ABANDONED = "abandoned"  # hedging or failover: another attempt of the same request answered first
    WORKER_LOST = "worker_lost"  # the load-generating process that sent it died


def http_failure(status: int) -> str:
    return f"http_{status}"


def retryable(kind: str | None) -> bool:
    """Whether an attempt that failed so is worth another try (``bench --retries``, a task's model call),
    or a move to another endpoint (``advise``'s failover): everything but success, the run's own end, and
    a request the endpoint refused as wrong (400, 401, 404 ...; 408 and 429 are the endpoint's state, not
    the request's)."""
    if kind is None or kind == Failure.CANCELLED:
        return False
    if kind.startswith("http_4"):
        return kind in (http_failure(429), http_failure(408))
    return True


@dataclass(frozen=True)
class ClientLoad:
    """How busy one load-generating process was during one load level: the CPU time (user + system) of
    the thread running its event loop, over the level's wall time. Near 1.0 it was saturated, and its
    timestamps came late."""

    worker: int
    host: str
    load: str  # load level label
    cpu_s: float
    wall_s: float

    @property
    def busy(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


_FIELDS = tuple(f.name for f in fields(RequestRecord))
_DEFAULTED = frozenset(f.name for f in fields(RequestRecord) if f.default is not MISSING)
_TUPLES = ("event_ns", "event_tokens")


def to_json(record: RequestRecord) -> str:
    return json.dumps(asdict(record), ensure_ascii=False, separators=(",", ":"))


def from_json(line: str) -> RequestRecord:
    raw: dict[str, Any] = json.loads(line)
    # fields added later have defaults: records written by an older version still read
    values = {name: raw[name] for name in _FIELDS if name in raw or name not in _DEFAULTED}
    for name in _TUPLES:
        values[name] = tuple(values[name])
    values["server_headers"] = tuple((k, v) for k, v in values["server_headers"])
    if "server_timings" in values:
        values["server_timings"] = tuple((k, v) for k, v in values["server_timings"])
    return RequestRecord(**values)


def on_one_timeline(records: list[RequestRecord]) -> list[RequestRecord]:
    """The records with every ``*_ns`` time moved onto one clock: the driver's wall clock, relative to the
    first record's, so that records measured by several processes or machines compare across records
    (spans, arrivals, plots). Times within a record, and so every per-request metric, do not change.
    Records of one machine, or without a wall anchor (older versions), are returned as they are: the
    monotonic clock they were read from is the machine's own, shared by its processes, and more exact
    than any offset measured between them."""
    if not records or any(r.wall_anchor_ns is None for r in records) or len({r.host for r in records}) == 1:
        return records

    def shift(r: RequestRecord) -> int:
        assert r.wall_anchor_ns is not None
        return r.wall_anchor_ns + r.clock_offset_ns

    base = shift(records[0])
    if all(shift(r) == base for r in records):
        return records
    return [_moved(r, shift(r) - base) for r in records]


def _moved(r: RequestRecord, by: int) -> RequestRecord:
    if by == 0:
        return r
    return replace(
        r,
        scheduled_ns=r.scheduled_ns + by,
        sent_ns=r.sent_ns + by,
        headers_ns=None if r.headers_ns is None else r.headers_ns + by,
        event_ns=tuple(t + by for t in r.event_ns),
        end_ns=None if r.end_ns is None else r.end_ns + by,
        wall_anchor_ns=None if r.wall_anchor_ns is None else r.wall_anchor_ns - by,
    )


# --- a record read back (records.jsonl is the user's file once written) ------------------------------

_INT64 = 1 << 63  # the records' times are perf_counter_ns readings; a larger int is no time


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -_INT64 <= v < _INT64


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


# RequestRecord's field annotations (strings: records.py uses postponed annotations) -> a test of a value
_BY_ANNOTATION: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "str | None": lambda v: v is None or isinstance(v, str),
    "int": _int,
    "int | None": lambda v: v is None or _int(v),
    "bool": lambda v: isinstance(v, bool),
    "tuple[int, ...]": lambda v: isinstance(v, tuple) and all(_int(x) for x in v),
    "tuple[tuple[str, str], ...]": lambda v: (
        isinstance(v, tuple)
        and all(isinstance(p, tuple) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in v)
    ),
    "tuple[tuple[str, float], ...]": lambda v: (
        isinstance(v, tuple)
        and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and _number(p[1]) for p in v)
    ),
}
# a field whose annotation is not above goes unchecked; tests/unit/cli/test_cli_bad_input.py says when one is
RECORD_FIELD_CHECKS = {f.name: _BY_ANNOTATION.get(str(f.type)) for f in fields(RequestRecord)}


def record_problem(record: RequestRecord) -> str | None:
    """What makes a record read back from a file unusable by ``analyze``, or None."""
    for name, check in RECORD_FIELD_CHECKS.items():
        if check is not None and not check(getattr(record, name)):
            return f"field {name!r} holds {getattr(record, name)!r:.60}"
    if not len(record.event_ns) == len(record.event_kinds) == len(record.event_tokens):
        return "event_ns, event_kinds and event_tokens differ in length"
    if record.ok and record.end_ns is None:
        return "a successful request without end_ns"
    return None
