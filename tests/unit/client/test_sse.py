"""The SSE parser: line endings, comments, multi-line data, huge events, any split of the byte stream."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

from hypothesis import given, strategies as st

from lossless.client.sse import SSEParser, read_events

STREAM = (
    b": keep-alive comment\r\n"
    b"data: one\r\n\r\n"
    b"event: message\nid: 7\ndata: two-a\ndata: two-b\n\n"
    b"data:three\r\r"
    b"retry: 10\ndata\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [b"one", b"two-a\ntwo-b", b"three", b"", b"[DONE]"]


def _feed_all(parts: list[bytes]) -> list[bytes]:
    p = SSEParser()
    out = [e for part in parts for e in p.feed(part)]
    return out + p.close()


def test_crlf_cr_lf_comments_and_multiline_data() -> None:
    assert _feed_all([STREAM]) == EXPECTED


@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_split_of_the_stream_gives_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    parts = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    assert _feed_all(parts) == EXPECTED


def test_cr_split_from_its_lf_is_one_line_end() -> None:
    assert _feed_all([b"data: a\r", b"\n\r", b"\n"]) == [b"a"]


def test_event_larger_than_64_kb() -> None:
    big = b"x" * 300_000
    parts = [b"data: " + big[:70_000], big[70_000:], b"\n\n"]
    assert _feed_all(parts) == [big]


def test_last_event_without_blank_line_counts_at_close() -> None:
    assert _feed_all([b"data: a\n\ndata: b"]) == [b"a", b"b"]


class ScriptedBody:
    """A response that delivers these reads, and counts what was drained after the loop stopped."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads, self.drained = reads, False
        self.taken = 0

    async def chunks(self) -> AsyncIterator[bytes]:
        for r in self.reads:
            self.taken += 1
            yield r

    async def drain(self) -> None:
        self.drained = True


def _read(reads: list[bytes]) -> tuple[list[tuple[int, list[bytes]]], int, ScriptedBody]:
    body, ticks = ScriptedBody(reads), itertools.count(10)
    seen: list[tuple[int, list[bytes]]] = []

    def on_read(t: int, data: list[bytes]) -> bool:
        seen.append((t, data))
        return b"[DONE]" in data

    last = asyncio.run(read_events(body, on_read, ticks.__next__))
    return seen, last, body


def test_read_events_stamps_each_read_and_stops_at_done() -> None:
    seen, last, body = _read([b"data: a\n\ndata: b\n", b"\n", b"data: [DONE]\n\n", b"data: late\n\n"])
    assert seen == [(10, [b"a"]), (11, [b"b"]), (12, [b"[DONE]"])]
    assert last == 12 and body.drained and body.taken == 3  # what follows [DONE] is drained, not parsed


def test_read_events_flushes_a_stream_cut_without_done() -> None:
    seen, last, body = _read([b"data: a\n\n", b"data: b"])
    assert seen == [(10, [b"a"]), (11, []), (12, [b"b"])]  # the end of the stream is one more call
    assert last == 12 and not body.drained
