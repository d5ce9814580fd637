"""The SSE parser: line endings, comments, multi-line data, huge events, any split of the byte stream."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from lossless.client.sse import SSEParser

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
