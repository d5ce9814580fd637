"""An OpenAI-compatible HTTP server over the engine (starlette + uvicorn), which also speaks OpenAI's
Responses API and Anthropic's Messages API by translating them into chat requests.

Here the process: the model loaded, the socket bound, uvicorn run, the forward passes compiled; below it
three rooms, each importing only those after it: the HTTP service (http/), the APIs it translates
(dialects/), and OpenAI's own protocol (openai/); jobs.py, under all three, is what they share with the
engine thread.

options.py      ``ServeOptions``: what ``lossless serve`` was asked, every default
main.py         ``serve()``: load the model, bind, announce the URL once ready, serve until Ctrl-C
launch.py       ``start_embedded()``: the server inside another command
compiling.py    ``BackgroundCompile``, ``compile_now()``: ``--compile background|wait``
precompile.py   ``main()``: the child process that fills a compile cache for a background compile
http/           the ASGI app, its limits and connections, the queue and its worker thread, /metrics
dialects/       OpenAI's Responses and Anthropic's Messages, translated into chat requests
openai/         OpenAI's chat and completions: requests parsed, prompts tokenized, answers written
jobs.py         ``EngineJob``: one request's work for the engine thread, and the events it hands back

Nothing is imported here: ``lossless bench`` against a remote URL must not pay for torch or starlette.
"""
