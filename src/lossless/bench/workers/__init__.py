"""More load than one process can make: bench's plan run by several load-generating processes.

``--workers N`` starts N local processes; ``--ray [ADDRESS]`` runs them as Ray tasks on a cluster (or a
local Ray started for the run). Both go through one code path (``driver.run_on_workers``) and differ only
in how a worker is started and how messages travel (``transport``: multiprocessing queues, or Ray queues).

The driver sends each worker its share of one load level at a time (``BenchConfig.worker/workers``), all
starting at the same wall-clock instant, and waits for every worker before the next level. Workers send
back, as they happen, the record an attempt would leave if the worker were lost (when it is sent) and its
real record (when it ends); the driver appends real records to records.jsonl as they arrive, and turns the
attempts of a worker that died into ``worker_lost`` records. Each worker's clock offset to the driver is
measured by round trips before every level and stamped on its records with its uncertainty.

driver.py     ``run_on_workers()``: deals the levels out, gathers the records, keeps the run whole
transport.py  ``start()``: local processes (multiprocessing queues) or Ray tasks
worker.py     ``run_worker()``: one worker: runs its share of each level, streams back what happens
"""
