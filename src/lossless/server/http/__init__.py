"""The HTTP service: routes, what one request may cost, connections, the queue and the thread that runs
the engine, and what it exports on /metrics.

app.py           ``create_app()``: routes, the request-id and metrics wrapper, admission
limits.py        ``RequestLimits``, ``BodyGuard``: what one request may cost; the guard that reads bodies
connection.py    ``guarded_h11()``: uvicorn's h11 protocol with a deadline on request heads
worker.py        ``Worker``: the bounded FIFO queue, each job on a thread that ends with it
batch_worker.py  ``BatchWorker``: the same queue drained into a continuous batch (``serve --max-batch``)
metrics.py       ``ExportedMetrics``: /metrics in the Prometheus text format
"""
