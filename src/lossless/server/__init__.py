"""An OpenAI-compatible HTTP server over the engine (starlette + uvicorn).

    app.py        routes, the request-id/metrics wrapper and admission
    limits.py     what one request may cost (body size, deadlines); the guard that reads bodies
    connection.py uvicorn's h11 protocol with a deadline on request heads
    protocol.py   request bodies -> ApiRequest, or a 400 (the policy on n, aliases, ignored fields)
    prompts.py    ApiRequest -> prompt token ids within the context, without holding the GIL
    worker.py     the bounded FIFO queue and the one thread that runs the engine
    responses.py  a job's events -> a JSON body or an SSE stream; server-timing
    bodies.py     OpenAI response and chunk bodies, both log-probability formats
    metrics.py    /metrics in the Prometheus text format
    main.py       `lossless serve`; launch.py: `start_embedded` for the other commands

Nothing is imported here: ``lossless bench`` against a remote URL must not pay for torch or starlette.
"""
