"""Debian's chromium driven by playwright's Python package, for the HTML report tests (tests/e2e).

``MARKS`` skips a module ONLY when /usr/bin/chromium is missing AND the CI environment variable is not
set: in CI a missing browser fails rather than hides (CI installs `apt-get install chromium` and `pip
install playwright`; `playwright install` is not used, the system chromium is).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists() and not os.environ.get("CI"),
        reason="needs /usr/bin/chromium (apt-get install chromium); never skipped when CI is set",
    ),
]


def chromium() -> Iterator[Any]:
    """A launched browser for a module fixture to yield from. Start it after every command the module
    runs: playwright's sync API holds an event loop on this thread, and the commands start their own."""
    if os.environ.get("CI"):
        import playwright.sync_api as sync_api
    else:
        sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def watch(page: Any) -> tuple[list[str], list[str]]:
    """The page's console errors and every URL it requests, collected from now on."""
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    return errors, requests
