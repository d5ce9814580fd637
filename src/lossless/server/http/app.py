"""The ASGI app: OpenAI routes (chat, completions, Responses) and Anthropic's Messages over one
``Worker`` (one request at a time) or ``BatchWorker`` (``--max-batch``: a continuous batch), plus /health
and /metrics. The Responses and Messages requests are translated into chat requests
(``dialects/translate.py``), so all four share one path: parsing, tokenizing, the queue, the engine.

Every response, errors included, carries ``x-request-id`` (the client's, or a fresh one) and is counted
in ``lossless_requests_total``; ``RequestContext`` wraps the whole Starlette app so that even its own
500 page passes through it. Inside it ``BodyGuard`` (limits.py) reads every body within the size and time
limits. Bad input is a 400 with an OpenAI error body (Anthropic's on /v1/messages), a full queue a 429,
a server shutting down a 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lossless.engine.engine import Engine
from lossless.server.dialects import translate
from lossless.server.dialects.dialect import MESSAGES, MESSAGES_PATH, RESPONSES, Dialect, error_for, respond
from lossless.server.http.batch_worker import BatchWorker
from lossless.server.http.limits import DEFAULT_LIMITS, BodyGuard, RequestLimits
from lossless.server.http.metrics import CONTENT_TYPE, ExportedMetrics
from lossless.server.http.worker import QueueFull, ShuttingDown, Worker
from lossless.server.jobs import EngineJob, Failed
from lossless.server.openai import encode, protocol, replies, tool_calls
from lossless.server.openai.bodies import Head
from lossless.server.openai.protocol import Api, ApiRequest, InvalidRequest

_ROUTES = (
    *("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"),
    *("/v1/models", "/health", "/metrics"),
)
MAX_REQUEST_ID = 200  # longer client ids are replaced, not echoed


@dataclass(frozen=True)
class AppState:
    """Everything a handler needs, kept on ``app.state.served``."""

    engine: Engine
    worker: Worker
    metrics: ExportedMetrics
    name: str  # the model name /v1/models reports and responses carry
    aliases: frozenset[str]  # other names a request's ``model`` may use
    limits: RequestLimits
    token_bytes: int  # the longest token's text in UTF-8 bytes: bounds a prompt's length (`encode`)
    batch: int = 1  # the continuous batch's slots; 1: one request at a time
    batch_invariant: bool = True  # a request's numbers do not depend on the batch it shares

    @property
    def fingerprint(self) -> str:
        """system_fingerprint in every response: the same value, the same numerics served (read at each
        request: a background compile changes it once, `server.compiling`)."""
        return system_fingerprint(self.engine, self.batch, self.batch_invariant)


def create_app(
    engine: Engine,
    *,
    name: str,
    aliases: frozenset[str] = frozenset(),
    max_queue: int = 64,
    limits: RequestLimits = DEFAULT_LIMITS,
    max_batch: int = 1,
) -> RequestContext:
    metrics = ExportedMetrics()
    worker = make_worker(engine, metrics, max_queue, max_batch)
    metrics.queue_length, metrics.load = worker.queue_length, worker.load
    token_bytes = encode.max_token_bytes(engine)
    batch = worker.max_batch if isinstance(worker, BatchWorker) else 1
    invariant = worker.batch.invariant if isinstance(worker, BatchWorker) else True
    served = AppState(engine, worker, metrics, name, aliases - {name}, limits, token_bytes, batch, invariant)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Out of the collector's sight: the model's ~300k long-lived objects. Else every full collection
        # that a request's allocations trigger walks them, holding the GIL (a 0.75 MB body of arrays took
        # 170 ms to parse instead of 25), and the engine thread, which needs the GIL between ops, stalls.
        gc.collect()
        gc.freeze()
        await asyncio.to_thread(_warm_grammars, engine)
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
            Route("/v1/responses", responses_api, methods=["POST"]),
            Route("/v1/messages", messages_api, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics_text, methods=["GET"]),
        ],
        exception_handlers={
            InvalidRequest: _invalid_request,
            QueueFull: _queue_full,
            ShuttingDown: _shutting_down,
            HTTPException: _http_error,
            Exception: _server_error,
        },
        lifespan=lifespan,
    )
    app.state.served = served
    guard = BodyGuard(app, limits)

    def begin_shutdown() -> None:
        guard.closing.set()
        worker.begin_shutdown(limits.shutdown_grace_s)

    return RequestContext(guard, metrics, begin_shutdown)


def make_worker(engine: Engine, metrics: ExportedMetrics, max_queue: int, max_batch: int) -> Worker:
    """A continuous batch of up to ``max_batch`` generations, or one job at a time: with one slot, and with
    a draft model, whose KV cache holds one sequence (n-gram and draft-head drafting batch)."""
    if max_batch > 1 and (engine.drafter is None or engine.batch_drafter() is not None):
        return BatchWorker(engine, metrics, max_queue, max_batch)
    return Worker(engine, metrics, max_queue)


class RequestContext:
    """Pure ASGI (``BaseHTTPMiddleware`` would buffer and slow streams): request id in, header out, count.

    The server calls ``begin_shutdown`` as soon as it starts to shut down (``server/main.py``), while it still
    waits for responses to finish: waiting clients get their 503 then, not uvicorn's bare 500 later."""

    def __init__(self, app: ASGIApp, metrics: ExportedMetrics, begin_shutdown: Callable[[], None]) -> None:
        self.app, self.metrics, self.begin_shutdown = app, metrics, begin_shutdown

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if 0 < len(given) <= MAX_REQUEST_ID else uuid.uuid4().hex
        endpoint = scope["path"] if scope["path"] in _ROUTES else "other"

        async def send_with_id(message: Message) -> None:
            if message["type"] != "http.response.start":
                await send(message)
                return
            MutableHeaders(scope=message)["x-request-id"] = request_id
            await send(message)  # counted once it left: a head h11 refuses to write is no 200
            self.metrics.requests.inc(1, endpoint, str(message["status"]))

        await self.app(scope, receive, send_with_id)


