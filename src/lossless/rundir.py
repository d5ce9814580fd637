"""A run folder, the one format every command's ``--out`` writes and ``report``, ``compare``, ``advise`` and
``watch`` read back: which files it holds, and how each is written and read.

    records.jsonl   one line per finished attempt (``records.to_json``), appended and flushed as each
                    finishes, so a killed run loses nothing that finished (``JsonlWriter``)
    summary.json    bench's ``Summary`` (``Summary.as_dict``), written whole; a run stopped before it
                    wrote one is summarized again from its records (``read_run``)
    summary.csv     one row per endpoint, load level and prompt class
    <command>.json  every other command's result (probe.json, verify.json, inspect.json, tasks.json),
                    the same text ``--json`` prints (``emit_json``)

Every file but records.jsonl is written whole or not at all (``atomic``). JSON here is strict: NaN and
infinities become null, which every parser reads.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from lossless.atomic import write_atomic
from lossless.errors import UsageError
from lossless.records import RequestRecord, from_json, record_problem, to_json as record_line

if TYPE_CHECKING:
    from lossless.analyze import GroupStats, Summary

RECORDS, SUMMARY, SUMMARY_CSV = "records.jsonl", "summary.json", "summary.csv"
BENCH_FILES = (RECORDS, SUMMARY, SUMMARY_CSV)  # what bench --out writes
PROBE, VERIFY, INSPECT, TASKS = "probe.json", "verify.json", "inspect.json", "tasks.json"
REPORT, INSPECT_PAGE = "report.html", "inspect.html"

_HEAD = (
    "name",
    "load",
    "class",
    "ok",
    "failed",
    "cancelled",
    "attempts",
    "output_tokens_per_s",
    "requests_per_s",
    "goodput_requests_per_s",
    "cost_per_ok_request_usd",
    "errors",
)


class Result(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


def to_json(summary: Summary) -> str:
    return strict_json(summary.as_dict())


def emit_json(result: Result, as_json: bool, out_dir: Path | None, name: str) -> Path | None:
    """A command's result as strict JSON, made once: printed on stdout under --json, and written
    atomically as ``out_dir/name`` under --out (that path returned)."""
    if not as_json and out_dir is None:
        return None
    text = strict_json(result.as_dict())
    if as_json:
        print(text, flush=True)
    return None if out_dir is None else write_atomic(out_dir / name, text + "\n")


def strict_json(obj: Any) -> str:
    """JSON that every parser reads: NaN and infinities (a server's NaN counter, a ratio over zero)
    become null, instead of the bare ``NaN`` Python would write."""
    return json.dumps(finite(obj), indent=2, ensure_ascii=False, allow_nan=False, default=str)


def finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def to_csv(summary: Summary) -> str:
    from lossless.analyze import METRICS, STATS  # here: probe and verify write JSON without numpy

    columns = [(m.key, stat) for m in METRICS for stat in STATS]
    # the server's own timing headers (a gateway's, OpenAI's processing time), one column set per header
    # any row carries: empty where an endpoint sends no such header
    parts = [
        (e, cls, g)
        for e in summary.endpoints
        for cls, g in [("all", e.overall), *(e.classes.items() if len(e.classes) > 1 else ())]
    ]
    headers = sorted({h for _, _, g in parts for h in g.server_ms})
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        [
            *_HEAD,
            *(f"{key}.{stat}" for key, stat in columns),
            *(f"server_ms:{h}.{stat}" for h in headers for stat in STATS),
        ]
    )
    for e, cls, g in parts:  # the endpoint's row (class "all"), then one per prompt class when several
        row = _row(e.name, e.load, cls, g, columns)
        row += [g.server_ms[h].get(stat) if h in g.server_ms else None for h in headers for stat in STATS]
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def _row(name: str, load: str, cls: str, g: GroupStats, columns: list[tuple[str, str]]) -> list[Any]:
    req, tput = g.requests, g.throughput
    row: list[Any] = [name, load, cls, req.ok, req.failed, req.cancelled, req.attempts]
    row += [tput.output_tokens_per_s, tput.requests_per_s, tput.goodput_requests_per_s]
    row += [g.cost_per_ok_request_usd, ";".join(f"{k}={v}" for k, v in req.errors.items())]
    row += [g.stat(key, stat) for key, stat in columns]
    return row


def write(summary: Summary, out_dir: Path) -> list[Path]:
    """summary.json and summary.csv, each whole; their paths."""
    return [
        write_atomic(out_dir / SUMMARY, to_json(summary) + "\n"),
        write_atomic(out_dir / SUMMARY_CSV, to_csv(summary)),
    ]


# --- records.jsonl ------------------------------------------------------------------------------------


class JsonlWriter:
    """Appends one line per record and flushes it, so a killed run loses nothing that finished."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, record: RequestRecord) -> None:
        self._file.write(record_line(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_jsonl(path: Path) -> Iterator[RequestRecord]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield from_json(line)


def write_jsonl(path: Path, records: Iterable[RequestRecord]) -> None:
    writer = JsonlWriter(path)
    try:
        for r in records:
            writer.write(r)
    finally:
        writer.close()


# --- reading a run back -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SavedRun:
    summary: Summary | None  # summary.json, or rebuilt from the records when it is missing
    records: list[RequestRecord]  # records.jsonl
    verify: dict[str, Any] | None  # verify.json
    notes: tuple[str, ...] = ()  # what a person should know about how these were read
    others: dict[str, dict[str, Any]] = field(default_factory=dict)  # probe.json, tasks.json, inspect.json


def read_run(run_dir: Path, rebuild: bool = True) -> SavedRun:
    """What a command's --out left in DIR: bench's summary.json and records.jsonl, verify.json, and
    probe.json, tasks.json and inspect.json (read as they were written, plain dicts).

    A run killed before it wrote summary.json (SIGKILL, a power cut) still left its records, flushed one
    line at a time: with ``rebuild`` its summary is made again from them. Anything unreadable is a
    UsageError naming the file (and line)."""
    found, verify = _read_json(run_dir / SUMMARY), _read_json(run_dir / VERIFY)
    others = {n: doc for n in (PROBE, TASKS, INSPECT) if (doc := _read_json(run_dir / n)) is not None}
    records_path = run_dir / RECORDS
    if not records_path.exists():
        if found is not None:
            raise UsageError(f"{run_dir} has summary.json but no records.jsonl to plot")
        if verify is None and not others:
            raise UsageError(
                f"{run_dir} holds no run: neither records.jsonl and summary.json (bench --out) nor "
                f"{', '.join((VERIFY, PROBE, TASKS, INSPECT))}"
            )
        return SavedRun(None, [], verify, others=others)
    records, notes = read_records(records_path)
    summary = None if found is None else _summary(found, run_dir / SUMMARY)
    if summary is None and rebuild and not records and verify is None:
        raise UsageError(f"{records_path} holds no records and there is no summary.json: nothing to show")
    if summary is None and rebuild and records:
        summary = _rebuilt(records)
        notes.append(
            f"{run_dir / SUMMARY} is missing (the run was stopped before it ended?): the summary was "
            f"rebuilt from the {len(records)} records in records.jsonl, without prices (no costs), "
            "configuration or environment"
        )
    return SavedRun(summary, records, verify, tuple(notes), others)


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # not UTF-8, not JSON
        raise UsageError(f"cannot read {path}: not JSON ({first_line(exc)})") from None
    except RecursionError:
        raise UsageError(f"cannot read {path}: it nests too deeply") from None
    if not isinstance(found, dict):
        raise UsageError(f"{path} is not what lossless writes: a JSON object, got {type(found).__name__}")
    return found


def _summary(found: dict[str, Any], path: Path) -> Summary:
    entries = found.get("endpoints")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("load"), str)
        for e in entries
    ):
        raise UsageError(f"{path} is not a bench summary: 'endpoints' must be a list of {{name, load, ...}}")
    from lossless.analyze import Summary  # here: probe and verify write JSON without numpy

    try:
        return Summary.from_dict(found)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"{path} is not shaped as lossless writes it ({type(exc).__name__}: {first_line(exc)})"
        ) from None


