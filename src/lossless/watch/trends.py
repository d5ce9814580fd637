"""A history's runs -> series (one endpoint, load level and workload each), with each key figure's
per-run values, the runs outside their band and the change points (``changes``' two rules)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from lossless.watch import changes
from lossless.watch.changes import Band, Change
from lossless.watch.store import KEY, KEYS, Run


@dataclass(frozen=True)
class Point:
    run: int  # the run's number in the history
    started_s: float  # Unix time
    value: float


@dataclass(frozen=True)
class Flag:
    """A run outside the band of the runs before it."""

    run: int
    key: str  # ``Key.column``
    value: float
    band: Band

    @property
    def worse(self) -> bool:
        return (self.value > self.band.hi) != KEY[self.key].higher_is_better


@dataclass(frozen=True)
class Shift:
    """A change point: the level moved at run ``run`` and stayed."""

    run: int  # the first run after the change
    key: str
    change: Change

    @property
    def worse(self) -> bool:
        return (self.change.after > self.change.before) != KEY[self.key].higher_is_better


@dataclass(frozen=True)
class Series:
    endpoint: str
    load: str
    workload: str  # ``store.workload``: the same endpoint asked something else is another series
    label: str  # "name load", with "[workload]" when the history holds several for that name and load
    points: Mapping[str, tuple[Point, ...]]  # by ``Key.column``: the runs that measured it
    flags: tuple[Flag, ...]
    shifts: tuple[Shift, ...]


@dataclass(frozen=True)
class Trends:
    runs: tuple[Run, ...]  # oldest first
    series: tuple[Series, ...]
    rules: tuple[str, ...] = changes.RULES

    def flags_of(self, run: int) -> list[tuple[Series, Flag]]:
        return [(s, f) for s in self.series for f in s.flags if f.run == run]

    def as_dict(self) -> dict[str, Any]:
        runs = [
            {
                "number": r.number,
                "run_id": r.run_id,
                "started_s": r.started_s,
                "finished_s": r.finished_s,
                "folder": None if r.folder is None else str(r.folder),
                "error": r.error,
                "results": [
                    {
                        "endpoint": x.endpoint,
                        "load": x.load,
                        "workload": x.workload,
                        "ok": x.ok,
                        "failed": x.failed,
                        "cancelled": x.cancelled,
                        **x.values,
                    }
                    for x in r.results
                ],
            }
            for r in self.runs
        ]
        series = [
            {
                "label": s.label,
                "endpoint": s.endpoint,
                "load": s.load,
                "workload": s.workload,
                "flags": [{**asdict(f), "worse": f.worse} for f in s.flags],
                "change_points": [{**asdict(c), "worse": c.worse} for c in s.shifts],
            }
            for s in self.series
        ]
        return {"runs": runs, "series": series, "rules": list(self.rules)}


def trends(runs: Sequence[Run]) -> Trends:
    found: dict[tuple[str, str, str], dict[str, list[Point]]] = {}
    for run in runs:
        for r in run.results:
            points = found.setdefault((r.endpoint, r.load, r.workload), {k.column: [] for k in KEYS})
            for k in KEYS:
                v = r.values.get(k.column)
                if v is not None:
                    points[k.column].append(Point(run.number, run.started_s, v))
    names = [(e, lv) for e, lv, _ in found]
    series = []
    for (endpoint, load, workload), points in found.items():
        label = f"{endpoint} {load}" + (f" [{workload}]" if names.count((endpoint, load)) > 1 else "")
        series.append(_judged(endpoint, load, workload, label, points))
    return Trends(tuple(runs), tuple(series))


def _judged(endpoint: str, load: str, workload: str, label: str, points: dict[str, list[Point]]) -> Series:
    flags: list[Flag] = []
    shifts: list[Shift] = []
    for key, pts in points.items():
        values = [p.value for p in pts]
        floor = changes.FLOORS[KEY[key].unit]
        flags += [Flag(pts[i].run, key, values[i], b) for i, b in changes.outside_band(values, floor)]
        found = changes.change_point(values, floor)
        if found is not None:
            shifts.append(Shift(pts[found.at].run, key, found))
    flags.sort(key=lambda f: (f.run, [k.column for k in KEYS].index(f.key)))
    frozen = {k: tuple(v) for k, v in points.items()}
    return Series(endpoint, load, workload, label, frozen, tuple(flags), tuple(shifts))
