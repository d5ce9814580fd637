"""The ``lossless`` command. Every command has one shape: its flags -> its frozen options (the command's
``options.py``, where the defaults live) -> its ``run`` -> a typed result -> ``report``. ``cli/<name>.py``
holds the commands of one group.

common.py       ``friendly_errors()``: one-line errors; the value types of options; output checks
bench.py        ``bench()``: latency and throughput, side by side, under load
bench_flags.py  ``load_flags()``, ``client_flags()``, ...: bench's flags (watch's and sweep's too)
measure.py      ``probe()``, ``verify()``: which parameters an endpoint honours; the same model or not
tasks.py        ``tasks()``: success, time and cost per completed task
inspect.py      ``inspect()``: what is behind an endpoint
saved.py        ``report()``, ``compare()``: saved runs
advise.py       ``advise()``: time-outs, hedging and failover predicted from saved runs
watch.py        ``watch()``, ``history()``: bench on a schedule, into a history; its trends
sweep.py        ``sweep()``: server configurations x loads, each until it saturates; the Pareto page
serving.py      ``models()``, ``serve()``, ``draft()``, ``demo()``: the embedded model
reference.py    ``reference_markdown()``: docs/cli.md, every --help (``python -m lossless.cli.reference``)
__main__.py     ``python -m lossless.cli``
"""

from __future__ import annotations

import click

from lossless import __version__
from lossless.cli import advise, bench, inspect, measure, saved, serving, sweep, tasks, watch
from lossless.cli.common import Lossless


@click.group(cls=Lossless, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lossless")
def main() -> None:
    """Measure and verify LLM endpoints; serve a real model with lossless speculative decoding."""


for command in (
    serving.models,
    serving.serve,
    serving.draft,
    bench.bench,
    measure.probe,
    measure.verify,
    tasks.tasks,
    inspect.inspect,
    serving.demo,
    saved.report,
    saved.compare,
    advise.advise,
    watch.watch,
    watch.history,
    sweep.sweep,
):
    main.add_command(command)

__all__ = ["main"]
