"""The APIs served by translating their requests into chat requests (``translate.py``): OpenAI's Responses
and Anthropic's Messages. Each is a ``Dialect``: how its requests translate, how a whole answer, a
stream and an error look in it; ``respond()`` runs a queued job to the response in its shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lossless.engine.model.tokenizer import Tokenizer
from lossless.server.dialects import (
    anthropic_messages,
    anthropic_messages_stream,
    openai_responses,
    openai_responses_stream,
    pieces,
)
from lossless.server.dialects.pieces import Piece, WholeAnswer
from lossless.server.jobs import EngineJob, Failed
from lossless.server.openai import protocol, replies
from lossless.server.openai.bodies import Head
from lossless.server.openai.protocol import ApiRequest

MESSAGES_PATH = "/v1/messages"  # errors there are in Anthropic's shape


@dataclass(frozen=True)
class Dialect:
    prefix: str  # its response ids'
    parse: Callable[[dict[str, Any], str, frozenset[str]], ApiRequest]  # body, model, aliases
    body: Callable[[ApiRequest, Head, WholeAnswer], dict[str, Any]]  # a whole answer
    events: Callable[[ApiRequest, Head, int, AsyncIterator[Piece | Failed]], AsyncIterator[bytes]]
    names: Mapping[str, str]  # a chat field -> its name here, for refusals


RESPONSES = Dialect(
    prefix="resp_",
    parse=openai_responses.parse,
    body=openai_responses.body,
    events=openai_responses_stream.events,
    names=openai_responses.NAMES,
)
MESSAGES = Dialect(
    prefix="msg_",
    parse=anthropic_messages.parse,
    body=anthropic_messages.body,
    events=anthropic_messages_stream.events,
    names=anthropic_messages.NAMES,
)


def error_for(
    path: str,
    status: int,
    message: str,
    *,
    kind: str,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An error body in the shape of the API at ``path``: Anthropic's on /v1/messages, else OpenAI's."""
    if path == MESSAGES_PATH:
        return anthropic_messages.error_response(status, message, headers)
    return replies.openai_error(status, message, kind=kind, code=code, headers=headers)


def failure(path: str, failed: Failed, headers: dict[str, str]) -> JSONResponse:
    code = "server_shutting_down" if failed.status == 503 else None
    return error_for(path, failed.status, failed.message, kind="server_error", code=code, headers=headers)


async def respond(
    request: Request,
    dialect: Dialect,
    req: ApiRequest,
    job: EngineJob,
    head: Head,
    tokenizer: Tokenizer,
    withdraw: Callable[[], None],
) -> Response:
    """The queued ``job``'s answer to ``request``: a whole body, or a stream once the job has started."""
    headers = {"x-lossless-ignored-params": protocol.ignored_header(req.ignored)}
    path = request.url.path
    if not req.stream:
        got = await replies.job_output(req, job, "", request.receive, withdraw)
        headers["server-timing"] = got.timing()
        if got.finished is None:  # the engine raised, or shutdown cut the generation
            return failure(path, got.failed or Failed("generation failed"), headers)
        return JSONResponse(
            dialect.body(req, head, pieces.whole_answer(got, job, tokenizer)), headers=headers
        )
    first = await replies.until_started(job, request.receive, withdraw)
    if first is None:  # the client left while queued; nobody will read this
        return Response(status_code=499)
    if isinstance(first, Failed):  # the server is shutting down: the headers are not sent yet, so a 503
        return failure(path, first, headers)
    headers["server-timing"] = replies.server_timing(first.queue_s)
    events = dialect.events(req, head, len(job.prompt_ids), pieces.pieces(req, job, tokenizer))
    return replies.SSEResponse(events, withdraw, headers)
