"""``lossless probe``: ProbeOptions -> every check against one endpoint -> a ``ProbeResult``
(``report.probe`` renders it)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any

from lossless.client import endpoints as ep
from lossless.client.endpoints import Endpoint, public_url
from lossless.client.wire import Wire
from lossless.console import phase
from lossless.errors import UsageError
from lossless.probe import tool_checks
from lossless.probe.checks import CHECKS, Check, Settings
from lossless.probe.options import ProbeOptions
from lossless.provision import embedded, given


@dataclass(frozen=True)
class ProbeResult:
    endpoint: Endpoint
    checks: tuple[Check, ...]
    api: str = "chat"

    def as_dict(self) -> dict[str, Any]:
        e = self.endpoint
        return {
            "endpoint": {"name": e.name, "base_url": public_url(e.base_url), "model": e.model},
            "api": self.api,
            "checks": [asdict(c) for c in self.checks],
        }


async def probe_endpoint(endpoint: Endpoint, settings: Settings, api: str = "chat") -> ProbeResult:
    checks: list[Check] = []
    async with Wire(endpoint, api=api) as w:
        # one after another: a check's latencies must not share the server with another's
        for check in (*CHECKS, tool_checks.tool_calling, tool_checks.response_format):
            phase(f"probe {endpoint.name}: {check.__name__.replace('_', ' ')}")
            checks.extend(await check(w, settings))
    return ProbeResult(endpoint, tuple(checks), api)


def _named(options: ProbeOptions) -> tuple[Endpoint, ...]:
    if options.endpoints_file is not None:
        if options.url:
            raise UsageError("give a URL or --endpoints FILE, not both")
        found = ep.load_toml(options.endpoints_file)
        if len(found) != 1:
            raise UsageError(f"probe checks one endpoint: {options.endpoints_file} has {len(found)}")
        return found
    return given.from_urls((options.url,), options.model, options.api_key_env) if options.url else ()


def run(options: ProbeOptions) -> ProbeResult:
    """Probe the URL, or the embedded server started for the occasion; a missing key fails first, then a
    URL, model or key that one request shows wrong: an error status is never read as a verdict."""
    named = _named(options)
    given.checked(named, options.api)
    settings = Settings(repeats=options.repeats, max_tokens=options.max_tokens)
    with embedded.endpoints(named, options.embedded) as found:
        return asyncio.run(probe_endpoint(found[0], settings, options.api))
