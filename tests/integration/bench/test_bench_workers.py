"""bench on several processes (--workers) and on a local Ray cluster (--ray), against a scripted server:
the merged run is the asked-for load, counted and summarized exactly, on one timeline; a worker that dies
loses only its in-flight requests; Ctrl-C stops every worker."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scipy import stats
from scripted_server import ScriptedServer

from lossless.analyze import describe, timing
from lossless.bench.workload.arrivals import poisson
from lossless.records import RequestRecord, on_one_timeline
from lossless.rundir import read_jsonl

# first token after 20 ms, then 4 more 5 ms apart
QUICK = {"steps": [[0.02, "content", 1]] + [[0.005, "content", 1]] * 4}
# 20 tokens 0.25 s apart: 5 s a request, long enough to kill a worker in the middle of it
SLOW = {"steps": [[0.25, "content", 1]] * 20}


def _lossless(*args: str) -> list[str]:
    return [sys.executable, "-m", "lossless.cli", *args]


def _bench(server: ScriptedServer, out: Path, *args: str) -> list[RequestRecord]:
    done = subprocess.run(
        _lossless("bench", server.url, "--model", "m", "--out", str(out), *args),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return list(read_jsonl(out / "records.jsonl"))


def _check_merged(records: list[RequestRecord], summary: dict, requests: int, levels: dict[str, int]) -> None:
    """Every request of every level exactly once, dealt by the slot rule; percentiles as from all records;
    clock offsets within their stated uncertainty (one machine: the true offset is zero)."""
    workers = summary["workers"]
    for load, concurrency in levels.items():
        at = [r for r in records if r.load == load]
        assert sorted(r.request_index for r in at) == list(range(requests))
        for r in at:
            assert r.ok, r.error
            assert r.worker == (r.request_index % concurrency) % workers
            assert abs(r.clock_offset_ns) <= r.clock_offset_err_ns + 1, (
                r.clock_offset_ns,
                r.clock_offset_err_ns,
            )
        entry = next(e for e in summary["endpoints"] if e["load"] == load)
        for key in ("ttft", "e2e"):
            expected = describe([getattr(timing(r), key) for r in at])
            for stat in ("n", "p50", "p99", "max"):
                assert entry[f"{key}_ms"][stat] == pytest.approx(expected.get(stat), rel=1e-12)
    assert {(c["worker"], c["load"]) for c in summary["clients"]} == {
        (w, load) for w in range(workers) for load in levels
    }


def test_two_local_workers_merge_exactly(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(default=QUICK)
    records = _bench(server, tmp_path, "--workers", "2", "--concurrency", "3,4", "--requests", "12")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["workers"] == 2 and summary["config"]["workers"] == 2
    _check_merged(records, summary, 12, {"c=3": 3, "c=4": 4})
    # the workers read the server's clock (perf_counter_ns, one per machine): no event before it was sent
    log = {e["id"]: e for e in server.log()}
    for r in records:
        sent = log[dict(r.server_headers)["x-request-id"]]["events"]
        tokens = [t for t, k in zip(r.event_ns, r.event_kinds, strict=True) if k == "c"]
        assert all(t >= s[0] for t, s in zip(tokens, sent, strict=True))


def test_several_endpoints_on_workers_each_get_every_request(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(default=QUICK)
    endpoints = tmp_path / "endpoints.toml"
    endpoints.write_text(
        "".join(f'[[endpoint]]\nname = "{n}"\nbase_url = "{server.url}"\nmodel = "m"\n' for n in "ab")
    )
    args = ("--endpoints", str(endpoints), "--workers", "2", "--concurrency", "3", "--requests", "6")
    done = subprocess.run(
        _lossless("bench", *args, "--out", str(tmp_path)), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    records = list(read_jsonl(tmp_path / "records.jsonl"))
    for name in "ab":
        mine = [r for r in records if r.endpoint == name]
        assert sorted(r.request_index for r in mine) == list(range(6)) and all(r.ok for r in mine)
        assert all(r.worker == (r.request_index % 3) % 2 for r in mine)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [e["name"] for e in summary["endpoints"]] == ["a", "b"] and len(summary["comparisons"]) > 0


def test_open_loop_arrivals_are_the_asked_process(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(default={"steps": [[0.0, "content", 1]]})
    rate, n = 40.0, 160
    records = _bench(server, tmp_path, "--workers", "2", "--rate", str(rate), "--requests", str(n))
    assert sorted(r.request_index for r in records) == list(range(n))
    assert {r.worker for r in records} == {0, 1}
    assert all(r.worker == r.request_index % 2 for r in records)
    # on one timeline the merged schedule is the single Poisson process the seed draws (bench's seed 0:
    # arrivals from Random(seed + 2)), to within the clocks' measured uncertainty
    merged = sorted(on_one_timeline(records), key=lambda r: r.request_index)
    gaps = iter(poisson(rate, random.Random(2)))
    expected = [next(gaps) for _ in range(n)]
    slack_ms = 1.0 + max(r.clock_offset_err_ns for r in records) / 1e6
    for r, offset in zip(merged, expected, strict=True):
        at = (r.scheduled_ns - merged[0].scheduled_ns) / 1e6
        assert abs(at - (offset - expected[0]) * 1000) <= slack_ms, (r.request_index, at, offset)
    intervals = [(b.scheduled_ns - a.scheduled_ns) / 1e9 for a, b in itertools.pairwise(merged)]
    assert stats.kstest(intervals, "expon", args=(0, 1 / rate)).pvalue > 0.001


def _spawned_workers(parent: int) -> list[int]:
    """The multiprocessing workers a bench process started (not its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def _wait_for_requests(server: ScriptedServer, n: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while len(server.sent()) < n:
        assert time.monotonic() < deadline, "the workers did not send their requests"
        time.sleep(0.1)


def test_a_killed_worker_loses_only_its_in_flight_requests(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(default=SLOW)
    args = ("bench", server.url, "--model", "m", "--workers", "2", "--concurrency", "4", "--requests", "8")
    out = subprocess.PIPE
    proc = subprocess.Popen(_lossless(*args, "--out", str(tmp_path)), stdout=out, stderr=out, text=True)
    try:
        _wait_for_requests(server, 4)  # each worker has its 2 requests in flight, none finished
        victim = _spawned_workers(proc.pid)
        assert len(victim) == 2
        os.kill(victim[0], signal.SIGKILL)
        table, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "died" in table and "worker_lost" in table
    records = list(read_jsonl(tmp_path / "records.jsonl"))
    lost = [r for r in records if r.error_kind == "worker_lost"]
    assert len(lost) == 2 and len({r.worker for r in lost}) == 1
    dead = lost[0].worker
    assert all(not r.ok for r in records if r.worker == dead)  # killed before any of its requests ended
    survivor = [r for r in records if r.worker != dead]
    assert len(survivor) == 4 and all(r.ok for r in survivor)  # its whole share, undisturbed
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["endpoints"][0]["requests"]["errors"] == {"worker_lost": 2}
    assert any("died" in w for w in summary["warnings"])


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_ctrl_c_stops_every_worker(server: ScriptedServer, tmp_path: Path, how: str) -> None:
    server.script(default=SLOW)
    args = ("bench", server.url, "--model", "m", "--workers", "2", "--concurrency", "4", "--requests", "8")
    proc = subprocess.Popen(
        _lossless(*args, "--out", str(tmp_path)), stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _wait_for_requests(server, 4)
        workers = _spawned_workers(proc.pid)
        assert len(workers) == 2
        if how == "ctrl-c":  # a terminal's Ctrl-C reaches the whole process group
            os.killpg(proc.pid, signal.SIGINT)
        else:  # `timeout`, `docker stop`: the driver alone
            proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    for pid in workers:  # every worker has exited
        assert not Path(f"/proc/{pid}").exists() or "Z" in (Path(f"/proc/{pid}/stat").read_text().split()[2])
    records = list(read_jsonl(tmp_path / "records.jsonl"))
    assert len(records) == 4 and all(r.error_kind == "cancelled" for r in records)
    assert {r.worker for r in records} == {0, 1}
    assert json.loads((tmp_path / "summary.json").read_text())["interrupted"] is True


RAY_SCRIPT = """
import sys
import ray
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
from lossless.cli import main
sys.argv = ["lossless", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_local_ray_cluster(server: ScriptedServer, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    server.script(default=QUICK)
    args = ("bench", server.url, "--model", "m", "--ray", "--workers", "2", "--concurrency", "3,4")
    done = subprocess.run(
        [sys.executable, "-c", RAY_SCRIPT, *args, "--requests", "12", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["config"]["ray"] == "local"
    _check_merged(list(read_jsonl(tmp_path / "records.jsonl")), summary, 12, {"c=3": 3, "c=4": 4})


def test_runs_made_at_the_same_time_merge_into_one(server: ScriptedServer, tmp_path: Path) -> None:
    """Two bench runs at once (as on two machines), then `report A B --out M`: one summary of all records."""
    server.script(default=QUICK)
    runs = [tmp_path / "a", tmp_path / "b"]
    args = ("bench", server.url, "--model", "m", "--concurrency", "2", "--requests", "10")
    procs = [
        subprocess.Popen(_lossless(*args, "--workers", str(w), "--out", str(d)), stdout=subprocess.DEVNULL)
        for w, d in zip((2, 1), runs, strict=True)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    merged_dir = tmp_path / "merged"
    done = subprocess.run(
        _lossless("report", *map(str, runs), "--out", str(merged_dir)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(merged_dir / "report.html") and (merged_dir / "report.html").exists()
    records = list(read_jsonl(merged_dir / "records.jsonl"))
    assert len(records) == 20
    assert sorted((r.worker, r.request_index) for r in records) == sorted(
        [((i % 2) % 2, i) for i in range(10)] + [(2, 10 + i) for i in range(10)]
    )  # run a's workers 0 and 1, run b's worker renumbered 2; b's requests after a's
    summary = json.loads((merged_dir / "summary.json").read_text())
    assert summary["workers"] == 3 and len(summary["endpoints"]) == 1
    entry = summary["endpoints"][0]
    assert entry["requests"]["ok"] == 20
    for key in ("ttft", "e2e"):
        expected = describe([getattr(timing(r), key) for r in records])
        for stat in ("n", "p50", "p99", "max"):
            assert entry[f"{key}_ms"][stat] == pytest.approx(expected.get(stat), rel=1e-12)
    bad = subprocess.run(_lossless("report", *map(str, runs)), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--out" in bad.stderr
