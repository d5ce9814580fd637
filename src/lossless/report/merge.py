"""Runs made at the same time on several machines (each its own ``bench --out``) -> one run.

The records are summarized together, so every percentile is computed from all of them (no merging of
histograms or of percentiles). Records from different machines are put on one timeline by their wall
clocks: each machine's clock against true time is assumed (NTP), not measured, and said so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lossless.analyze import RunInfo, Summary, summarize
from lossless.analyze.summarize import Price
from lossless.errors import UsageError
from lossless.records import RequestRecord
from lossless.rundir import read_run


@dataclass(frozen=True)
class Merged:
    summary: Summary
    records: list[RequestRecord]
    notes: tuple[str, ...]


def merge(run_dirs: list[Path]) -> Merged:
    """Read each run's summary.json and records.jsonl, renumber workers and requests so no two runs
    share one, and summarize the union with the first run's objectives and every run's prices."""
    runs = [read_run(d, rebuild=False) for d in run_dirs]
    notes: list[str] = []
    records: list[RequestRecord] = []
    infos: list[RunInfo] = []
    clients: list[dict[str, Any]] = []
    worker_base = index_base = 0
    for run_dir, run in zip(run_dirs, runs, strict=True):
        if run.summary is None or not run.records:
            raise UsageError(f"{run_dir}: no bench run to merge (summary.json and records.jsonl)")
        if any(r.wall_anchor_ns is None for r in run.records):
            raise UsageError(f"{run_dir}: its records carry no wall-clock anchor (made before lossless 0.2)")
        records += [
            replace(r, worker=r.worker + worker_base, request_index=r.request_index + index_base)
            for r in run.records
        ]
        info = run.summary.run
        if info is not None:
            infos.append(info)
            clients += [{**c, "worker": c["worker"] + worker_base} for c in info.clients]
        worker_base += max(r.worker for r in run.records) + 1
        if info is not None and info.clients:
            worker_base = max(worker_base, max(c["worker"] for c in clients) + 1)
        index_base += max(r.request_index for r in run.records) + 1
        notes += run.notes
    hosts = sorted({r.host or "?" for r in records})
    if len(hosts) > 1:
        notes.append(
            f"runs from {len(hosts)} machines ({', '.join(hosts)}) are put on one timeline by their wall "
            "clocks, assumed synchronized (NTP): a clock that is off shifts throughput spans and plots, "
            "never a request's own times"
        )
    if not _overlap(runs):
        notes.append("these runs did not all run at the same time: throughput spans the gaps between them")
    first = runs[0].summary
    assert first is not None
    summary = summarize(
        records,
        _prices(infos, records),
        slo=first.slo_ms,
        stall_s=first.stall_threshold_s,
        run=_info(infos, run_dirs, worker_base, clients, notes),
    )
    return Merged(summary, records, tuple(notes))


def _overlap(runs: list[Any]) -> bool:
    spans = []
    for run in runs:
        starts = [r.sent_ns + r.wall_anchor_ns + r.clock_offset_ns for r in run.records]
        ends = [(r.end_ns or r.sent_ns) + r.wall_anchor_ns + r.clock_offset_ns for r in run.records]
        spans.append((min(starts), max(ends)))
    return max(s for s, _ in spans) < min(e for _, e in spans)


def _prices(infos: list[RunInfo], records: list[RequestRecord]) -> dict[str, Price]:
    prices: dict[str, Price] = {}
    for info in infos:
        for e in info.config.get("endpoints", []):
            given = [*(e.get("price_usd_per_million") or []), None, None, None]
            prices.setdefault(e["name"], (given[0], given[1], given[2]))
    for r in records:  # in the order first sent, for any endpoint no config named
        prices.setdefault(r.endpoint, (None, None))
    return prices


def _info(
    infos: list[RunInfo], run_dirs: list[Path], workers: int, clients: list[dict[str, Any]], notes: list[str]
) -> RunInfo:
    loops = sorted({i.event_loop for i in infos})
    return RunInfo(
        tokenizer=next((i.tokenizer for i in infos if i.tokenizer), None),
        event_loop=",".join(loops),
        interrupted=any(i.interrupted for i in infos),
        config={"merged_from": [str(d) for d in run_dirs], "runs": [dict(i.config) for i in infos]},
        environment=dict(infos[0].environment) if infos else {},
        workers=workers,
        clients=tuple(clients),
        warnings=(*(w for i in infos for w in i.warnings), *notes),
    )
