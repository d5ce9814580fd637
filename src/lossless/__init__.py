"""lossless: how fast is an LLM endpoint really, and is it still the same model?

One room per job, each importing only the rooms below it (tests/unit/test_architecture.py's LAYERS):

cli/          the ``lossless`` command: flags -> a command's options -> its run -> report
demo/         ``lossless demo``: the whole story on the embedded model
report/       what a person sees of every command's result: tables, JSON, HTML
watch/        ``lossless watch`` / ``history``: bench on a schedule, a history with alarms
sweep/        ``lossless sweep``: server configurations x loads, each until it saturates; the Pareto page
inspect/      ``lossless inspect``: what is behind an endpoint (speculation, identity, precision)
advise/       ``lossless advise``: time-outs, hedging and failover from measured runs
probe/        ``lossless probe``: which request parameters an endpoint honours
draft/        ``lossless draft train``: the DSpark-style draft head, trained
bench/        ``lossless bench``: latency and throughput side by side, under load
verify/       ``lossless verify``: the same model or not, with evidence
tasks/        ``lossless tasks``: success, time and cost per completed task
provision/    the endpoints given, or the embedded model served; an endpoint's tokenizer
rundir.py     ``read_run()``, ``write()``: a run folder, the one format every --out writes and report reads
client/       the only edge to the network: one call -> one record, reply or turn
analyze/      records -> numbers, pure
server/       the OpenAI-compatible server over the engine
engine/       the reference engine: the model, its weights and kernels, speculative decoding
models.py     ``resolve()``, ``pull()``: the embedded model cache
validate.py   ``http_url()``, ``int_list()``: checks of what a user gives
console.py    ``progress_bar()``: output for people, on stderr
atomic.py     ``write_atomic()``: files written whole or not at all
records.py    ``RequestRecord``, ``Failure``: one flat record per request attempt, errors as data
errors.py     ``LosslessError``: the one error tree
"""

from lossless.errors import (
    CheckpointError,
    EndpointError,
    LosslessError,
    ModelError,
    ModelFetchError,
    UsageError,
)

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "EndpointError",
    "LosslessError",
    "ModelError",
    "ModelFetchError",
    "UsageError",
    "__version__",
]
