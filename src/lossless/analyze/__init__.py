"""Records -> numbers: pure, no printing. Metric definitions are DESIGN.md's, to the letter.

timing.py     one record -> its times (TTFB, TTFT, TPOT, E2E, gaps); --slo objectives
metrics.py    the one table of metrics: names, units, digits, which statistics each report shows
stats.py      values -> Distribution (percentiles, bootstrap CIs)
server.py     the server's own word: timing headers, draft counters, who served
compare.py    endpoint against endpoint, run against run, first half against second: ratios with CIs
summarize.py  records -> Summary
result.py     Summary and its parts, frozen and typed; as_dict / from_dict at the JSON edge
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