def _rebuilt(records: Sequence[RequestRecord]) -> Summary:
    from lossless.analyze import summarize

    names = dict.fromkeys(r.endpoint for r in records)  # the table in the order the run first sent
    return summarize(records, {name: (None, None) for name in names}, rebuilt=True)


def read_records(path: Path) -> tuple[list[RequestRecord], list[str]]:
    """records.jsonl, every line checked; a cut-short last line (a write stopped midway) is skipped with
    a note: lines are flushed one at a time, so only the last can be cut."""
    try:
        with path.open("rb") as f:
            lines = [(n, raw) for n, raw in enumerate(f, 1) if raw.strip()]
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    records: list[RequestRecord] = []
    for n, raw in lines:
        try:
            record = from_json(raw.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if n == lines[-1][0] and not raw.endswith(b"\n"):
                return records, [f"{path}: skipped its last line, cut short ({first_line(exc)})"]
            raise UsageError(f"{path}:{n}: not JSON ({first_line(exc)})") from None
        except KeyError as exc:
            raise UsageError(f"{path}:{n}: not a request record: no field {exc}") from None
        except (ValueError, TypeError, RecursionError) as exc:
            raise UsageError(
                f"{path}:{n}: not a request record ({type(exc).__name__}: {first_line(exc)})"
            ) from None
        problem = record_problem(record)
        if problem is not None:
            raise UsageError(f"{path}:{n}: not a request record: {problem}")
        records.append(record)
    return records, []


def first_line(exc: BaseException) -> str:
    """An error's message, its first line, cut to fit a one-line message."""
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__


def saved_config(run_dir: Path) -> dict[str, Any]:
    """summary.json's ``config`` block (the settings a bench run was made with, prices and policy among
    them), for readers that can do without it: {} when the run left no summary.json or it holds none;
    OSError or ValueError (or RecursionError) when the file is there and cannot be read."""
    path = run_dir / SUMMARY
    if not path.exists():
        return {}
    found = json.loads(path.read_text(encoding="utf-8"))
    config = found.get("config") if isinstance(found, dict) else None
    return config if isinstance(config, dict) else {}
