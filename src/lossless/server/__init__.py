"""An OpenAI-compatible HTTP server over the engine (starlette + uvicorn), which also speaks OpenAI's
Responses API and Anthropic's Messages API by translating them into chat requests.

options.py      ``ServeOptions``: what ``lossless serve`` was asked, every default
main.py         ``serve()``: load the model, bind, announce the URL once ready, serve until Ctrl-C
launch.py       ``start_embedded()``: the server inside another command
compiling.py    ``BackgroundCompile``, ``compile_now()``: ``--compile background|wait``
precompile.py   ``main()``: the child process that fills a compile cache for a background compile
app.py          ``create_app()``: routes, the request-id and metrics wrapper, admission
limits.py       ``Limits``, ``BodyGuard``: what one request may cost; the guard that reads bodies
connection.py   ``guarded_h11()``: uvicorn's h11 protocol with a deadline on request heads
protocol.py     ``parse()``: request bodies -> ``ApiRequest``, or a 400 (n, aliases, ignored fields)
encode.py       ``tokenize()``: a request's prompt -> token ids within the context, off the event loop
tool_calls.py   ``apply()``: tools, tool_choice and response_format in; calls read back out of text
tool_stream.py  ``CallStream``: tool calls read out of a stream as they are generated
jobs.py         ``EngineJob``: one request's work for the engine thread, and the events it hands back
worker.py       ``Worker``: the bounded FIFO queue, each job on a thread that ends with it
replies.py      ``complete()``, ``stream()``: a job's events -> a JSON body or an SSE stream
pieces.py       ``pieces()``, ``answer()``: a job's events as the translated APIs read them
bodies.py       OpenAI response and chunk bodies, both log-probability formats
translate.py    ``chat_request()``: another API's request, translated, parsed by the chat path
dialects.py     ``Dialect``, ``answer()``: the translated APIs, and errors in each one's shape
openai_responses.py  ``parse()``, ``body()``: /v1/responses requests in, Response objects out
responses_stream.py  ``events()``: a Responses stream's server-sent events
anthropic_messages.py  ``parse()``, ``body()``, ``error_response()``: /v1/messages in, Messages out
anthropic_stream.py  ``events()``: a Messages stream's server-sent events
exposition.py   ``ServerMetrics``: /metrics in the Prometheus text format

Nothing is imported here: ``lossless bench`` against a remote URL must not pay for torch or starlette.
"""
