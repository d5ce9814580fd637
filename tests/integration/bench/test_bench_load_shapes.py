"""Windows, ramps, a cap on an open loop, the saturation stop, repeated runs and probes, each against a
scripted server on 127.0.0.1 whose timing the test controls."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.analyze import timing
from lossless.cli import main
from lossless.records import RequestRecord
from lossless.rundir import read_jsonl

STEPS = {"steps": [[0.01, "content", 1]] * 6}


def _bench(server: ScriptedServer, out: Path, *args: str, urls: tuple[str, ...] = ()) -> dict[str, Any]:
    given = urls or (server.url,)
    result = CliRunner().invoke(
        main, ["bench", *given, "--model", "m", "--out", str(out), "--overwrite", *args]
    )
    assert result.exit_code == 0, result.output
    return dict(json.loads((out / "summary.json").read_text()))


def _records(out: Path) -> list[RequestRecord]:
    return list(read_jsonl(out / "records.jsonl"))


def test_warmup_and_cooldown_by_count_are_kept_marked_and_left_out(
    server: ScriptedServer, tmp_path: Path
) -> None:
    server.script(STEPS)
    summary = _bench(
        server, tmp_path, "--concurrency", "2", "--requests", "10", "--warmup", "3", "--cooldown", "4"
    )
    records = _records(tmp_path)
    assert [r.warmup for r in records].count(True) == 3 and [r.cooldown for r in records].count(True) == 4
    measured = sorted(r.request_index for r in records if r.measured)
    assert measured == list(range(3, 13))  # the middle ten, by index; cool-down came after them
    (entry,) = summary["endpoints"]
    assert entry["requests"]["ok"] == 10 and entry["e2e_ms"]["n"] == 10
    # throughput: every token that arrived inside the measured window, cool-down's included
    start = min(r.sent_ns for r in records if r.measured)
    end = max(r.end_ns or 0 for r in records if r.measured)
    tokens = [[t for t, k in zip(r.event_ns, r.event_kinds, strict=True) if k == "c"] for r in records]
    inside = sum(
        (r.n_out or 0) * sum(start <= t <= end for t in ts) / len(ts)
        for r, ts in zip(records, tokens, strict=True)
    )
    assert entry["throughput"]["output_tokens_per_s"] == pytest.approx(inside / ((end - start) / 1e9))
    own = sum(r.n_out or 0 for r in records if r.measured)
    assert inside > own  # the cool-down requests streamed inside the window, as the load went on


def test_windows_in_seconds_follow_the_schedule(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(STEPS)
    _bench(
        server,
        tmp_path,
        "--rate",
        "20",
        "--burstiness",
        "50",
        "--duration",
        "1",
        "--warmup",
        "0.5s",
        "--cooldown",
        "0.5s",
    )
    records = sorted(_records(tmp_path), key=lambda r: r.scheduled_ns)
    # the level's clock starts one gap (~50 ms: nearly regular arrivals) before the first arrival
    t0 = records[0].scheduled_ns - 50_000_000
    for r in records:
        offset = (r.scheduled_ns - t0) / 1e9
        window = "warmup" if r.warmup else "cooldown" if r.cooldown else "measured"
        if abs(offset - 0.5) > 0.03 and abs(offset - 1.5) > 0.03:  # clear of a boundary
            assert window == ("warmup" if offset < 0.5 else "measured" if offset < 1.5 else "cooldown"), (
                offset
            )
    assert [r.warmup for r in records].count(True) >= 8 and [r.cooldown for r in records].count(True) >= 8
    assert (records[-1].scheduled_ns - t0) / 1e9 < 2.05  # nothing scheduled past the cool-down


def test_a_closed_loop_ramps_its_slots_in(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": [[0.05, "content", 1]] * 4})
    _bench(server, tmp_path, "--concurrency", "4", "--requests", "8", "--ramp", "1.2")
    records = _records(tmp_path)
    t = min(r.sent_ns for r in records) + 100_000_000
    # 0.1 s in, one slot has joined (slot k joins at k * 0.3 s); without the ramp all four are in flight
    assert sum(r.sent_ns <= t < (r.end_ns or 0) for r in records) == 1


def test_an_open_loop_ramps_its_rate(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": [[0.0, "content", 1]] * 2})
    _bench(server, tmp_path, "--rate", "30", "--burstiness", "50", "--requests", "60", "--ramp", "2")
    times = sorted(r.scheduled_ns for r in _records(tmp_path))
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(times)]
    # the rate rises linearly over 2 s (about its first 30 arrivals), then holds: early gaps are long
    assert sum(gaps[:9]) / 9 > 1.8 * sum(gaps[40:]) / len(gaps[40:])
    assert sum(gaps[40:]) / len(gaps[40:]) == pytest.approx(1 / 30, rel=0.1)


def test_max_concurrency_queues_in_the_client_and_says_so(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": [[0.05, "content", 1]] * 2})
    summary = _bench(
        server, tmp_path, "--rate", "40", "--burstiness", "50", "--requests", "10", "--max-concurrency", "1"
    )
    records = sorted(_records(tmp_path), key=lambda r: r.sent_ns)
    for a, b in itertools.pairwise(records):
        assert b.sent_ns >= (a.end_ns or 0)  # one in flight at a time
    (entry,) = summary["endpoints"]
    assert entry["queue_delay_ms"]["p50"] > 50  # the wait is queue delay, not latency
    assert entry["e2e_ms"]["p50"] < entry["e2e_from_schedule_ms"]["p50"] - 50


def test_a_sweep_stops_at_the_first_load_the_server_cannot_keep_up_with(
    server: ScriptedServer, tmp_path: Path
) -> None:
    server.script({"capacity": 20.0, "steps": [[0.0, "content", 1]]})
    summary = _bench(
        server,
        tmp_path,
        "--rate",
        "5,10,40,80",
        "--burstiness",
        "20",
        "--requests",
        "40",
        "--until-saturated",
    )
    loads = [e["load"] for e in summary["endpoints"]]
    assert loads == ["rate=5,b=20", "rate=10,b=20", "rate=40,b=20"]  # 80 never sent
    verdicts = [e["saturation"]["saturated"] for e in summary["endpoints"]]
    assert verdicts == [False, False, True]
    assert (
        "stopped at rate=40,b=20" in summary["stopped"]
        and "wait for the first token rose" in summary["stopped"]
    )
    assert {r.load for r in _records(tmp_path)} == set(loads)


def test_repeat_gives_between_run_intervals_and_compare_uses_them(tmp_path: Path) -> None:
    with ScriptedServer() as a, ScriptedServer() as b:
        a.script({"steps": [[0.01, "content", 1]] * 4})
        b.script({"steps": [[0.02, "content", 1]] * 4})
        args = ("--concurrency", "2", "--requests", "10", "--repeat", "3")
        summary = _bench(a, tmp_path / "run", *args, urls=(a.url, b.url))
        _bench(a, tmp_path / "again", *args, urls=(a.url, b.url))
    records = _records(tmp_path / "run")
    assert sorted({r.repeat for r in records}) == [0, 1, 2]
    firsts = [min((r for r in records if r.repeat == k), key=lambda r: r.sent_ns).endpoint for k in range(3)]
    assert firsts[0] != firsts[1] and firsts[0] == firsts[2]  # who goes first alternates
    entry = summary["endpoints"][0]
    spread = entry["repeats"]["stats"]["e2e_ms p50"]
    assert entry["repeats"]["runs"] == 3 and len(spread["runs"]) == 3
    assert spread["ci95"][0] <= spread["mean"] <= spread["ci95"][1]
    assert spread["rerun95"][0] <= spread["ci95"][0] and spread["ci95"][1] <= spread["rerun95"][1]
    per_run = [
        sorted(timing(r).e2e for r in records if r.repeat == k and r.endpoint == entry["name"])
        for k in range(3)
    ]
    assert spread["runs"] == pytest.approx([(x[4] + x[5]) / 2 for x in per_run])
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "run"), str(tmp_path / "again"), "--json"])
    assert result.exit_code == 0, result.output
    ratios = json.loads(result.stdout)["comparisons"]
    assert ratios and all("between 3 and 3 runs" in c["text"] and c["n"] == [3, 3] for c in ratios)
    shown = CliRunner().invoke(main, ["report", str(tmp_path / "run")])
    assert shown.exit_code == 0, shown.output
    page = (tmp_path / "run" / "report.html").read_text()
    assert "Over the runs: mean (between-run 95% CI; where 95% of further runs fall)" in page
    (low, high), (lower, higher) = spread["ci95"], spread["rerun95"]
    shown_cell = f"{spread['mean']:,.0f} ({low:,.0f}-{high:,.0f}; {lower:,.0f}-{higher:,.0f})"
    assert shown_cell in page  # E2E p50 as the table shows it


def test_probes_show_what_a_lone_user_meets_under_load(server: ScriptedServer, tmp_path: Path) -> None:
    # one slot of 100 ms: three load requests always queued, so a probe waits for them; alone it does not
    server.script({"capacity": 10.0, "steps": [[0.0, "content", 1]] * 3})
    summary = _bench(server, tmp_path, "--concurrency", "3", "--requests", "30", "--probe-rate", "4")
    probes = [r for r in _records(tmp_path) if r.probe]
    assert {r.load for r in probes} == {"idle", "c=3"} and sum(r.load == "idle" for r in probes) == 10
    (entry,) = summary["endpoints"]
    assert entry["requests"]["ok"] == 30  # probes are not the load's
    extra = entry["probes"]["ttft"]
    assert extra["diff_ci95"][0] > 50 and extra["ratio"] > 1.5  # the wait for three slots, with its CI
    assert entry["probes"]["idle_ttft_ms"]["p50"] < 150
