"""Before a run: one small request to each endpoint, so that a wrong URL, model, key or scheme stops the
command in one line that says what to change, instead of a table of errors (or, worse, a verdict made of
them). And the model an endpoint serves, when it serves one and none was named.

What a refusal means is read from the answer, never from the server's name: the status, the error body's
``code`` and message, and what ``/models`` lists (``served_models``). A 429, a 5xx or a malformed answer
is left to the run: it is the endpoint's behaviour, which the run measures, not a mistake in what was
asked.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from lossless.client.answer import Answer, MalformedStream, StreamError
from lossless.client.api_names import NATIVE, PATHS
from lossless.client.apis import native_body, session as api_session
from lossless.client.endpoints import Endpoint, api_key, public_url
from lossless.client.http import Session, TransportError, unreachable
from lossless.client.openai import error_of, stream_options
from lossless.client.sse import read_events
from lossless.errors import EndpointError, UsageError
from lossless.records import Failure

API_PATHS = ("/chat/completions", "/completions", "/responses", "/messages")


@dataclass(frozen=True)
class Answered:
    """What the one request found out, beyond "it answers"."""

    ok: bool  # an answer came (not a 429 or 5xx, which are left to the run)
    usage: bool  # it reported usage (llama.cpp streams none: then a tokenizer counts N_out)
    running: bool = False  # a stream asking for usage in every chunk was taken (``Endpoint.running_usage``)


async def served_models(session: Session, base_url: str, timeout: float = 5.0) -> list[str] | None:
    """The ids ``base_url``/models lists; None when there is no such route or it answers otherwise."""
    text = await session.get_text(base_url.rstrip("/") + "/models", timeout=timeout, limit=1 << 20)
    try:
        data = json.loads(text or "null")
    except (ValueError, RecursionError):
        return None
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None
    return [m["id"] for m in rows if isinstance(m, dict) and isinstance(m.get("id"), str)]


def only_model(base_url: str, api_key_env: str | None, connect_timeout: float = 10.0) -> str:
    """The one model ``base_url`` serves, for a command given no --model: what /models lists when it
    lists exactly one; a UsageError naming them when it lists several, or none can be read."""
    endpoint = Endpoint("given", base_url, "", api_key_env)

    async def ask() -> list[str] | None:
        session = Session(base_url, {}, api_key(endpoint), connect_timeout)
        try:
            return await served_models(session, base_url)
        finally:
            await session.aclose()

    found = asyncio.run(ask())
    if found is not None and len(found) == 1:
        return found[0]
    if found:
        raise UsageError(
            f"--model is required: {public_url(base_url)} serves {len(found)} models: {', '.join(found[:20])}"
        )
    why = "lists none" if found is not None else "did not answer with a list"
    raise UsageError(f"--model is required: {public_url(base_url)}/models {why} to choose one by default")


async def check_endpoint(
    endpoint: Endpoint, api: str = "chat", stream: bool = False, timeout: float = 60.0
) -> Answered:
    """One one-token request to ``endpoint``, sent as the run will send its own (``api``, ``stream``, the
    endpoint's extra fields); an ``EndpointError`` saying what to change when the answer shows a mistake.
    An answer that is slow, cut, malformed, a 429 or a 5xx is the endpoint's behaviour: left to the run."""
    body: dict[str, Any] = {"model": endpoint.model, "max_tokens": 1, "temperature": 0}
    body |= {"prompt": "Hi"} if api == "completions" else {"messages": [{"role": "user", "content": "Hi"}]}
    running = stream and api in ("chat", "completions")  # ask for usage in every chunk: taken or refused?
    if stream:
        body |= {"stream": True, "stream_options": stream_options(api, running)}
    body = native_body(api, body) | dict(endpoint.body)
    session = api_session(endpoint, api, min(timeout, 10.0))
    try:
        async with asyncio.timeout(min(timeout, 60.0)):  # a silent endpoint must not hold the run up long
            if running:
                answered = await _ask(session, endpoint, api, json.dumps(body).encode(), stream, refusal=True)
                if answered is not None:
                    return replace(answered, running=answered.ok)
                body["stream_options"] = stream_options(api, False)  # refused: asked again as the run will
            found = await _ask(session, endpoint, api, json.dumps(body).encode(), stream)
            assert found is not None
            return found
    except TimeoutError:
        return Answered(ok=False, usage=False)  # connected and slow or silent: the run measures it
    finally:
        await session.aclose()


async def _ask(
    session: Session, endpoint: Endpoint, api: str, body: bytes, stream: bool, refusal: bool = False
) -> Answered | None:
    """The answer to one request; with ``refusal``, None when it was refused as a bad request (400, 422)."""
    path = PATHS[api]
    try:
        async with session.post(path, body) as resp:
            if resp.status != 200:
                raw = await resp.read(4000)
                status, text = resp.status, session.redact(raw.decode("utf-8", "replace"))
            else:
                answer = Answer(api if api in NATIVE else None)
                if stream:
                    answer.end_ns = await read_events(resp, answer.read, lambda: 0)
                else:
                    answer.whole(await resp.whole(), 0)
                return Answered(ok=True, usage=answer.usage is not None)
    except TransportError as exc:
        why = await _unconnected(endpoint, exc)
        if why is not None:
            raise _refused(endpoint, why) from None
        return Answered(ok=False, usage=False)  # connected, then cut: the endpoint's behaviour, measured
    except (MalformedStream, StreamError):
        return Answered(ok=False, usage=False)  # an answer, malformed: the run records it as such
    if status == 429 or status >= 500:
        return Answered(ok=False, usage=False)  # the endpoint's state: the run measures it
    if refusal and status in (400, 422):
        return None
    raise _refused(endpoint, await _explain(session, endpoint, path, status, text))


def _refused(endpoint: Endpoint, why: str) -> EndpointError:
    return EndpointError(f"endpoint {endpoint.name!r} ({public_url(endpoint.base_url)}): {why}")


async def _unconnected(endpoint: Endpoint, exc: TransportError) -> str | None:
    """Why no request could be made at all (no TCP connection, no TLS session); None when the failure came
    after a connection was made (a reset before the answer), which is the endpoint's to answer for."""
    text = str(exc)
    if urlsplit(endpoint.base_url).scheme == "https" and ("SSL" in text or "TLS" in text):
        http = "http://" + endpoint.base_url.split("://", 1)[1]
        return f"the TLS handshake failed ({text[:120]}): does it speak plain HTTP? try {public_url(http)}"
    if exc.kind == Failure.TIMEOUT_CONNECT:
        return "cannot connect: no connection within the connect time-out"
    why = await unreachable(endpoint.base_url, 10.0)
    return None if why is None else f"cannot connect: {text}"


async def _explain(session: Session, endpoint: Endpoint, path: str, status: int, text: str) -> str:
    """A refusal in words, with what to change."""
    code, message = error_of(text)
    message = message[:300]
    said = f"HTTP {status}" + (f": {message}" if message else "")
    base = endpoint.base_url.rstrip("/")
    if 300 <= status < 400:
        return f"{said} (a redirect, not followed: it would carry the key's headers along; the API's URL?)"
    if status in (401, 403):
        if endpoint.api_key_env is None:
            return (
                f"{said} (no key was sent: put it in an environment variable and name it with --api-key-env)"
            )
        return f"{said} (the key in ${endpoint.api_key_env} was refused)"
    listed = await served_models(session, base) if status in (400, 404, 422) else None
    if _about_model(code, message, endpoint.model) or (listed and endpoint.model not in listed):
        serves = f"; it serves: {', '.join(listed[:20])}" if listed else ""
        return f"{said} (the model {endpoint.model!r} is not served here{serves})"
    if status == 404 and (suffix := next((p for p in API_PATHS if base.endswith(p)), None)):
        return f"{said} (give the base URL, without {suffix}: {public_url(base[: -len(suffix)])})"
    if status == 404 and not base.endswith("/v1") and await served_models(session, base + "/v1") is not None:
        return f"{said} (no API at {public_url(base)}{path}: did you mean {public_url(base + '/v1')}?)"
    return f"{said} (the endpoint refused a one-token request to {path})"


def _about_model(code: str, message: str, model: str) -> bool:
    return code == "model_not_found" or (bool(model) and f"{model}" in message and "model" in message.lower())
