"""The ``lossless`` command. Every command has one shape: its flags -> frozen options
(``lossless.options``, where the defaults live) -> its stage's ``run`` -> a typed result -> ``report``.

common.py   one-line errors, value types, output checks
measure.py  bench, probe, verify
tasks.py    tasks (success, time and cost per completed task)
inspect.py  inspect (what is behind an endpoint: speculative decoding, identity)
saved.py    report, compare (saved runs)
advise.py   advise (time-outs, hedging and failover predicted from saved runs)
watch.py    watch (bench on a schedule, into a history), history (its trends and changes)
serving.py  models, serve, draft train, demo (the embedded model)
"""

from __future__ import annotations

import click

from lossless import __version__
from lossless.cli import advise, inspect, measure, saved, serving, tasks, watch


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lossless")
def main() -> None:
    """Measure and verify LLM endpoints; serve a real model with lossless speculative decoding."""


for command in (
    serving.models, serving.serve, serving.draft, measure.bench, measure.probe, measure.verify,
    tasks.tasks, inspect.inspect, serving.demo, saved.report, saved.compare, advise.advise, watch.watch,
    watch.history,
):  # fmt: skip
    main.add_command(command)

__all__ = ["main"]