def _warm_grammars(engine: Engine) -> None:
    """Constrained decoding's tokenizer view (~0.2 s for SmolLM2) is built before the first request."""
    from lossless.engine.model.constrain import warm

    with contextlib.suppress(ImportError):  # llguidance missing: only constrained requests fail (400)
        warm(engine.tokenizer)


def system_fingerprint(engine: Engine, batch: int = 1, invariant: bool = True) -> str:
    """OpenAI's system_fingerprint names the backend configuration that produced a response; ours says
    what changes the numbers: the version, the weights' dtype (int4q8: int4 on our kernel, activations
    in int8 as llama.cpp's, `quant.kernel`), the prompts' where it differs, the output layer's kernel
    where it is not torch's (the file's Q8_0 blocks on ours, `quant.Q8Linear`; a packed bfloat16 weight,
    `engine.weights.packed`), compiled, the continuous batch (``-batch16``: up to 16 requests decoded
    together, each as it would be alone, `engine.batch.decode`; ``-batch16-variant``: dense matmuls
    whose last bits move with the batch) and the drafter
    (lossless-0.1.0-float32-ngram, lossless-0.1.0-int4-float32prompts-compiled-none,
    lossless-0.1.0-int4q8-q8output-compiled-dspark, lossless-0.1.0-int4q8-q8output-batch16-none). A
    verify or bench record carries it, so two runs show whether the same thing served them."""
    from lossless import __version__

    drafter = engine.spec.kind if engine.spec is not None else "none"
    dtype = "int4q8" if engine.int4_kernel is not None and engine.int4_kernel[0] == "q8" else engine.dtype
    prompts = f"-{engine.prompt_dtype}prompts" if engine.prompt_dtype != engine.dtype else ""
    output = {"q8": "-q8output", "packed": "-packed"}.get(engine.output_layer or "", "")
    compiled = "-compiled" if engine.compiled and batch == 1 else ""  # the batch runs eagerly
    batched = (f"-batch{batch}" + ("" if invariant else "-variant")) if batch > 1 else ""
    return f"lossless-{__version__}-{dtype}{prompts}{output}{compiled}{batched}-{drafter}"


def _served(request: Request) -> AppState:
    served: AppState = request.app.state.served
    return served


# --- generation -------------------------------------------------------------------------------------


async def chat_completions(request: Request) -> Response:
    return await _generate(request, "chat")


async def completions(request: Request) -> Response:
    return await _generate(request, "completions")


