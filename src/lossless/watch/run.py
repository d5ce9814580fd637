"""``lossless watch``: one bench configuration run on a schedule, each finished run added to the history.

A run writes bench's own --out files into ``<db>.runs/<run id>.partial/``; once they are whole the folder
is renamed ``<run id>/`` and the run is committed to the database in one transaction. Hence:

- killed (SIGKILL) at any moment: every finished run is in the database; the run in progress leaves a
  ``.partial`` folder and no row (``lossless history`` notes such folders);
- Ctrl-C or SIGTERM during a run: bench stops it and summarizes the requests that finished. That run is
  *not* added to the history (a run cut short reads as a slowdown or an error burst): it stays as
  ``<run id>.partial`` with summary.json marked interrupted, and the watch ends (exit 130);
- Ctrl-C or SIGTERM between runs: the watch ends at once; while a finished run is being recorded: it is
  recorded first;
- a run that cannot reach an endpoint is recorded with its error (no results), and the watch goes on;
  unless it is the watch's first: then the watch stops there (exit 2), since a wrong host or port is
  likelier than an outage, and a typo should not cost a day of failed runs.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from lossless import __version__, rundir
from lossless.analyze import Summary
from lossless.bench.options import BenchOptions
from lossless.bench.run import plan, run as run_bench
from lossless.errors import EndpointError
from lossless.watch import store
from lossless.watch.options import WatchOptions
from lossless.watch.schedule import slots
from lossless.watch.trends import Trends, trends


@dataclass(frozen=True)
class Outcome:
    index: int  # 0, 1, ... in this watch
    run_id: str
    run: store.Run | None  # as stored; None: interrupted, so not stored
    folder: Path | None  # its files
    summary: Summary | None  # None: it measured nothing (``run.error`` says why)
    trends: Trends | None  # the history's, this run included
    interrupted: bool = False  # Ctrl-C or SIGTERM during the run
    stop: bool = False  # Ctrl-C or SIGTERM while it was being recorded: no further run


def run(
    options: WatchOptions, on_run: Callable[[Outcome], None], on_start: Callable[[], None] = lambda: None
) -> list[Outcome]:
    """Run the schedule: ``on_start`` hears when the options have passed every check, ``on_run`` of each
    run once it is stored. Ends early, returning, when a run is interrupted; raises KeyboardInterrupt on
    Ctrl-C or SIGTERM between runs."""
    plan(options.bench)  # every option checked before the first run, and before any traffic
    path = options.db.absolute()
    db = store.open_db(options.db, create=True)  # a --db that cannot be written fails before any traffic too
    on_start()
    outcomes: list[Outcome] = []
    try:
        with _signals_end_the_watch():
            for index in slots(options.schedule):
                outcome = _one(options.bench, path, db, index)
                outcomes.append(outcome)
                on_run(outcome)
                if outcome.interrupted or outcome.stop or (index == 0 and outcome.summary is None):
                    break  # an endpoint unreachable from the start is a typo more often than an outage
    finally:
        db.close()
    return outcomes


def new_run_id() -> str:
    """UTC start and a random tag, so two watches starting in the same second differ."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def _one(options: BenchOptions, path: Path, db: sqlite3.Connection, index: int) -> Outcome:
    run_id = new_run_id()
    partial = store.runs_folder(path) / f"{run_id}.partial"
    partial.mkdir(parents=True)
    started = time.time()
    try:
        summary, _ = run_bench(replace(options, out_dir=partial, html=None, as_json=False))
    except EndpointError as exc:
        with _deferred() as held:
            _drop_if_empty(partial)
            run = store.Run(0, run_id, started, time.time(), None, None, str(exc), __version__)
            stored = _store(db, run, path)
        return Outcome(index, run_id, stored, None, None, _trends(db, path), stop=bool(held))
    except BaseException:
        _drop_if_empty(partial)  # stopped before any request (Ctrl-C while an embedded server started)
        raise
    with _deferred() as held:
        rundir.write(summary, partial)  # summary.json and summary.csv, as bench --out writes them
        if summary.interrupted:
            return Outcome(index, run_id, None, partial, summary, None, interrupted=True)
        folder = partial.with_name(run_id)
        partial.rename(folder)  # the files are whole and in place before the run is in the database
        config = summary.run.config if summary.run is not None else None
        run = store.Run(
            0, run_id, started, time.time(), folder, config, None, __version__, store.results_of(summary)
        )
        stored = _store(db, run, path)
    return Outcome(index, run_id, stored, folder, summary, _trends(db, path), stop=bool(held))


def _store(db: sqlite3.Connection, run: store.Run, path: Path) -> store.Run:
    return replace(run, number=store.add_run(db, run, path.parent))


def _trends(db: sqlite3.Connection, path: Path) -> Trends:
    return trends(store.read(db, path.parent))


def _drop_if_empty(folder: Path) -> None:
    if folder.is_dir() and not any(folder.iterdir()):
        shutil.rmtree(folder, ignore_errors=True)


# --- signals ----------------------------------------------------------------------------------------


def _terminate_raises() -> None:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does: a watch stopped by ``kill`` or a service
    manager between runs ends as one stopped by Ctrl-C."""
    with suppress(ValueError):  # not the main thread: signals are not ours to take
        signal.signal(signal.SIGTERM, signal.default_int_handler)


@contextmanager
def _signals_end_the_watch() -> Iterator[None]:
    """For the watch's length, SIGTERM raises KeyboardInterrupt; then it is as it was."""
    before = signal.getsignal(signal.SIGTERM)
    _terminate_raises()
    try:
        yield
    finally:
        with suppress(ValueError):  # not the main thread: nothing was changed
            signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)


@contextmanager
def _deferred() -> Iterator[list[int]]:
    """Ctrl-C or SIGTERM while a finished run is recorded waits until it is; the list says whether one
    came. Afterwards both raise KeyboardInterrupt again (SIGTERM too: bench's own handler, removed when
    its run ended, had left the default action, which kills)."""
    held: list[int] = []
    try:
        before = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
        signal.signal(signal.SIGTERM, lambda signum, frame: held.append(signum))
    except ValueError:  # not the main thread
        yield held
        return
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if before is None else before)
        _terminate_raises()
