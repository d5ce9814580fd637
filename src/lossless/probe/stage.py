"""``lossless probe``: run every check against one endpoint -> a ``ProbeResult``; render it elsewhere."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lossless.endpoints import Endpoint, public_url
from lossless.probe.checks import CHECKS, Check, Settings
from lossless.probe.wire import Wire

VERDICT_STYLE = {"honoured": "green", "ignored": "red", "rejected": "yellow", "unsupported": "dim"}


@dataclass(frozen=True)
class ProbeConfig:
    endpoint: Endpoint | None  # None: probe the embedded server
    settings: Settings = field(default_factory=Settings)
    embedded_model: str | None = None  # the embedded server's checkpoint (no endpoint)
    out_dir: Path | None = None  # write probe.json here


@dataclass(frozen=True)
class ProbeResult:
    endpoint: Endpoint
    checks: tuple[Check, ...]

    def as_dict(self) -> dict[str, Any]:
        e = self.endpoint
        return {
            "endpoint": {"name": e.name, "base_url": public_url(e.base_url), "model": e.model},
            "checks": [asdict(c) for c in self.checks],
        }


async def probe(endpoint: Endpoint, settings: Settings) -> ProbeResult:
    checks: list[Check] = []
    async with Wire(endpoint) as w:
        for run in CHECKS:  # one after another: a check's latencies must not share the server with another's
            checks.extend(await run(w, settings))
    return ProbeResult(endpoint, tuple(checks))


def run_probe(config: ProbeConfig) -> ProbeResult:
    if config.endpoint is not None:
        return asyncio.run(probe(config.endpoint, config.settings))
    from lossless.config import ServeConfig
    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model

    serve = ServeConfig(port=0, model=config.embedded_model)
    loaded = load_model(serve)
    with start_embedded(serve, loaded=loaded) as url:
        return asyncio.run(probe(Endpoint("embedded", url, loaded.name), config.settings))


def probe_config(url: str | None, opts: dict[str, Any]) -> ProbeConfig:
    """The CLI's options -> a ProbeConfig; a missing key or model is a UsageError before any traffic."""
    from lossless import endpoints as ep

    endpoint = ep.from_urls((url,), opts["model"], opts["api_key_env"])[0] if url else None
    if endpoint is not None:
        ep.api_key(endpoint)  # fail now, naming the variable, if a key is missing
    settings = Settings(repeats=opts["repeats"], max_tokens=opts["max_tokens"])
    return ProbeConfig(endpoint, settings, None if url else opts["model"], opts["out_dir"])


def to_json(result: ProbeResult) -> str:
    from lossless.report.files import strict_json

    return strict_json(result.as_dict())


def write(result: ProbeResult, out_dir: Path) -> Path:
    from lossless.report.files import write_atomic

    return write_atomic(out_dir / "probe.json", to_json(result) + "\n")


def render(result: ProbeResult, console: Console) -> None:
    e = result.endpoint
    table = Table(title=f"probe: {e.name} ({public_url(e.base_url)}, model {e.model})", title_justify="left")
    table.add_column("parameter")
    table.add_column("verdict")
    table.add_column("evidence")
    table.add_column("note")
    for c in result.checks:
        evidence = ", ".join(f"{k}={v}" for k, v in c.evidence.items())
        style = VERDICT_STYLE[c.verdict]
        table.add_row(c.name, f"[{style}]{c.verdict}[/{style}]", evidence, c.note)
    console.print(table)
