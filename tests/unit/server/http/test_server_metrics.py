"""The Prometheus text: parseable lines, cumulative buckets, speculative figures derived right."""

from __future__ import annotations

import re

import pytest

from lossless.server.http.metrics import ExportedMetrics, Histogram

SAMPLE = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (-?[0-9.e+-]+|\+Inf)$')


def samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ ", line), line
            continue
        assert SAMPLE.match(line), line
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def test_every_line_is_valid_exposition_format() -> None:
    m = ExportedMetrics()
    m.queue_length = lambda: 3
    m.requests.inc(1, "/v1/chat/completions", "200")
    m.requests.inc(1, "/v1/chat/completions", "400")
    m.prompt_tokens.inc(12)
    m.ttft.observe(0.02)
    s = samples(m.render())
    assert s['lossless_requests_total{endpoint="/v1/chat/completions",status="200"}'] == 1
    assert s["lossless_prompt_tokens_total"] == 12
    assert s["lossless_generation_tokens_total"] == 0  # unlabelled counters show 0 before any event
    assert s["lossless_queue_length"] == 3
    assert s["lossless_time_to_first_token_seconds_count"] == 1


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram("h_seconds", "help", (0.1, 1.0))
    h.observe(0.05)
    h.observe(0.5, count=3)
    h.observe(7.0)
    s = samples("\n".join(h.render()))
    assert s['h_seconds_bucket{le="0.1"}'] == 1
    assert s['h_seconds_bucket{le="1"}'] == 4
    assert s['h_seconds_bucket{le="+Inf"}'] == 5 == s["h_seconds_count"]
    assert s["h_seconds_sum"] == pytest.approx(0.05 + 1.5 + 7.0)


def test_speculative_figures_from_final_delta_stats() -> None:
    m = ExportedMetrics()
    # two requests; accept_counts[i] = steps that accepted exactly i drafted tokens
    m.record_spec_stats({"drafted": 12, "accepted": 7, "accept_counts": [1, 1, 1, 1]})  # 4 steps, 0+1+2+3
    m.record_spec_stats({"drafted": 4, "accepted": 1, "accept_counts": [0, 1]})
    s = samples(m.render())
    assert s["lossless_spec_drafted_tokens_total"] == 16
    assert s["lossless_spec_accepted_tokens_total"] == 8
    assert s['lossless_spec_verify_steps_total{accepted="1"}'] == 2
    assert s["lossless_spec_acceptance_rate"] == pytest.approx(0.5)
    assert s["lossless_spec_mean_accepted_length"] == pytest.approx(7 / 5)
    assert s['lossless_spec_acceptance_by_position{position="1"}'] == pytest.approx(4 / 5)
    assert s['lossless_spec_acceptance_by_position{position="3"}'] == pytest.approx(1 / 5)


def test_plain_decoding_leaves_speculative_gauges_empty() -> None:
    m = ExportedMetrics()
    m.record_spec_stats({})
    s = samples(m.render())
    assert s["lossless_spec_drafted_tokens_total"] == 0
    assert not any(k.startswith("lossless_spec_acceptance_rate") for k in s)
