"""A RequestRecord of a plain successful streamed request, any field changed by keyword: the record that
tests of what reads records (analyze, advise, the workers' split) start from."""

from __future__ import annotations

from lossless.records import RequestRecord


def make(**kw: object) -> RequestRecord:
    base: dict[str, object] = dict(
        endpoint="a",
        request_index=0,
        attempt=0,
        prompt_id="p",
        prompt_class="short",
        api="chat",
        stream=True,
        warmup=False,
        load="c=1",
        scheduled_ns=0,
        sent_ns=10,
        headers_ns=20,
        event_ns=(30, 40),
        event_kinds="cu",
        event_tokens=(-1, 1),
        end_ns=50,
        status=200,
        error_kind=None,
        error=None,
        retried=False,
        n_in=3,
        n_out=1,
        n_out_source="usage",
        n_reasoning=None,
        finish_reason="stop",
        text="hé",
        reasoning_text="",
        tool_call_chars=0,
        server_headers=(("x-request-id", "r1"),),
    )
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]
