"""Where output for people goes: stderr, with colour only when it is a terminal."""

from __future__ import annotations

from functools import cache

from rich.console import Console


@cache
def stderr_console() -> Console:
    return Console(stderr=True)
