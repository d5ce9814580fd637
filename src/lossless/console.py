"""Where output for people goes: stderr, with colour only when it is a terminal."""

from __future__ import annotations

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
