"""A provider-like OpenAI chat server on 127.0.0.1 (a thread), whose habits a test chooses.

Real providers differ in what they do with parameters; ``Habits`` names the ones probe must tell apart:
whether reasoning switches take effect, whether max_tokens is honoured, whether unknown fields and
``n`` are accepted. Everything else (stop, seed, logprobs, include_usage) is honoured. Answers are
words drawn from a generator seeded by (prompt, seed): seeded or greedy requests repeat exactly.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lossless.server.main import bind, url_of

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
]
KNOWN = {
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "logprobs",
    "top_logprobs",
    "n",
    "reasoning_effort",
    "enable_thinking",
    "chat_template_kwargs",
    "thinking",
    "reasoning",
}


@dataclass(frozen=True)
class Habits:
    reasoning_effort: bool = True  # reasoning_effort="none" stops the reasoning
    enable_thinking: bool = False  # enable_thinking=false stops the reasoning
    max_tokens: bool = False  # the answer is cut at max_tokens
    unknown_fields: str = "accept"  # accept | reject
    n: str = "reject"  # reject | honour
    answer_words: int = 40  # words in an answer that runs to its end
    reasoning_words: int = 30
    models: tuple[str, ...] | None = None  # served and listed at /v1/models; another is a 404 (None: any)
    key: str | None = None  # the API key it wants (Bearer); another, or none, is a 401
    fail: int | None = None  # an HTTP status every chat request answers with (after the checks above)


def _error(message: str, param: str | None) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return JSONResponse(body, status_code=400)


def _invalid(body: dict[str, Any], habits: Habits) -> JSONResponse | None:
    unknown = sorted(set(body) - KNOWN)
    if unknown and habits.unknown_fields == "reject":
        return _error(f"Unrecognized request argument supplied: {unknown[0]}", unknown[0])
    temperature, top_p = body.get("temperature", 1), body.get("top_p", 1)
    if not 0 <= temperature <= 2:
        return _error("temperature out of range", "temperature")
    if not 0 < top_p <= 1:
        return _error("top_p out of range", "top_p")
    if body.get("max_tokens") is not None and body["max_tokens"] < 1:
        return _error("max_tokens must be at least 1", "max_tokens")
    if body.get("n", 1) != 1 and habits.n == "reject":
        return _error("n > 1 is not supported", "n")
    return None


def _thinks(body: dict[str, Any], habits: Habits) -> bool:
    if habits.reasoning_effort and body.get("reasoning_effort") == "none":
        return False
    return not (habits.enable_thinking and body.get("enable_thinking") is False)


def _answer(body: dict[str, Any], habits: Habits, index: int) -> tuple[str, str, str]:
    """-> (content, reasoning, finish_reason)"""
    prompt = json.dumps(body["messages"])
    seed = 0 if body.get("temperature", 1) == 0 else body.get("seed")
    rng = random.Random(f"{prompt}|{seed}|{index}") if seed is not None else random.Random()
    thoughts = [rng.choice(WORDS) for _ in range(habits.reasoning_words)] if _thinks(body, habits) else []
    words = [rng.choice(WORDS) for _ in range(habits.answer_words)]
    finish, limit = "stop", body.get("max_tokens")
    if habits.max_tokens and limit is not None and limit < len(thoughts) + len(words):
        # like real providers, the limit counts reasoning tokens too
        thoughts, words, finish = thoughts[:limit], words[: max(0, limit - len(thoughts))], "length"
    reasoning, text = " ".join(thoughts), " ".join(words)
    stops = body.get("stop") or []
    for s in [stops] if isinstance(stops, str) else stops:
        if s in text:
            text, finish = text[: text.index(s)], "stop"
    return text, reasoning, finish


def _usage(body: dict[str, Any], content: str, reasoning: str) -> dict[str, Any]:
    n_reason = len(reasoning.split())
    n_out = len(content.split()) + n_reason
    return {
        "prompt_tokens": len(json.dumps(body["messages"]).split()),
        "completion_tokens": n_out,
        "total_tokens": n_out + 1,
        "completion_tokens_details": {"reasoning_tokens": n_reason},
    }


def _logprobs(content: str, top: int) -> dict[str, Any]:
    def entry(word: str) -> dict[str, Any]:
        return {"token": word, "logprob": -1.0, "bytes": list(word.encode())}

    return {"content": [{**entry(w), "top_logprobs": [entry(w)] * top} for w in content.split()]}


def _refused(request: Request, body: dict[str, Any] | None, habits: Habits) -> JSONResponse | None:
    """OpenAI's answers to a wrong key (401) and to a model it does not serve (404), in its words."""
    if habits.key is not None and request.headers.get("authorization") != f"Bearer {habits.key}":
        given = request.headers.get("authorization", "")[7:]
        error = {
            "message": f"Incorrect API key provided: {given[:3]}****{given[-4:]}.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
        return JSONResponse({"error": error}, status_code=401)
    model = (body or {}).get("model")
    if body is not None and habits.models is not None and model not in habits.models:
        error = {
            "message": f"The model `{model}` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "code": "model_not_found",
        }
        return JSONResponse({"error": error}, status_code=404)
    return None


def create_app(habits: Habits) -> Starlette:
    async def models(request: Request) -> Response:
        if (refused := _refused(request, None, habits)) is not None:
            return refused
        rows = [{"id": m, "object": "model", "owned_by": "provider"} for m in habits.models or ()]
        return JSONResponse({"object": "list", "data": rows})

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        if (refused := _refused(request, body, habits)) is not None:
            return refused
        if (bad := _invalid(body, habits)) is not None:
            return bad
        if habits.fail is not None:
            said = "The server had an error while processing your request."
            error = {"message": said, "type": "server_error"}
            return JSONResponse({"error": error}, status_code=habits.fail)
        n = body.get("n", 1)
        answers = [_answer(body, habits, i) for i in range(n)]
        if body.get("stream"):
            return StreamingResponse(_stream(body, answers[0]), media_type="text/event-stream")
        choices = []
        for i, (content, reasoning, finish) in enumerate(answers):
            message = {"role": "assistant", "content": content, "reasoning_content": reasoning or None}
            lp = _logprobs(content, body.get("top_logprobs", 0)) if body.get("logprobs") else None
            choices.append({"index": i, "message": message, "logprobs": lp, "finish_reason": finish})
        usage = _usage(body, answers[0][0], answers[0][1])
        return JSONResponse(
            {
                "id": "p",
                "object": "chat.completion",
                "created": int(time.time()),
                "choices": choices,
                "usage": usage,
            }
        )

    routes = [Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)]
    return Starlette(routes=routes)


def _stream(body: dict[str, Any], answer: tuple[str, str, str]) -> Iterator[bytes]:
    content, reasoning, finish = answer

    def event(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        chunk = {
            "id": "p",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    yield event({"role": "assistant", "content": ""})
    for word in reasoning.split():
        yield event({"reasoning_content": word + " "})
    for i, word in enumerate(content.split(" ")):
        yield event({"content": word if i == 0 else " " + word})
    yield event({}, finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {
            "id": "p",
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": _usage(body, content, reasoning),
        }
        yield b"data: " + json.dumps(usage).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


@contextmanager
def provider_server(habits: Habits) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT/v1``) of a server with these habits."""
    sock = bind("127.0.0.1", 0)
    server = plain_server(create_app(habits))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        yield url_of(sock, "127.0.0.1") + "/v1"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def plain_server(app: Starlette) -> uvicorn.Server:
    """uvicorn as a third party runs it (not lossless serve's hardened server)."""
    return uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning", lifespan="off"))
