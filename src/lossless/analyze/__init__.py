"""Records -> numbers: pure, no printing. Metric definitions are DESIGN.md's, to the letter.

timing.py        ``timing()``: one record -> its times (TTFB, TTFT, TPOT, E2E, gaps); --slo objectives
metrics.py       ``METRICS``: the one table of metrics: names, units, digits, which statistics each shows
distribution.py  ``describe()``: values -> ``Distribution`` (percentiles, bootstrap CIs)
server_side.py   ``server_times()``, ``spec_stats()``: the server's own word (headers, draft counters, who)
clients.py       ``saturation_warnings()``: was the load generator itself the bottleneck?
saturation.py    ``judge_saturation()``: can the server keep up with a load level? (tested, three ways)
repeats.py       ``repeats()``, ``ratio_over_runs()``: bench --repeat: each statistic's between-run CI
probes.py        ``probe_stats()``: probe requests beside a load against the same on the idle server
pareto.py        ``front()``: the sweep's points no other beats on throughput and per-user figure both
ratios.py        ``compare_runs()``, ``drift()``: endpoint against endpoint, run against run: ratios with CIs
failed.py        ``total_failures()``: endpoints whose every request failed, with the dominant cause
paired.py        ``paired_accuracy()``: two endpoints graded on the same items (McNemar, TOST)
summarize.py     ``summarize()``: records -> ``Summary``
summary.py       ``Summary`` and its parts, frozen and typed; as_dict / from_dict at the JSON edge
shapes.py        reading summary.json back field by field, each helper naming the field it refuses
"""

from lossless.analyze.distribution import Distribution, describe
from lossless.analyze.metrics import METRIC, METRICS, STATS, Metric
from lossless.analyze.ratios import (
    ClassComparison,
    Comparison,
    Drift,
    RunComparison,
    compare_classes,
    compare_runs,
    drift,
)
from lossless.analyze.server_side import served_by, server_times, spec_stats
from lossless.analyze.summarize import summarize
from lossless.analyze.summary import EndpointStats, GroupStats, RunInfo, Summary
from lossless.analyze.timing import Timing, parse_slo, timing

__all__ = [
    "METRIC",
    "METRICS",
    "STATS",
    "ClassComparison",
    "Comparison",
    "Distribution",
    "Drift",
    "EndpointStats",
    "GroupStats",
    "Metric",
    "RunComparison",
    "RunInfo",
    "Summary",
    "Timing",
    "compare_classes",
    "compare_runs",
    "describe",
    "drift",
    "parse_slo",
    "served_by",
    "server_times",
    "spec_stats",
    "summarize",
    "timing",
]
