"""The only edge to the network: every HTTP call and every SSE parse, whichever command makes it.

http.py        aiohttp behind Session and Response; TransportError; redact (keys out of any text)
sse.py         the SSE parser, and read_events: the one loop over a stream's network reads
openai.py      OpenAI request bodies, and what one chunk says (Chunk: the one decoder of answers)
call.py        bench: one streaming call -> one RequestRecord (a timestamp per event)
wire.py        probe and verify: any request body -> one whole Reply (every choice, logprobs, usage)
prometheus.py  speculative-decoding counters from a server's /metrics
"""
