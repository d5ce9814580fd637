"""The ASGI app: OpenAI routes over one ``Worker``, plus /health and /metrics.

Every response, errors included, carries ``x-request-id`` (the client's, or a fresh one) and is counted
in ``lossless_requests_total``; ``RequestContext`` wraps the whole Starlette app so that even its own
500 page passes through it. Bad input is a 400 with an OpenAI error body, a full queue a 429.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lossless.engine.engine import Engine
from lossless.engine.sampling import SamplingParams
from lossless.server import protocol, responses
from lossless.server.bodies import Head
from lossless.server.metrics import CONTENT_TYPE, ServerMetrics
from lossless.server.protocol import ApiRequest, Endpoint, InvalidRequest
from lossless.server.worker import Failed, Job, QueueFull, Worker

_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")
MAX_REQUEST_ID = 200  # longer client ids are replaced, not echoed
LONG_PROMPT_CHARS = 8192  # tokenized in a thread beyond this (~2k tokens, ~3 ms); shorter ones inline


@dataclass(frozen=True)
class Served:
    """Everything a handler needs, kept on ``app.state.served``."""

    engine: Engine
    worker: Worker
    metrics: ServerMetrics
    name: str  # the model name /v1/models reports and responses carry
    aliases: frozenset[str]  # other names a request's ``model`` may use
    fingerprint: str  # system_fingerprint in every response: the same value, the same numerics served


def create_app(
    engine: Engine, *, name: str, aliases: frozenset[str] = frozenset(), max_queue: int = 64
) -> ASGIApp:
    metrics = ServerMetrics()
    worker = Worker(engine, metrics, max_queue)
    metrics.queue_length = worker.queue_length
    served = Served(engine, worker, metrics, name, aliases - {name}, fingerprint(engine))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            # stop() blocks until the engine thread notices its cancel event: keep the loop free meanwhile
            await asyncio.to_thread(worker.stop)

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics_text, methods=["GET"]),
        ],
        exception_handlers={
            InvalidRequest: _invalid_request,
            QueueFull: _queue_full,
            HTTPException: _http_error,
            Exception: _server_error,
        },
        lifespan=lifespan,
    )
    app.state.served = served
    return RequestContext(app, metrics)


class RequestContext:
    """Pure ASGI (``BaseHTTPMiddleware`` would buffer and slow streams): request id in, header out, count."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if 0 < len(given) <= MAX_REQUEST_ID else uuid.uuid4().hex
        endpoint = scope["path"] if scope["path"] in _ROUTES else "other"

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["x-request-id"] = request_id
                self.metrics.requests.inc(1, endpoint, str(message["status"]))
            await send(message)

        await self.app(scope, receive, send_with_id)


def fingerprint(engine: Engine) -> str:
    """OpenAI's system_fingerprint names the backend configuration that produced a response; ours says
    what changes the numbers: the version, the weights' dtype and the drafter (lossless-0.1.0-float32-
    ngram). A verify or bench record carries it, so two runs show whether the same thing served them."""
    from lossless import __version__

    drafter = engine.spec.kind if engine.spec is not None else "none"
    return f"lossless-{__version__}-{engine.dtype}-{drafter}"


def _served(request: Request) -> Served:
    served: Served = request.app.state.served
    return served


# --- generation -------------------------------------------------------------------------------------


async def chat_completions(request: Request) -> Response:
    return await _generate(request, "chat")


async def completions(request: Request) -> Response:
    return await _generate(request, "completions")


async def _generate(request: Request, endpoint: Endpoint) -> Response:
    served = _served(request)
    body = protocol.parse_json(await request.body())
    req = protocol.parse(endpoint, body, served.name, served.aliases)
    if _prompt_chars(req) > LONG_PROMPT_CHARS:  # ~1.3 us a token: a long prompt would stall other streams
        prompt_ids, prompt_text = await asyncio.to_thread(_tokenize, served.engine, req)
    else:
        prompt_ids, prompt_text = _tokenize(served.engine, req)
    params = _fit_context(req, len(prompt_ids), served.engine.max_context)
    echo_scores = req.echo and req.logprobs is not None
    job = Job(prompt_ids, params, asyncio.get_running_loop(), score_top=req.logprobs if echo_scores else None)
    served.worker.submit(job)
    prefix = "chatcmpl-" if endpoint == "chat" else "cmpl-"
    head = Head(prefix + uuid.uuid4().hex, served.name, int(time.time()), served.fingerprint)
    headers = {"x-lossless-ignored-params": ",".join(req.ignored)}
    if not req.stream:
        return await responses.complete(req, job, head, prompt_text, request.receive, headers)
    first = await responses.until_started(job, request.receive)
    if first is None:  # the client left while queued; nobody will read this
        return Response(status_code=499)
    if isinstance(first, Failed):  # the server is shutting down
        return responses.error_response(503, first.message, kind="server_error", headers=headers)
    headers["server-timing"] = responses.server_timing(first.queue_s)
    return responses.SSEResponse(responses.stream(req, job, head, prompt_text), job.cancel.set, headers)


