"""The only edge to the network: every HTTP call and every SSE parse, whichever command makes it.

endpoints.py   ``Endpoint`` (its key named by a variable, never held), from URLs or an endpoints file
http.py        aiohttp behind ``Session`` and ``Response``; ``TransportError``; ``redact()``
sse.py         ``read_events()``: the SSE parser and the one loop over a stream's network reads
api_names.py   ``APIS``, ``PATHS``: the four APIs named once, for the client, the command line and verify
apis.py        key headers, a chat body in the Responses or Messages API's words
native.py      Responses and Messages events (or whole answers) -> one chat-shaped chunk each
openai.py      ``request_body()``, and ``Chunk``: what one chunk says (the one decoder of answers)
answer.py      ``Answer``: the one accumulator every call folds its events into (text, choices, tool calls)
prompt.py      ``Prompt``: what one request asks, whichever API carries it
call.py        ``call()``: bench's call -> one ``RequestRecord``, a timestamp per event
turn.py        ``chat_turn()``: an agent's turn -> one ``Turn`` (tool calls whole), timed as bench times
wire.py        ``Wire``: probe's and verify's: any body -> one whole ``Reply`` (every choice, logprobs)
preflight.py   ``check_endpoint()``: one request before a run; a wrong URL, model, key or scheme in one line
prometheus.py  ``scrape()``: speculative-decoding counters from a server's /metrics
"""
