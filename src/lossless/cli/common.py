"""What every command shares: one error style, one vocabulary of options, the value types of options,
examples in --help, and the checks of where a command writes.

One vocabulary: the endpoints are URLS, --model, --api-key-env and --endpoints FILE (TOML
``[[endpoint]]`` tables) everywhere; --out DIR, --html PATH and --json wherever a result is written;
--overwrite to replace a run already in --out; --timeout SECONDS for one request; --set and --limit for
a task set and its first N tasks. An older spelling still works (``renamed``): hidden from --help, it
says on stderr what it is now called.
"""

from __future__ import annotations

import math
import signal
import sys
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, NoReturn

import click

from lossless import validate
from lossless.client.api_names import ABOUT, APIS, PATHS
from lossless.errors import LosslessError, UsageError

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


class Lossless(click.Group):
    """The ``lossless`` group: click's own usage errors (an unknown option, a value of the wrong type)
    are one line in our style, ``error: ...``, exit 2, like every other mistake."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:  # a bare group: its help, as click prints it
            click.echo(exc.ctx.get_help(), err=True)
            sys.exit(2)
        except click.UsageError as exc:
            where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            message = exc.format_message().rstrip(".")
            click.echo(f"error: {message[:1].lower()}{message[1:]}{where}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            exit_interrupted("interrupted")


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

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        return "FLOAT"


SEED = click.IntRange(0, 2**32 - 1)  # numpy's generators refuse negative seeds; torch's overflow past 2**64
THREADS = click.IntRange(1, 4096)  # torch's thread count; a huge one overflowed after the model loaded
SECONDS = FiniteFloat(0, min_open=True)
SEED_HELP = "Seed of every random draw (prompts, arrivals, resampling): the same seed, the same run."


def examples(*lines: str) -> str:
    """An Examples section for a command's --help (click's epilog), one command a line, as typed."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


_RENAMED: dict[str, tuple[str, str]] = {}  # parameter -> (old spelling, new spelling)


def renamed(old: str | tuple[str, ...], new: str, dest: str, **option: Any) -> Decorator:
    """``old``, the option's earlier spelling (or spellings), kept for scripts: hidden from --help, it
    stands for ``new`` (the parameter ``dest``) and says so on stderr."""
    spellings = (old,) if isinstance(old, str) else old
    _RENAMED[dest] = ("/".join(spellings), new)

    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **unrenamed(kwargs))

        return click.option(*spellings, f"renamed_{dest}", hidden=True, default=None, **option)(wrapper)

    return apply


def unrenamed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each old spelling given put in its new one's place (said on stderr), and gone."""
    out = {k: v for k, v in kwargs.items() if not k.startswith("renamed_")}
    for key, value in kwargs.items():
        if key.startswith("renamed_") and value is not None and value != ():
            dest = key.removeprefix("renamed_")
            old, new = _RENAMED[dest]
            click.echo(f"note: {old} is now {new}", err=True)
            out[dest] = value
    return out


def wrote(paths: Sequence[Path | None]) -> None:
    """Every command that writes files ends by naming them, on stderr (stdout may carry --json)."""
    written = [str(p) for p in paths if p is not None]
    if written:
        click.echo(f"wrote: {', '.join(written)}", err=True)


def outputs(
    folder: Path | None,
    files: tuple[str, ...],
    page: Path | None = None,
    *,
    overwrite: bool = False,
    resume: bool = False,
) -> None:
    """--out and --html can be written: checked before the run, so that no result is lost to a late
    failure (a file where a folder should be, a read-only disk). A --out folder that holds another run
    of this command (any of ``files``, what it writes there) is refused, so that no old file is left
    beside the new ones, unless ``overwrite`` (those files are removed now) or ``resume`` (bench
    continues the run that is there). Other commands' files stay: inspect's cards beside a bench run
    are what its report links to."""
    if folder is not None:
        validate.writable_dir(folder, "--out", files)
        there = [name for name in files if (folder / name).is_file()]
        if there and overwrite:
            for name in there:
                (folder / name).unlink()
        elif there and not resume:
            raise UsageError(
                f"--out {folder} holds another run ({', '.join(there)}): give --overwrite to replace it, or "
                "another folder"
            )
    if page is not None:
        validate.writable_file(page, "--html")


def json_flag(what: str) -> Decorator:
    return click.option(
        "--json", "as_json", is_flag=True, help=f"{what} as JSON on stdout (the table goes to stderr)."
    )


# The APIs are named once, in client.api_names (light: no aiohttp); each command imports its list from there.
API_HELP = {api: f"{PATHS[api]} ({ABOUT[api]})" for api in APIS}


def api_flag(default: str, apis: Sequence[str], more: str = "") -> Decorator:
    """--api: which of the APIs the requests are made in (``client.apis``); ``more`` says what it changes."""
    told = "; ".join(f"{a}: {API_HELP[a]}" for a in apis)
    return click.option(
        "--api",
        default=default,
        show_default=True,
        type=click.Choice(list(apis)),
        help=f"The API the requests are made in - {told}." + (f" {more}" if more else ""),
    )


MODEL_HELP = (
    "Model name sent to the URLs [default: the one model their /models lists; without URLs, the "
    "embedded model, or the checkpoint this names]."
)
ENDPOINTS_HELP = (
    "A TOML file of [[endpoint]] tables (name, base_url, model, api_key_env, body, headers, price, "
    "tokenizer), instead of URLs: see the README."
)


def endpoint_flags(fn: Callable[..., Any]) -> Callable[..., Any]:
    """URLS, --model, --endpoints and --api-key-env: the endpoints a command measures."""
    fn = click.option(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="The environment variable holding the URLs' API key (its name; the key stays in the "
        "environment).",
    )(fn)
    fn = click.option("--endpoints", "endpoints_file", type=click.Path(path_type=Path), help=ENDPOINTS_HELP)(
        fn
    )
    fn = click.option("--model", default=None, help=MODEL_HELP)(fn)
    return click.argument("urls", nargs=-1)(fn)


def output_flags(what: str, writes: str, html: bool = True) -> Decorator:
    """--json, --out, --overwrite and (with ``html``) --html: where a command's result goes."""
    flags: list[Decorator] = [
        json_flag(what),
        click.option("--out", "out_dir", type=click.Path(path_type=Path), help=f"Write {writes} here."),
        click.option(
            "--overwrite",
            is_flag=True,
            help="Replace the run already in --out (its files are removed first).",
        ),
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
