"""How bench's load is dealt to workers, how their clocks meet on one timeline, and when a load process
was itself the bottleneck (pure functions; the workers themselves are tested in
tests/integration/bench/test_bench_workers.py)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, strategies as st
from sample_records import make

from lossless.analyze.clients import saturation_warnings
from lossless.bench.config import BenchConfig
from lossless.client.call import CallOptions
from lossless.records import ClientLoad, on_one_timeline

CALL = CallOptions("chat", True, 16, None, None)


@given(st.integers(1, 300), st.integers(1, 40), st.integers(1, 500))
def test_shares_partition_the_concurrency_and_the_requests(concurrency: int, workers: int, n: int) -> None:
    shares = [BenchConfig((), CALL, worker=w, workers=workers) for w in range(workers)]
    assert sum(s.share(concurrency) for s in shares) == concurrency
    assert max(s.share(concurrency) for s in shares) - min(s.share(concurrency) for s in shares) <= 1
    for i in range(n):  # every request is exactly one worker's, closed loop and open
        assert sum(s.owns(i, concurrency) for s in shares) == 1
        assert sum(s.owns(i, None) for s in shares) == 1
    # a worker's requests follow its share of the concurrency: per full round of `concurrency` requests
    for s in shares:
        assert sum(s.owns(i, concurrency) for i in range(concurrency)) == s.share(concurrency)


def test_one_timeline_moves_records_between_clocks_and_keeps_their_own_times() -> None:
    a = make(wall_anchor_ns=1_000_000, clock_offset_ns=0, host="m1")
    b = make(
        host="m2",
        request_index=1,
        sent_ns=10,
        event_ns=(30, 40),
        end_ns=50,
        wall_anchor_ns=2_000_000,
        clock_offset_ns=-500,
    )
    moved = on_one_timeline([a, b])
    assert moved[0] == a  # the first record's clock is the timeline's
    assert moved[1].sent_ns == 10 + 999_500 and moved[1].end_ns == 50 + 999_500
    assert moved[1].event_ns == (30 + 999_500, 40 + 999_500)
    for old, new in zip((a, b), moved, strict=True):  # the same Unix time, and the same own durations
        assert (
            new.sent_ns + new.wall_anchor_ns + new.clock_offset_ns
            == old.sent_ns + old.wall_anchor_ns + old.clock_offset_ns
        )  # type: ignore[operator]
        assert new.end_ns - new.sent_ns == old.end_ns - old.sent_ns  # type: ignore[operator]
    one_clock = [a, replace(a, request_index=1)]
    assert on_one_timeline(one_clock) is one_clock
    one_machine = [a, replace(b, host="m1")]  # processes of one machine share its monotonic clock
    assert on_one_timeline(one_machine) is one_machine
    older = [make(), make(request_index=1)]  # no anchors: as they were
    assert on_one_timeline(older) is older


def test_a_saturated_load_process_is_named_with_the_workers_needed() -> None:
    calm = [ClientLoad(0, "h", "c=4", 0.5, 2.0), ClientLoad(1, "h", "c=4", 0.6, 2.0)]
    assert saturation_warnings(calm) == []
    hot = [ClientLoad(0, "h", "c=256", 9.6, 10.0), ClientLoad(1, "h", "c=256", 9.4, 10.0)]
    (warning,) = saturation_warnings(calm + hot)
    assert warning.startswith("c=256:") and "worker 0 on h 96%" in warning and "worker 1 on h 94%" in warning
    assert "--workers 4" in warning  # 1.9 cores of work at 50% each
    blip = [ClientLoad(0, "h", "c=1", 0.05, 0.05)]  # a level too short to tell load from start-up
    assert saturation_warnings(blip) == []
