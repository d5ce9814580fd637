"""Where output for people goes: stderr, with colour only when it is a terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache

from rich.console import Console


@cache
def stderr_console() -> Console:
    return Console(stderr=True)


def people_console(stderr: bool) -> Console:
    """Tables for people: on stdout, or on stderr when stdout carries data (``--json``).

    Files and pipes get the whole table at a fixed width rather than rich's 80-column default.
    """
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.width = 170
    return console


@contextmanager
def progress_bar(label: str, total: int | None) -> Iterator[Callable[[], None] | None]:
    """A progress bar on stderr while work runs, advanced by one per call of what it yields; None (no bar)
    when stderr is not a terminal (CI, pipes, files), so logs stay clean. It redraws 4 times a second
    from its own thread, briefly holding the GIL, and is gone once the work ends."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, refresh_per_second=4) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)
