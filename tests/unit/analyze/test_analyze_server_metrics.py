"""A server's /metrics folded into bench's summary whatever it names them: every counter's change over the
run, every histogram's mean (its own view of its latencies), nothing from gauges or buckets."""

from __future__ import annotations

import json

from lossless.analyze.server_side import ServerMetrics, metrics_moved
from lossless.client.prometheus import parse_all

BEFORE = """# HELP vllm:prompt_tokens Prefill tokens.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="m",engine="0"} 100.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.3
vllm:time_to_first_token_seconds_count{model_name="m"} 3.0
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{model_name="m"} 0.0
"""
AFTER = (
    BEFORE.replace("100.0", "160.0")
    .replace('_sum{model_name="m"} 0.3', '_sum{model_name="m"} 0.7')
    .replace('_count{model_name="m"} 3.0', '_count{model_name="m"} 5.0')
    .replace('running{model_name="m"} 1.0', 'running{model_name="m"} 4.0')
)


def test_counters_that_moved_and_histogram_means_over_the_run() -> None:
    before, after = parse_all(BEFORE), parse_all(AFTER)
    assert "vllm:num_requests_running" not in after  # a gauge says nothing about the run as a whole
    assert not any(name.endswith("_bucket") for name in after)
    moved = metrics_moved(before, after)
    assert moved is not None
    assert moved.counters == {"vllm:prompt_tokens_total": 60.0}  # preemptions did not move
    assert moved.means == {"vllm:time_to_first_token_seconds": (0.7 - 0.3) / 2}
    assert metrics_moved(before, before) is None


def test_they_survive_summary_json() -> None:
    moved = metrics_moved(parse_all(BEFORE), parse_all(AFTER))
    assert moved is not None
    assert ServerMetrics.from_dict(json.loads(json.dumps(moved.as_dict()))) == moved
