"""The endpoints a command was given, made ready before any run: the model each serves when none was
named (the one its /models lists), every key's variable read, and one request each that stops the
command in one line when a URL, model, key or scheme is wrong (``client.preflight``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from lossless.client import endpoints as ep
from lossless.client.endpoints import Endpoint
from lossless.client.preflight import Answered, check_endpoint, only_model
from lossless.console import stderr_console


def from_urls(urls: Sequence[str], model: str | None, api_key_env: str | None) -> tuple[Endpoint, ...]:
    """``endpoints.parse_urls``; without ``model``, the one model the first URL serves, said on stderr."""
    if model is None and urls:
        base = ep.parse_urls(urls[:1], "-", api_key_env)[0].base_url  # the URL checked first
        model = only_model(base, api_key_env)
        stderr_console().print(f"model: {model} (the only one {ep.public_url(base)}/models lists)")
    return ep.parse_urls(urls, model, api_key_env)


def checked(
    endpoints: Sequence[Endpoint], api: str = "chat", stream: bool = False, timeout: float = 60.0
) -> dict[str, Answered]:
    """Each endpoint's key read (a missing variable is named) and one request answered, by name."""
    for endpoint in endpoints:
        ep.api_key(endpoint)

    async def ask() -> list[Answered]:
        return [await check_endpoint(e, api, stream, timeout) for e in endpoints]

    return {e.name: answered for e, answered in zip(endpoints, asyncio.run(ask()), strict=True)}
