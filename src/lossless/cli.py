"""The ``lossless`` command: parse options into a frozen config, call a stage. Nothing else lives here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from lossless import __version__
from lossless.errors import LosslessError


def _friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User mistakes and unreachable things become one line on stderr and exit code 2, no traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LosslessError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lossless")
def main() -> None:
    """Measure and verify LLM endpoints; serve a real model with lossless speculative decoding."""


# --- models -----------------------------------------------------------------------------------------


@main.group()
def models() -> None:
    """Manage the embedded model cache ($LOSSLESS_HOME/models)."""


@models.command("pull")
@click.argument("name", required=False)
@_friendly_errors
def models_pull(name: str | None) -> None:
    """Fetch an embedded model (default: smollm2-135m-instruct) into the cache."""
    from lossless import models as cache

    model = cache.EMBEDDED.get(name or cache.DEFAULT_MODEL)
    if model is None:
        raise LosslessError(f"unknown model {name!r}; embedded models: {', '.join(sorted(cache.EMBEDDED))}")
    path = cache.pull(model)
    click.echo(str(path))


@models.command("list")
@_friendly_errors
def models_list() -> None:
    """Show the cached models."""
    from lossless import models as cache

    cached = cache.list_cached()
    if not cached:
        click.echo(f"no models cached in {cache.models_dir()} (run `lossless models pull`)", err=True)
    for m in cached:
        click.echo(f"{m.name}\t{m.size_bytes / 1e6:.1f} MB\t{m.path}")


# --- serve ------------------------------------------------------------------------------------------


@main.command()
@click.option("--model", default=None, help="Embedded model name or checkpoint path (GGUF or HF folder).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--dtype", default="float32", show_default=True, type=click.Choice(["float32", "bfloat16"]))
@click.option(
    "--max-queue", default=64, show_default=True, type=click.IntRange(1), help="Queue size before 429."
)
@click.option("--threads", default=None, type=click.IntRange(1), help="Torch threads (default: torch's).")
@_friendly_errors
def serve(model: str | None, host: str, port: int, dtype: str, max_queue: int, threads: int | None) -> None:
    """Serve a model behind an OpenAI-compatible HTTP API."""
    from lossless.config import ServeConfig
    from lossless.server.main import serve as run_server

    run_server(
        ServeConfig(model=model, host=host, port=port, dtype=dtype, max_queue=max_queue, threads=threads)
    )


if __name__ == "__main__":
    main()
