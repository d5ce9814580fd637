"""``lossless verify``: VerifyOptions -> gather from both endpoints, judge -> a ``VerifyResult``
(``report.verify`` renders it)."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from dataclasses import replace

from lossless.client import endpoints as ep
from lossless.client.endpoints import Endpoint
from lossless.console import stderr_console
from lossless.provision import embedded, given
from lossless.tasks.sets import load_set
from lossless.verify.budget import Criteria, can_show
from lossless.verify.evidence import gather
from lossless.verify.judge import judge
from lossless.verify.options import VerifyOptions
from lossless.verify.result import VerifyConfig, VerifyResult

EXIT_CODES = {"equivalent": 0, "different": 1, "inconclusive": 3}


async def verify(baseline: Endpoint, candidate: Endpoint, config: VerifyConfig) -> VerifyResult:
    """Judged look by look; the first settled look (or the last) is the result."""
    async with aclosing(gather(baseline, candidate, config)) as looks:
        async for evidence in looks:
            result = judge(baseline, candidate, config, evidence)
            if result.decision.settled:
                break
    return result


def run(options: VerifyOptions) -> VerifyResult:
    """Verify the two endpoints given; with none, the embedded engine's speculative decoding (the default
    drafter) against its plain decoding, two servers over one copy of the weights."""
    config = VerifyConfig(
        options.budget,
        options.api,
        options.seed,
        Criteria(tolerance=options.tolerance),
        timeout=options.timeout,
        logprobs=options.logprobs,
        # loaded before any server starts or request is sent: a wrong name fails at once
        task_set=load_set(options.task_set)[: options.tasks_limit] if options.task_set else None,
    )
    named = pair(options)
    tasks = len(config.task_set) if config.task_set is not None else None
    if cannot := can_show(config.budget, config.criteria, tasks)[2]:  # said before any sample is drawn
        stderr_console().print(
            f"note: --budget {config.budget.label} cannot confirm equivalence ({cannot}): it can find "
            "differences, and ends inconclusive where it finds none",
            highlight=False,
            soft_wrap=True,
        )
    if not named:
        # one engine behind two servers: its requests take turns, so neither server slows the other
        config = replace(config, concurrency=1)
    with embedded.endpoints(named, options.embedded, speculative=True) as (baseline, candidate):
        return asyncio.run(verify(baseline, candidate, config))


def pair(options: VerifyOptions) -> tuple[Endpoint, ...]:
    """(baseline, candidate) from the URLs or the endpoints file, keys checked; () for the embedded engine."""
    o = options
    if o.endpoints_file is not None:
        found = ep.load_pair(o.endpoints_file)
    elif o.baseline is None or o.candidate is None:
        return ()
    else:
        base = given.from_urls((o.baseline,), o.model, o.api_key_env)[0]
        cand = given.from_urls(
            (o.candidate,), o.candidate_model or o.model, o.candidate_api_key_env or o.api_key_env
        )[0]
        found = (replace(base, name="baseline"), replace(cand, name="candidate"))
    given.checked(found, o.api, timeout=o.timeout)  # a wrong URL, model or key: one line, before any run
    return found
