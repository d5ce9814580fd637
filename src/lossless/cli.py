"""The ``lossless`` command: parse options into a frozen config, call a stage. Nothing else lives here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from lossless import __version__
from lossless.errors import LosslessError, UsageError


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


# --- bench ------------------------------------------------------------------------------------------


@main.command()
@click.argument("urls", nargs=-1)
@click.option("--model", default=None, help="Model name sent to the URLs (the embedded model without URLs).")
@click.option("--endpoints", "endpoints_file", type=click.Path(path_type=Path), help="TOML of [[endpoint]].")
@click.option("--api-key-env", default=None, help="Environment variable holding the URLs' API key.")
@click.option("--suite", default="short", show_default=True, help="short|long|mixed|lengths|file:PATH.jsonl")
@click.option("--api", default="chat", show_default=True, type=click.Choice(["chat", "completions"]))
@click.option("--stream/--no-stream", default=True, show_default=True)
@click.option("--max-tokens", default=128, show_default=True, type=click.IntRange(1))
@click.option("--concurrency", default=None, help="Requests in flight per endpoint; a list (1,4,16) sweeps.")
@click.option("--rate", default=None, type=click.FloatRange(0, min_open=True), help="Open loop: arrivals/s.")
@click.option("--burstiness", default=1.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("--requests", default=None, type=click.IntRange(1), help="Measured requests [default: 20].")
@click.option("--duration", default=None, type=click.FloatRange(0, min_open=True), help="Or: seconds.")
@click.option("--warmup", default=0, show_default=True, type=click.IntRange(0), help="Unmeasured requests.")
@click.option("--retries", default=0, show_default=True, type=click.IntRange(0))
@click.option("--timeout-connect", default=10.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("--timeout-first-token", default=60.0, show_default=True, type=click.FloatRange(0))
@click.option("--timeout-total", default=600.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("--slo", default=None, help="Goodput objectives in ms, e.g. ttft=500,tpot=50,e2e=5000.")
@click.option("--stall-threshold", default=1.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--json", "as_json", is_flag=True, help="Summary as JSON on stdout (the table goes to stderr).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Write records and summaries here.")
@_friendly_errors
def bench(urls: tuple[str, ...], **opts: Any) -> None:
    """Benchmark OpenAI-compatible endpoints (none given: the embedded server)."""
    from lossless.analyze import parse_slo

    slo = parse_slo(opts["slo"])
    if urls or opts["endpoints_file"]:
        _bench(_bench_config(urls, opts, None), slo, opts)
        return
    from lossless.config import ServeConfig
    from lossless.server.launch import start_embedded

    with start_embedded(ServeConfig(port=0, model=opts["model"])) as base_url:
        _bench(_bench_config((base_url,), opts, "embedded"), slo, opts)


def _bench_config(urls: tuple[str, ...], opts: dict[str, Any], embedded: str | None) -> Any:
    import random

    from lossless import endpoints as ep
    from lossless.client.call import CallOptions
    from lossless.run import BenchConfig, LoadLevel
    from lossless.workload.prompts import prompts

    if urls and opts["endpoints_file"]:
        raise UsageError("give endpoint URLs or --endpoints FILE, not both")
    if embedded:
        found: tuple[ep.Endpoint, ...] = (ep.Endpoint(embedded, urls[0], _served_model(urls[0])),)
    else:
        found = ep.load_toml(opts["endpoints_file"]) if opts["endpoints_file"] else ()
        found = found or ep.from_urls(urls, opts["model"], opts["api_key_env"])
    for endpoint in found:
        ep.api_key(endpoint)  # fail now, naming the variable, if a key is missing
    prompts(opts["suite"], random.Random(0))  # an unknown suite fails before any traffic
    if opts["rate"] is not None and opts["concurrency"] is not None:
        raise UsageError("choose --concurrency (closed loop) or --rate (open loop), not both")
    if opts["rate"] is not None:
        loads: tuple[LoadLevel, ...] = (LoadLevel(rate=opts["rate"], burstiness=opts["burstiness"]),)
    else:
        levels = _int_list(opts["concurrency"] or "1", "--concurrency")
        loads = tuple(LoadLevel(concurrency=c) for c in levels)
    requests = opts["requests"] if opts["requests"] or opts["duration"] else 20
    call = CallOptions(
        opts["api"], opts["stream"], opts["max_tokens"], opts["timeout_first_token"], opts["timeout_total"]
    )
    out: Path | None = opts["out_dir"]
    return BenchConfig(
        endpoints=found, call=call, suite=opts["suite"], loads=loads, requests=requests,
        duration=opts["duration"], warmup=opts["warmup"], retries=opts["retries"],
        connect_timeout=opts["timeout_connect"], seed=opts["seed"],
        records_path=None if out is None else out / "records.jsonl",
    )  # fmt: skip


def _served_model(base_url: str) -> str:
    """The name the embedded server answers to (it rejects any other)."""
    import json
    import urllib.request

    # No proxy: one from the environment must not sit between us and our own loopback server.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(base_url + "/models", timeout=10) as resp:
        return str(json.load(resp)["data"][0]["id"])


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{option} wants integers like 1,4,16, got {text!r}") from None
    if not values or min(values) < 1:
        raise UsageError(f"{option} wants positive integers like 1,4,16, got {text!r}")
    return values


def _bench(config: Any, slo: dict[str, float], opts: dict[str, Any]) -> None:
    import asyncio

    from rich.console import Console

    from lossless.analyze import summarize
    from lossless.report import files, terminal
    from lossless.run import run_bench

    if config.records_path is not None and config.records_path.exists():
        config.records_path.unlink()  # a fresh run; records are appended as they finish
    result = asyncio.run(run_bench(config))
    prices = {e.name: (e.price_in, e.price_out) for e in config.endpoints}
    summary = summarize(result.records, prices, spec=result.spec, slo=slo, stall_s=opts["stall_threshold"])
    summary["interrupted"] = result.interrupted
    console = Console(stderr=opts["as_json"])
    if not console.is_terminal:
        console.width = 170  # files and pipes get the whole table, not 80 columns
    terminal.render(summary, console)
    if opts["as_json"]:
        click.echo(files.to_json(summary))
    if opts["out_dir"] is not None:
        files.write(summary, opts["out_dir"])
    if result.interrupted:
        sys.exit(130)


if __name__ == "__main__":
    main()
