"""``lossless tasks``: TasksOptions -> every task (and sample) on every endpoint -> a ``TasksResult``
(``report/tasks.py`` renders it).

Endpoints run one after another, so that one's load never slows another's tasks; within an endpoint,
``concurrency`` tasks run at once. Every endpoint gets the same tasks and samples, so runs pair.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from lossless.client import endpoints as ep
from lossless.client.apis import session as api_session
from lossless.client.endpoints import Endpoint
from lossless.client.preflight import check_endpoint
from lossless.console import progress_bar
from lossless.provision import embedded, given
from lossless.provision.counting import find_counter
from lossless.tasks.options import TasksOptions
from lossless.tasks.result import TaskRun, TasksResult
from lossless.tasks.runner import RunnerConfig, run_task
from lossless.tasks.sets import load_set
from lossless.tasks.spent import Counter, prices_of
from lossless.tasks.tally import compare_tasks, tally_endpoint
from lossless.tasks.task import Task


async def run_endpoint(
    endpoint: Endpoint,
    tasks: tuple[Task, ...],
    config: RunnerConfig,
    *,
    samples: int = 1,
    concurrency: int = 1,
    price_tool: float | None = None,
    connect_timeout: float = 10.0,
    counter: Counter | None = None,
    on_done: Callable[[], None] | None = None,
) -> list[TaskRun]:
    """Every task ``samples`` times on one endpoint, ``concurrency`` at once, in task order; ``counter``
    counts the output tokens of answers without usage; ``on_done`` is called as each run ends."""
    session = api_session(endpoint, config.api, connect_timeout)
    gate = asyncio.Semaphore(concurrency)
    prices = prices_of(endpoint, price_tool)

    async def one(task: Task, sample: int) -> TaskRun:
        async with gate:
            done = await run_task(session, endpoint, task, sample, config, prices, counter)
        if on_done is not None:
            on_done()
        return done

    try:
        return list(await asyncio.gather(*(one(t, s) for t in tasks for s in range(samples))))
    finally:
        await session.aclose()


async def preflight(endpoint: Endpoint, stream: bool = True, api: str = "chat") -> bool:
    """One one-token chat request before any task, sent as the tasks' are (streamed or not), so that a
    wrong URL, model or key stops the run in one line instead of every task ending in the same error
    (``client.preflight``; a 429 or 5xx is left to the tasks' retries). Returns whether an answer came
    without usage (llama.cpp streams none): then its tokenizer is wanted."""
    answered = await check_endpoint(endpoint, api, stream)
    return answered.ok and not answered.usage


async def run_all(
    endpoints: tuple[Endpoint, ...], tasks: tuple[Task, ...], options: TasksOptions
) -> TasksResult:
    config = runner_config(options)
    counters: dict[str, Counter | None] = {}
    for endpoint in endpoints:
        no_usage = await preflight(endpoint, config.stream, config.api)
        # found before any task runs, so that loading it (seconds) is in no task's time
        counters[endpoint.name] = await asyncio.to_thread(find_counter, endpoint) if no_usage else None
    per: list[list[TaskRun]] = []
    for endpoint in endpoints:
        with progress_bar(f"tasks on {endpoint.name}", len(tasks) * options.samples) as advance:
            per.append(
                await run_endpoint(
                    endpoint,
                    tasks,
                    config,
                    samples=options.samples,
                    concurrency=options.concurrency,
                    price_tool=options.price_tool,
                    counter=counters[endpoint.name],
                    on_done=advance,
                )
            )
    summaries = tuple(
        tally_endpoint(e, runs, options.samples, options.seed) for e, runs in zip(endpoints, per, strict=True)
    )
    comparisons = tuple(
        compare_tasks(summaries[0], summaries[i], (per[0], per[i]), options.margin, options.seed)
        for i in range(1, len(summaries))
    )
    settings = {
        "tasks": len(tasks),
        "samples": options.samples,
        "repairs": options.repairs,
        "api": options.api,
        "concurrency": options.concurrency,
        "retries": options.retries,
        "stream": options.stream,
        "max_tokens": options.max_tokens,
        "temperature": options.temperature,
        "margin": options.margin,
        "tool_choice": options.tool_choice,
        "price_tool": options.price_tool,
    }
    runs = tuple(r for rs in per for r in rs)
    return TasksResult(options.task_set, settings, summaries, comparisons, runs)


def runner_config(options: TasksOptions) -> RunnerConfig:
    return RunnerConfig(
        api=options.api,
        stream=options.stream,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        tool_choice=options.tool_choice,
        retries=options.retries,
        retry_wait=options.retry_wait,
        repairs=options.repairs,
        call_timeout=options.timeout,
        seed=options.seed,
    )


def named(options: TasksOptions) -> tuple[Endpoint, ...]:
    """The endpoints named (URLs or an endpoints file), keys checked; () for the embedded model."""
    o = options
    if o.endpoints_file is not None:
        found = ep.load_toml(o.endpoints_file)
    elif o.urls:
        found = given.from_urls(o.urls, o.model, o.api_key_env)
    else:
        return ()
    for endpoint in found:
        ep.api_key(endpoint)  # fail now, naming the variable, if a key is missing
    return found


def run(options: TasksOptions) -> TasksResult:
    """The task set on the endpoints given; with none, on the embedded model served plainly and
    speculatively (the default drafter), two servers over one copy of the weights, as verify compares them."""
    tasks = load_set(options.task_set)
    if options.limit is not None:
        tasks = tasks[: options.limit]
    with embedded.endpoints(named(options), options.embedded, speculative=True) as found:
        return asyncio.run(run_all(tuple(priced(e, options) for e in found), tasks, options))


def priced(endpoint: Endpoint, options: TasksOptions) -> Endpoint:
    """The flags' prices where the endpoint (its endpoints file) names none, as the embedded ones never do."""
    o = options
    return replace(
        endpoint,
        price_in=endpoint.price_in if endpoint.price_in is not None else o.price_in,
        price_out=endpoint.price_out if endpoint.price_out is not None else o.price_out,
        price_cached_in=endpoint.price_cached_in
        if endpoint.price_cached_in is not None
        else o.price_cached_in,
    )
