"""``lossless bench``: latency and throughput of endpoints side by side, under the loads asked for.

options.py      ``BenchOptions``: every flag of bench (and watch) with its default
run.py          ``run()``: options -> a plan -> the run -> ``analyze.Summary`` and the records
loop.py         ``run_bench()``: the loop: levels, arrivals, windows, probes, retries, records.jsonl
config.py       ``BenchConfig``, ``LoadLevel``, ``RunResult``: what the loop is given, and gives back
phases.py       ``Phases``: warm-up, measured and cool-down windows, by requests or seconds; ``ramp_delay()``
execute.py      ``execute()``, ``repeated()``, ``until_saturated()``: a plan once, N times, to saturation
runtime.py      ``loop_factory()``, ``frozen_heap()``, ``backoff()``, ``scrape_apart()``: a process's runtime
policies.py     ``Policy``, ``send_with_policy()``: hedging and failover: a second attempt, and who wins
capacity.py     ``search()``: the highest load that keeps a share of requests within the --slo objectives
resume.py       ``resume()``: a killed run's finished requests kept, the rest sent again (--resume)
token_exact.py  ``calibrate()``: a token-exact workload fitted to the first endpoint's template
workload/       what is sent: prompt suites, arrivals, conversations, traces, token-exact lengths
workers/        more load than one process makes: local processes or Ray tasks, one clock
"""