async def _generate(request: Request, api: Api) -> Response:
    served = _served(request)
    req, prompt, job = await _admit(request, served, functools.partial(_chat_or_legacy, api))

    def withdraw() -> None:
        served.worker.withdraw(job)

    prefix = "chatcmpl-" if api == "chat" else "cmpl-"
    head = Head(prefix + uuid.uuid4().hex, served.name, int(time.time()), served.fingerprint)
    headers = {"x-lossless-ignored-params": protocol.ignored_header(req.ignored)}
    if not req.stream:
        return await replies.complete(req, job, head, prompt.text, request.receive, withdraw, headers)
    first = await replies.until_started(job, request.receive, withdraw)
    if first is None:  # the client left while queued; nobody will read this
        return Response(status_code=499)
    if isinstance(first, Failed):  # the server is shutting down: the headers are not sent yet, so a 503
        return replies.failure_response(first, headers)
    headers["server-timing"] = replies.server_timing(first.queue_s)
    return replies.SSEResponse(replies.stream(req, job, head, prompt.text), withdraw, headers)


async def _admit(
    request: Request, served: AppState, translate: Callable[[dict[str, Any], AppState], ApiRequest]
) -> tuple[ApiRequest, encode.TokenizedPrompt, EngineJob]:
    """The request parsed (``translate``: its JSON body -> the internal request), tokenized, fitted to
    the context and queued: every API's one way in."""
    raw = await request.body()  # BodyGuard has read it within the limits: this returns at once
    if len(raw) > served.limits.parse_in_thread_bytes:  # json.loads: up to ~50 ms a MiB
        req = await asyncio.to_thread(_parse, translate, raw, served)
    else:
        req = _parse(translate, raw, served)
    del raw
    prompt = await encode.tokenize(served.engine, req, served.token_bytes)
    params = encode.fit_context(req, prompt, served.engine.max_context)
    echo_scores = req.echo and req.logprobs is not None
    job = EngineJob(
        prompt.ids, params, asyncio.get_running_loop(), score_top=req.logprobs if echo_scores else None
    )
    served.worker.submit(job)
    return req, prompt, job


def _parse(
    translate: Callable[[dict[str, Any], AppState], ApiRequest], raw: bytes, served: AppState
) -> ApiRequest:
    return translate(protocol.parse_json(raw, protocol.max_json_values(served.engine.max_context)), served)


def _chat_or_legacy(api: Api, body: dict[str, Any], served: AppState) -> ApiRequest:
    context = served.engine.max_context
    return tool_calls.apply(protocol.parse(api, body, served.name, served.aliases, context), body)


# --- the newer APIs over the same path --------------------------------------------------------------


async def responses_api(request: Request) -> Response:
    return await _translated(request, RESPONSES)


async def messages_api(request: Request) -> Response:
    return await _translated(request, MESSAGES)


async def _translated(request: Request, dialect: Dialect) -> Response:
    served = _served(request)
    try:
        req, _, job = await _admit(request, served, lambda b, s: dialect.parse(b, s.name, s.aliases))
    except InvalidRequest as exc:  # the context's check names the chat field
        raise translate.renamed_refusal(exc, dialect.names) from exc

    def withdraw() -> None:
        served.worker.withdraw(job)

    head = Head(dialect.prefix + uuid.uuid4().hex, served.name, int(time.time()), served.fingerprint)
    return await respond(request, dialect, req, job, head, served.engine.tokenizer, withdraw)


# --- the rest ---------------------------------------------------------------------------------------


def _model_card(served: AppState) -> dict[str, object]:
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


def _error(
    request: Request,
    status: int,
    message: str,
    *,
    kind: str,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    return error_for(request.url.path, status, message, kind=kind, code=code, headers=headers)


async def _invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidRequest)
    if request.url.path == MESSAGES_PATH:
        return error_for(request.url.path, exc.status, exc.message, kind="")
    return JSONResponse(exc.body(), status_code=exc.status)


async def _queue_full(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, QueueFull)
    return _error(
        request,
        429,
        "The server's request queue is full; retry later.",
        kind="rate_limit_error",
        code="queue_full",
        headers={"retry-after": str(exc.retry_after_s)},
    )


async def _shutting_down(request: Request, exc: Exception) -> Response:
    code, headers = "server_shutting_down", {"connection": "close"}
    return _error(request, 503, str(exc), kind="server_error", code=code, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(
        request, exc.status_code, exc.detail, kind="invalid_request_error", headers=dict(exc.headers or {})
    )


async def _server_error(request: Request, exc: Exception) -> Response:
    return _error(request, 500, f"internal error: {type(exc).__name__}", kind="server_error")
