"""The history: one SQLite database (the standard library's ``sqlite3``), one row per run and one per run,
endpoint and load level; each run's files (records.jsonl, summary.json, summary.csv, as ``bench --out``
writes them) in a folder beside the database, ``<db>.runs/<run id>/``.

    runs     the run: its id, when, its folder, bench's settings (no secrets), or why it measured nothing
    results  one endpoint and load of it: the key figures as columns (``KEYS``), its summary as JSON

Several watches may append to one database at once: the journal is write-ahead (WAL) and a writer waits
up to ``BUSY_S`` for another's transaction. Each run is one transaction, so a reader, or a process killed
mid-write, sees a run whole or not at all. (WAL needs a local disk: SQLite's locks do not hold over NFS.)
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lossless.errors import UsageError
from lossless.rundir import finite  # NaN as null, as summary.json has it

if TYPE_CHECKING:
    from lossless.analyze import EndpointStats, Summary

DEFAULT_DB = Path("lossless-history.sqlite")  # in the current folder
SCHEMA_VERSION = 1  # PRAGMA user_version of a lossless history
BUSY_S = 60.0  # a writer waits this long for another writer's transaction (each takes milliseconds)


@dataclass(frozen=True)
class Key:
    """A key figure of a run: a column of ``results``, a column of the history table, a trend chart."""

    column: str
    label: str  # "TTFT p50"
    unit: str  # "ms", "tok/s"; "" for a share
    higher_is_better: bool
    metric: str | None  # the summary's metric key; None: the error rate, failed / (ok + failed)
    stat: str = "p50"


KEYS = (
    Key("ttft_p50_ms", "TTFT p50", "ms", False, "ttft_ms"),
    Key("ttft_p99_ms", "TTFT p99", "ms", False, "ttft_ms", "p99"),
    Key("output_tps_p50", "speed p50", "tok/s", True, "output_tps"),
    Key("e2e_p50_ms", "E2E p50", "ms", False, "e2e_ms"),
    Key("e2e_p99_ms", "E2E p99", "ms", False, "e2e_ms", "p99"),
    Key("error_rate", "error rate", "", False, None),
)
KEY = {k.column: k for k in KEYS}

_TABLES = (
    """CREATE TABLE IF NOT EXISTS runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- the run's number in this history
        run_id TEXT NOT NULL UNIQUE,  -- UTC start and a random tag: 20261130T101500Z-3fa2c1
        started_s REAL NOT NULL,  -- Unix time
        finished_s REAL NOT NULL,
        folder TEXT,  -- its files, relative to the database's folder; NULL: it has none
        config TEXT,  -- JSON: bench's settings, as summary.json keeps them; NULL for a failed run
        error TEXT,  -- NULL, or why the run measured nothing (an endpoint it could not reach)
        lossless_version TEXT NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS results (
        run INTEGER NOT NULL REFERENCES runs(id),
        endpoint TEXT NOT NULL,
        load TEXT NOT NULL,
        workload TEXT NOT NULL,  -- a hash of what this endpoint was asked: a series is endpoint+load+workload
        ok INTEGER NOT NULL,
        failed INTEGER NOT NULL,
        cancelled INTEGER NOT NULL,
        {", ".join(f"{k.column} REAL" for k in KEYS)},
        summary TEXT NOT NULL,  -- JSON: this endpoint and load's entry of summary.json
        PRIMARY KEY (run, endpoint, load))""",
    "CREATE INDEX IF NOT EXISTS runs_started ON runs (started_s)",
)


@dataclass(frozen=True)
class StoredResult:
    endpoint: str
    load: str
    workload: str
    ok: int
    failed: int
    cancelled: int
    values: Mapping[str, float | None]  # by ``Key.column``; None: not measured (no request succeeded)
    summary: str = ""  # JSON; read back only by ``read(..., summaries=True)``


@dataclass(frozen=True)
class Run:
    number: int  # 0 until stored
    run_id: str
    started_s: float
    finished_s: float
    folder: Path | None  # absolute once read back
    config: Mapping[str, Any] | None
    error: str | None
    lossless_version: str
    results: tuple[StoredResult, ...] = ()


def open_db(path: Path, create: bool) -> sqlite3.Connection:
    """The history at ``path``: made if ``create`` (and it is absent), else it must exist already."""
    if path.is_dir():
        raise UsageError(f"--db {path}: a folder, not a file")
    if not create and not path.exists():
        raise UsageError(f"no history at {path} (lossless watch --db {path} starts one)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=BUSY_S, isolation_level=None)  # transactions are explicit
        db.execute("PRAGMA journal_mode=WAL")  # the first statement that reads the file
        with transaction(db):
            _schema(db, path)
    except sqlite3.Error as exc:
        raise UsageError(f"--db {path}: not a usable SQLite database ({exc})") from exc
    except OSError as exc:
        raise UsageError(f"--db {path}: {exc.strerror or exc}") from exc
    return db


def _schema(db: sqlite3.Connection, path: Path) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if version != 0 or tables:  # someone else's database: add nothing to it
        raise UsageError(f"--db {path}: a SQLite database, but not a lossless history")
    for statement in _TABLES:
        db.execute(statement)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE takes the write lock first (waiting up to BUSY_S), so two writers never both
    read and then both try to write, which SQLite answers with "database is locked" at once."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def add_run(db: sqlite3.Connection, run: Run, base: Path) -> int:
    """Store ``run`` and its results in one transaction; its number in the history."""
    folder = None if run.folder is None else str(run.folder.relative_to(base))
    config = None if run.config is None else json.dumps(run.config, default=str)
    with transaction(db):
        cur = db.execute(
            "INSERT INTO runs (run_id, started_s, finished_s, folder, config, error, lossless_version) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run.run_id, run.started_s, run.finished_s, folder, config, run.error, run.lossless_version),
        )
        number = cur.lastrowid
        columns = ", ".join(k.column for k in KEYS)
        db.executemany(
            f"INSERT INTO results (run, endpoint, load, workload, ok, failed, cancelled, {columns}, summary) "
            f"VALUES ({', '.join('?' * (8 + len(KEYS)))})",
            [
                (
                    number,
                    r.endpoint,
                    r.load,
                    r.workload,
                    r.ok,
                    r.failed,
                    r.cancelled,
                    *(r.values.get(k.column) for k in KEYS),
                    r.summary,
                )
                for r in run.results
            ],
        )
    assert number is not None
    return number


def read(db: sqlite3.Connection, base: Path, summaries: bool = False) -> tuple[Run, ...]:
    """Every run, oldest first (by start time; two watches' runs interleave), with its results."""
    columns = ", ".join(k.column for k in KEYS)
    found: dict[int, list[StoredResult]] = {}
    query = f"SELECT run, endpoint, load, workload, ok, failed, cancelled, {columns}, "
    query += "summary FROM results" if summaries else "'' FROM results"
    for row in db.execute(query + " ORDER BY run, rowid"):
        values = dict(zip((k.column for k in KEYS), row[7:-1], strict=True))
        found.setdefault(row[0], []).append(
            StoredResult(row[1], row[2], row[3], row[4], row[5], row[6], values, row[-1])
        )
    runs = []
    query = "SELECT id, run_id, started_s, finished_s, folder, config, error, lossless_version FROM runs"
    for number, run_id, started, finished, folder, config, error, version in db.execute(
        query + " ORDER BY started_s, id"
    ):
        runs.append(
            Run(
                number,
                run_id,
                started,
                finished,
                None if folder is None else base / folder,
                None if config is None else json.loads(config),
                error,
                version,
                tuple(found.get(number, ())),
            )
        )
    return tuple(runs)


# --- a bench summary -> results rows ---------------------------------------------------------------


def results_of(summary: Summary) -> tuple[StoredResult, ...]:
    config = summary.run.config if summary.run is not None else {}
    return tuple(
        StoredResult(
            e.name,
            e.load,
            workload(config, e.name),
            e.overall.requests.ok,
            e.overall.requests.failed,
            e.overall.requests.cancelled,
            {k.column: value(e, k) for k in KEYS},
            json.dumps(finite(e.as_dict()), allow_nan=False, default=str),
        )
        for e in summary.endpoints
    )


def value(e: EndpointStats, key: Key) -> float | None:
    if key.metric is None:
        req = e.overall.requests
        return req.failed / (req.ok + req.failed) if req.ok + req.failed else None
    v = e.overall.stat(key.metric, key.stat)
    return v if v is not None and math.isfinite(v) else None


def workload(config: Mapping[str, Any], endpoint: str) -> str:
    """What was asked of ``endpoint``, hashed: the run's settings and the endpoint's model, body and
    header names, not its URL (the embedded server's port changes from run to run), price or key."""
    mine = [
        {k: e.get(k) for k in ("model", "body", "headers")}
        for e in config.get("endpoints", ())
        if e.get("name") == endpoint
    ]
    asked = {k: v for k, v in config.items() if k != "endpoints"}
    return hashlib.sha256(json.dumps([mine, asked], sort_keys=True, default=str).encode()).hexdigest()[:8]


def runs_folder(db_path: Path) -> Path:
    """Where the runs' files go: ``lossless-history.sqlite`` -> ``lossless-history.sqlite.runs/``."""
    return db_path.with_name(db_path.name + ".runs")