def _prompt_chars(req: ApiRequest) -> int:
    return sum(len(m["content"]) for m in req.messages) + len(req.prompt)


def _tokenize(engine: Engine, req: ApiRequest) -> tuple[list[int], str]:
    """The prompt's token ids and its text (for echo), in the handler so that a prompt too long for the
    context gets its 400 before it queues. The tokenizer is thread-safe (Rust); the engine's model is not
    touched here."""
    if req.endpoint == "chat":
        try:
            ids = engine.chat_prompt([dict(m) for m in req.messages])
        except Exception as exc:  # a template may raise anything (jinja's TemplateError, our UsageError)
            raise InvalidRequest(
                f"messages could not be rendered with the model's chat template: {exc}", param="messages"
            ) from exc
        text = ""
    elif isinstance(req.prompt, str):
        ids, text = engine.encode(req.prompt), req.prompt
    else:
        ids = list(req.prompt)
        vocab = engine.args.vocab_size
        if max(ids) >= vocab:
            raise InvalidRequest(
                f"token id {max(ids)} is outside the vocabulary (0..{vocab - 1})", param="prompt"
            )
        text = engine.decode(ids) if req.echo else ""
    if not ids:
        param = "messages" if req.endpoint == "chat" else "prompt"
        raise InvalidRequest("the prompt is empty", param=param)
    return ids, text


def _fit_context(req: ApiRequest, n_prompt: int, max_context: int) -> SamplingParams:
    room = max_context - n_prompt
    wants = req.max_tokens
    if room < 0 or (room == 0 and wants != 0):
        raise InvalidRequest(
            f"This model's maximum context length is {max_context} tokens; the prompt has {n_prompt} "
            "and leaves no room to generate.",
            param="messages" if req.endpoint == "chat" else "prompt",
            code="context_length_exceeded",
        )
    # Asking for more than the context holds is clamped (finish_reason "length") rather than refused.
    return replace(req.params, max_tokens=room if wants is None else min(wants, room))


# --- the rest ---------------------------------------------------------------------------------------


def _model_card(served: Served) -> dict[str, object]:
    return {
        "id": served.name,
        "object": "model",
        "created": 0,
        "owned_by": "lossless",
        "max_model_len": served.engine.max_context,
    }


async def list_models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [_model_card(_served(request))]})


async def get_model(request: Request) -> Response:
    served = _served(request)
    model = request.path_params["model"]
    if model != served.name and model not in served.aliases:
        raise InvalidRequest(
            f"The model {model!r} does not exist", param="model", code="model_not_found", status=404
        )
    return JSONResponse(_model_card(served))


async def health(request: Request) -> Response:
    served = _served(request)
    return JSONResponse({"status": "ok", "model": served.name, "queue_length": served.worker.queue_length()})


async def metrics_text(request: Request) -> Response:
    return Response(_served(request).metrics.render(), media_type=CONTENT_TYPE)


async def _invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidRequest)
    return JSONResponse(exc.body(), status_code=exc.status)


async def _queue_full(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, QueueFull)
    return responses.error_response(
        429,
        "The server's request queue is full; retry later.",
        kind="rate_limit_error",
        code="queue_full",
        headers={"retry-after": str(exc.retry_after_s)},
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return responses.error_response(
        exc.status_code, exc.detail, kind="invalid_request_error", headers=dict(exc.headers or {})
    )


async def _server_error(request: Request, exc: Exception) -> Response:
    return responses.error_response(500, f"internal error: {type(exc).__name__}", kind="server_error")
