"""Checks of what a user gives: numbers, lists of them, URLs, headers and bodies from endpoint files, and
the folders and files a command will write. Each raises ``UsageError`` naming what was wrong, so a
command refuses bad input before any work or traffic starts, never with a traceback mid-run.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lossless.errors import UsageError


def is_number(value: Any) -> bool:
    """A finite int or float. Not a bool: Python counts True as the int 1 (``price = { input = true }``)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_count(value: Any, least: int = 1) -> bool:
    """An int (not a bool) of at least ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


# --- lists given as one option -----------------------------------------------------------------------

MAX_CONCURRENCY = 100_000  # in flight per endpoint, each a task and a socket: past this, memory runs out


def int_list(text: str, option: str, most: int = MAX_CONCURRENCY) -> tuple[int, ...]:
    """``"1,4,16"`` -> (1, 4, 16), each in 1..most."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{option} wants integers like 1,4,16, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > most:
        raise UsageError(f"{option} wants positive integers up to {most:,} like 1,4,16, got {text!r}")
    return values


def float_list(text: str, option: str, lo: float = 1e-6, hi: float = 1e6) -> tuple[float, ...]:
    """``"1,2.5,4"`` -> (1.0, 2.5, 4.0), each finite and in lo..hi."""
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{option} wants numbers like 1,2,4, got {text!r}") from None
    if not values or not all(lo <= v <= hi for v in values):  # (nan and inf fail this too)
        raise UsageError(f"{option} wants numbers from {lo:g} to {hi:g} like 1,2,4, got {text!r}")
    return values


# --- what goes on the wire --------------------------------------------------------------------------

_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")  # whitespace and control characters are never in a URL
# RFC 9110 field names are tokens; a value may hold any visible character, spaces and tabs, and no CR, LF,
# NUL or other control character (aiohttp refuses them only when the request is made)
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_MAX_BODY_DEPTH = 64  # far beyond any real request field; json.dumps would recurse ~1000 deep mid-run


def http_url(url: str, where: str) -> str:
    """``url`` without a trailing slash, once it is an http(s) URL with a host and a usable port.

    urlsplit refuses a malformed IPv6 host at once, but a bad port only when ``.port`` is read: without
    reading it here, ``:99999`` failed after the whole run, where the summary names the host."""
    bad = f"{where}: base URL {url!r} is not an http(s) URL like https://host/v1"
    if _URL_FORBIDDEN.search(url):
        raise UsageError(f"{bad} (it holds a space or a control character)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"{bad} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(bad)
    if port == 0:
        raise UsageError(f"{bad} (port 0 takes no connection)")
    return url.rstrip("/")


def http_headers(headers: Mapping[Any, Any], where: str) -> dict[str, str]:
    """Extra request headers, each one HTTP can carry."""
    out = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise UsageError(
                f"{where}: header name {name!r} is not one HTTP can carry (letters, digits and "
                "!#$%&'*+-.^_`|~ only)"
            )
        if not isinstance(value, str):
            raise UsageError(f"{where}: header {name!r} must be a string (in quotes), got {value!r}")
        if _HEADER_VALUE_FORBIDDEN.search(value):
            raise UsageError(
                f"{where}: header {name!r} holds a line break or control character, which HTTP cannot carry"
            )
        out[name] = value
    return out


def json_body(body: Mapping[Any, Any], where: str) -> dict[str, Any]:
    """Extra request fields that JSON can carry: TOML's dates and times cannot (json.dumps failed on
    them mid-run), nor nan and inf (strict parsers refuse the bare NaN Python writes)."""
    problem = _json_problem(body, 0)
    if problem is not None:
        raise UsageError(f"{where}: 'body' {problem}")
    return dict(body)


def _json_problem(value: Any, depth: int) -> str | None:
    if depth > _MAX_BODY_DEPTH:
        return f"nests more than {_MAX_BODY_DEPTH} levels deep"
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return next((p for p in (_json_problem(v, depth + 1) for v in value) if p is not None), None)
    if isinstance(value, float) and not math.isfinite(value):
        return f"holds {value}, which JSON cannot carry"
    if value is None or isinstance(value, str | int | float | bool):
        return None
    return f"holds {value!r} ({type(value).__name__}), which JSON cannot carry"


def env_name(name: Any, where: str) -> str:
    """The name of an environment variable: no '=' and no NUL, which no variable's name can hold."""
    if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
        raise UsageError(f"{where}: {name!r} is not the name of an environment variable")
    return name


# --- where a command writes -------------------------------------------------------------------------


def writable_dir(folder: Path, option: str, files: Iterable[str] = ()) -> None:
    """``folder`` can be created and written. ``files``: names the command will write there; any that
    exists must be a plain file."""
    _try_writing(folder, f"{option} {folder}")
    for name in files:
        _plain_or_absent(folder / name, option)


def writable_file(path: Path, option: str) -> None:
    """``path`` can be written whole (a temporary file beside it, then renamed over it)."""
    if path.is_dir():
        raise UsageError(f"{option} {path}: a folder, not a file")
    _try_writing(path.parent, f"{option} {path}")
    _plain_or_absent(path, option)


def _try_writing(folder: Path, what: str) -> None:
    """Create ``folder`` (and what is missing above it) and a file in it, then remove what was created:
    a folder that cannot be written fails now, before the run, not after it with its results lost."""
    created: list[Path] = []
    try:
        for level in (*reversed(folder.parents), folder):
            if not level.exists():
                level.mkdir()
                created.append(level)
            elif not level.is_dir():
                raise UsageError(f"{what}: {level} is a file, not a folder")
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".lossless-check-")
        os.close(fd)
        os.unlink(probe)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise UsageError(f"{what}: cannot write there ({getattr(exc, 'strerror', None) or exc})") from None
    finally:
        for level in reversed(created):
            with contextlib.suppress(OSError):  # not empty after all: someone else writes there too
                level.rmdir()


def _plain_or_absent(path: Path, option: str) -> None:
    # the rename that writes a file whole would replace a folder's entry, a FIFO or a device (/dev/null)
    if path.exists() and not path.is_file():
        raise UsageError(f"{option}: {path} exists and is not a plain file")
