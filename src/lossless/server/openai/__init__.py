"""OpenAI's chat and completions APIs: a request body parsed and tokenized, tools shown to the model and
read back out of its text, a job's events written as a JSON body or an SSE stream. The translated APIs
(``dialects/``) parse and read through the same code.

protocol.py     ``parse()``: request bodies -> ``ApiRequest``, or a 400 (n, aliases, ignored fields)
encode.py       ``tokenize()``: a request's prompt -> token ids within the context, off the event loop
tool_calls.py   ``apply()``: tools, tool_choice and response_format in; calls read back out of text
tool_stream.py  ``CallStream``: tool calls read out of a stream as they are generated
bodies.py       OpenAI response and chunk bodies, both log-probability formats
replies.py      ``complete()``, ``stream()``: a job's events -> a JSON body or an SSE stream
"""
