"""Where output for people goes: stderr, with colour only when it is a terminal."""

from __future__ import annotations

import time
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


def phase(text: str) -> None:
    """One line on stderr saying what a long command is doing now: a log or a pipe gets it as plain text,
    a terminal as a dim line (above any progress bar)."""
    stderr_console().print(f"[dim]{text}[/dim]", highlight=False)


@contextmanager
def progress_bar(label: str, total: int | None) -> Iterator[Callable[[], None] | None]:
    """A progress bar on stderr while work runs, advanced by one per call of what it yields. When stderr
    is not a terminal (CI, pipes, files) there is no bar (None): a line when the work starts and one
    when it ends, so a log says what happened without a redraw in every line. The bar redraws 4 times a
    second from its own thread, briefly holding the GIL, and is gone once the work ends."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        started = time.monotonic()
        phase(f"{label}: {total if total is not None else 'as many as fit'} to go")
        yield None
        phase(f"{label}: done in {time.monotonic() - started:.0f} s")
        return
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, refresh_per_second=4) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)
