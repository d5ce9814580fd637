"""The APIs served by translating them into chat requests: OpenAI's Responses and Anthropic's Messages.
Each request becomes the chat request that asks the same (parsed by ``openai/``), and the job's events
come back in the API's own bodies and stream events.

dialect.py      ``Dialect``, ``respond()``: the translated APIs, and errors in each one's shape
translate.py    ``chat_request()``: another API's request, translated, parsed by the chat path
pieces.py       ``pieces()``, ``whole_answer()``: a job's events as the translated APIs read them
openai_responses.py  ``parse()``, ``body()``: /v1/responses requests in, Response objects out
openai_responses_stream.py  ``events()``: a Responses stream's server-sent events
anthropic_messages.py  ``parse()``, ``body()``, ``error_response()``: /v1/messages in, Messages out
anthropic_messages_stream.py  ``events()``: a Messages stream's server-sent events
"""
