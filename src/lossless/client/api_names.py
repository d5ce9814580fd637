"""The four APIs an endpoint may speak, named once: what every ``--api`` offers, where each request goes,
and which of them carry chat messages. The client, the command line and verify import these; the module
imports nothing, so that a command's ``--help`` does not pay for aiohttp (`apis` does).
"""

from __future__ import annotations

APIS = ("chat", "completions", "responses", "messages")
CHAT_APIS = ("chat", "responses", "messages")  # the APIs that carry messages and tools
NATIVE = frozenset({"responses", "messages"})  # rewritten from a chat body (`apis`), read back by `native`
PATHS = {  # under the endpoint's base URL
    "chat": "/chat/completions",
    "completions": "/completions",
    "responses": "/responses",
    "messages": "/messages",
}
ABOUT = {  # each API in a few words, for --help
    "chat": "OpenAI Chat Completions",
    "completions": "legacy, a plain prompt",
    "responses": "OpenAI Responses",
    "messages": "Anthropic Messages: the key as x-api-key",
}
