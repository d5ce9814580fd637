"""Preparing a token-exact workload (``bench --input-tokens``): the tokenizer that builds its prompts,
and one request that measures what the first endpoint's template adds and whether it takes ignore_eos."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from lossless.bench.config import BenchConfig
from lossless.bench.options import BenchOptions
from lossless.bench.workload.synthetic import Synthetic
from lossless.client import endpoints as ep
from lossless.client.apis import session as api_session
from lossless.client.call import CallOptions
from lossless.errors import ModelError, UsageError
from lossless.provision.counting import load_token_counter
from lossless.records import RequestRecord


def tokenizer_for(o: BenchOptions, found: tuple[ep.Endpoint, ...], why: str = "--input-tokens") -> str:
    """The tokenizer that builds token-exact prompts: --tokenizer, the first endpoint's, the embedded
    model's (no URL), or the model the first endpoint names when it is a local file or an embedded name."""
    from lossless.models import DEFAULT_MODEL

    given = (
        o.tokenizer
        or (found[0].tokenizer if found else None)
        or (None if found else o.model or DEFAULT_MODEL)
    )
    try:
        spec = given or found[0].model
        load_token_counter(spec)
    except (UsageError, ModelError):
        if given:
            raise
        raise UsageError(
            f"{why} builds prompts with the model's tokenizer: give --tokenizer (a "
            "tokenizer.json, a GGUF file or an embedded model's name)"
        ) from None
    return spec


def calibrate(config: BenchConfig) -> tuple[BenchConfig, list[str]]:
    """One request to the first endpoint: the tokens its template adds around a message (its
    usage.prompt_tokens less the message's own), and whether it takes ignore_eos (a 400 or 422 if not)."""
    from lossless.client.call import Job, call
    from lossless.client.prompt import Prompt

    spec, endpoint = config.synthetic, config.endpoints[0]
    assert spec is not None
    text = "Hello there."

    async def ask(force: bool) -> RequestRecord:
        session = api_session(endpoint, config.call.api, config.connect_timeout)
        prompt = Prompt("calibrate", "calibrate", (("user", text),), max_tokens=1, force_output=force)
        try:
            options = CallOptions(config.call.api, False, 1, None, config.call.total_timeout)
            return await call(
                session, Job(endpoint, prompt, -1, "calibrate", True, time.perf_counter_ns()), 0, options
            )
        finally:
            await session.aclose()

    force = spec.output is not None or spec.trace is not None
    record = asyncio.run(ask(force))
    if force and record.status in (400, 422):
        force, record = False, asyncio.run(ask(False))
    notes = (
        []
        if force or (spec.output is None and spec.trace is None)
        else [f"{endpoint.name} refused ignore_eos: output lengths are asked as max_tokens, not forced"]
    )
    if record.n_in is None:
        notes.append(
            f"{endpoint.name} reports no usage: prompts have the asked number of tokens of content, "
            "and the template's own tokens are not taken off"
        )
    overhead = 0 if record.n_in is None else max(0, record.n_in - load_token_counter(spec.tokenizer)(text))
    return replace(config, synthetic=replace(spec, overhead=overhead, force_output=force)), notes


def synthetic_settings(spec: Synthetic) -> dict[str, Any]:
    """For summary.json's config block."""
    return {
        "input_tokens": spec.input.text if spec.input else None,
        "trace": spec.trace,
        "output_tokens": None if spec.output is None else spec.output.text,
        "tokenizer": spec.tokenizer,
        "template_overhead": spec.overhead,
        "ignore_eos": spec.force_output,
    }
