"""What every command shares: one-line errors, the value types of options, and output validate."""

from __future__ import annotations

import math
import signal
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, NoReturn

import click

from lossless import validate
from lossless.errors import LosslessError


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User mistakes and unreachable things become one line on stderr and exit code 2, no traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LosslessError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            exit_interrupted("interrupted")

    return wrapper


def exit_interrupted(message: str | None = None) -> NoReturn:
    """Exit 130, as a shell reports Ctrl-C. A further Ctrl-C is ignored from here on: arriving while the
    interpreter shuts down, after the results are written, it killed the process with SIGINT instead
    (Python puts back the default action at shutdown for a Python handler, but not for an ignored
    signal; blocking it in this thread was not enough, another thread took it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if message:
        click.echo(message, err=True)
    sys.exit(130)


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and inf. Every comparison with nan is false, so FloatRange lets
    it through: ``--duration nan`` never stopped sending and ``--burstiness nan`` spun a core at 100%."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


SEED = click.IntRange(0, 2**32 - 1)  # numpy's generators refuse negative seeds; torch's overflow past 2**64
THREADS = click.IntRange(1, 4096)  # torch's thread count; a huge one overflowed after the model loaded
SECONDS = FiniteFloat(0, min_open=True)


def outputs(folder: Path | None, files: tuple[str, ...], page: Path | None = None) -> None:
    """--out and --html can be written: checked before the run, so that no result is lost to a late
    failure (a file where a folder should be, a read-only disk)."""
    if folder is not None:
        validate.writable_dir(folder, "--out", files)
    if page is not None:
        validate.writable_file(page, "--html")


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def json_flag(what: str) -> Decorator:
    return click.option(
        "--json", "as_json", is_flag=True, help=f"{what} as JSON on stdout (the table goes to stderr)."
    )


def endpoint_flags(fn: Callable[..., Any]) -> Callable[..., Any]:
    """URLS, --model, --endpoints and --api-key-env: the endpoints a multi-endpoint command measures."""
    fn = click.option("--api-key-env", default=None, help="Environment variable holding the URLs' API key.")(
        fn
    )
    fn = click.option(
        "--endpoints", "endpoints_file", type=click.Path(path_type=Path), help="TOML of [[endpoint]]."
    )(fn)
    fn = click.option(
        "--model", default=None, help="Model name sent to the URLs (the embedded model without URLs)."
    )(fn)
    return click.argument("urls", nargs=-1)(fn)


def output_flags(what: str, writes: str, html: bool = True) -> Decorator:
    """--json, --out and (with ``html``) --html: where a measuring command's result goes."""
    flags: list[Decorator] = [
        json_flag(what),
        click.option("--out", "out_dir", type=click.Path(path_type=Path), help=f"Write {writes} here."),
    ]
    if html:
        flags.append(
            click.option(
                "--html", type=click.Path(path_type=Path), help="Write a self-contained HTML report here."
            )
        )

    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        for flag in reversed(flags):
            fn = flag(fn)
        return fn

    return apply
