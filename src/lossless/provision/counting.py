"""N_out when a server sends no usage: the model's tokenizer where it can be found, else chunks.

Many servers stream no usage (llama.cpp's OpenAI server among them), and without N_out there is no TPOT
and no output speed, the headline metric. So, after the run (never on the event loop: tokenizing would
delay other streams' timestamps), each such record is counted by the first of:
    1. ``--tokenizer`` (tokenizer.json, a Hugging Face folder, a GGUF file or an embedded model's name);
    2. the endpoint file's ``tokenizer = ...``;
    3. the model the endpoint names, when it is an embedded model or a local file or folder: the
       request's ``model``, then the ids its ``/v1/models`` lists (a local server often lists the path
       of the file it serves);
    4. its token-bearing chunks, labelled ``chunks``: a chunk is a token on many servers but not all
       (speculative and batching servers send several), so TPOT is then time per chunk, said so.
The source is kept in each record's ``n_out_source``.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from lossless.client.endpoints import Endpoint
from lossless.errors import LosslessError, ModelError, UsageError
from lossless.records import TOKEN_KINDS, RequestRecord

TokenCounter = Callable[[str], int]


@functools.cache
def load_token_encoder(spec: str) -> tuple[Callable[[str], list[int]], Callable[[list[int]], str]]:
    """(encode, decode) of the tokenizer ``spec`` names (as ``load_token_counter``), no special tokens."""
    tokenizer = _load(spec)
    return (
        lambda text: list(tokenizer.encode(text, add_special=False)),
        lambda ids: str(tokenizer.decode(ids, skip_special=True)),
    )


@functools.cache
def load_token_counter(spec: str) -> TokenCounter:
    """A tokenizer.json, a Hugging Face folder holding one, a GGUF file, or an embedded model's name ->
    a function counting the tokens of a whole text (no special tokens added)."""
    tokenizer = _load(spec)
    return lambda text: len(tokenizer.encode(text, add_special=False))


@functools.cache
def _load(spec: str) -> Any:
    try:
        from lossless.engine.model.tokenizer import Tokenizer
    except ModuleNotFoundError as exc:
        raise UsageError(
            f"a tokenizer needs the {exc.name!r} package: pip install 'lossless[engine]'"
        ) from None
    from lossless.models import resolve

    path = resolve(spec, pull_missing=True)
    if path.is_dir():
        path = path / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_json(path, {}) if path.suffix == ".json" else _gguf_tokenizer(path)
    except LosslessError:
        raise
    except Exception as exc:  # the tokenizers and gguf packages raise their own types for a bad file
        raise UsageError(f"tokenizer {spec!r}: cannot read {path} ({type(exc).__name__}: {exc})") from None
    return tokenizer


def _gguf_tokenizer(path: Path) -> Any:
    # The engine's own GGUF reader (it imports torch: paid only by those who count with a GGUF).
    from gguf import GGUFReader

    from lossless.engine.weights import gguf

    return gguf._tokenizer(gguf._metadata(GGUFReader(str(path))), path)


def count_n_out(record: RequestRecord, count: TokenCounter, name: str) -> RequestRecord:
    """N_out of a record without usage: its whole answer and reasoning text through the tokenizer (never
    chunk by chunk: token boundaries do not follow chunk boundaries). Tool-call text is not kept in
    records, so an answer with tool calls stays uncounted rather than undercounted."""
    if record.n_out is not None or record.status != 200 or record.tool_call_chars:
        return record
    n = count(record.reasoning_text) + count(record.text)
    return replace(record, n_out=n, n_out_source=f"tokenizer:{name}")


def count_chunks(record: RequestRecord) -> RequestRecord:
    if record.n_out is not None or record.status != 200:
        return record
    chunks = sum(1 for kind in record.event_kinds if kind in TOKEN_KINDS)
    return replace(record, n_out=chunks, n_out_source="chunks")


def fill_n_out(
    records: list[RequestRecord],
    endpoints: Sequence[Endpoint],
    given: tuple[str, TokenCounter] | None,
    listed: Callable[[Endpoint], list[str]] | None = None,
) -> list[RequestRecord]:
    """Every answered record without N_out counted by the first source that works (module docstring).
    ``given``: the ``--tokenizer`` option, already loaded; ``listed``: an endpoint's /v1/models ids."""
    lacking = {r.endpoint for r in records if r.n_out is None and r.status == 200}
    if not lacking:
        return records
    counters: dict[str, tuple[str, TokenCounter] | None] = {}
    for e in endpoints:
        if e.name in lacking:
            counters[e.name] = given or _found(e, listed)
    out = []
    for r in records:
        found = counters.get(r.endpoint)
        if found is not None:
            r = count_n_out(r, found[1], found[0])
        out.append(count_chunks(r))
    return out


def find_counter(endpoint: Endpoint) -> tuple[str, TokenCounter] | None:
    """The endpoint's own tokenizer (sources 2 and 3 above), as (its name, a counter); None if not found.
    Blocking (a GGUF's tokenizer takes seconds to load): call it before measuring, or in a thread."""
    return _found(endpoint, listed_models)


def _found(
    endpoint: Endpoint, listed: Callable[[Endpoint], list[str]] | None
) -> tuple[str, TokenCounter] | None:
    if endpoint.tokenizer:
        return endpoint.tokenizer, load_token_counter(endpoint.tokenizer)
    candidates = [endpoint.model, *(listed(endpoint) if listed else ())]
    for name in dict.fromkeys(candidates):
        if _local(name):
            try:
                return name, load_token_counter(name)
            except LosslessError:
                continue  # not a tokenizer after all (or no engine extra): the next candidate
    return None


def _local(name: str) -> bool:
    """An embedded model already cached, or an existing local file or folder (nothing is fetched)."""
    from lossless.models import EMBEDDED, resolve

    try:
        path = resolve(name, pull_missing=False)
    except (ModelError, OSError):  # not a model, or a name too long for a path
        return False
    return path.exists() and (name in EMBEDDED or path.is_file() or (path / "tokenizer.json").exists())


def listed_models(endpoint: Endpoint, connect_timeout: float = 10.0) -> list[str]:
    """The ids an endpoint's /v1/models lists (none when it has no such route or answers otherwise)."""
    from lossless.client.endpoints import api_key
    from lossless.client.http import Session

    async def ask() -> str | None:
        e = endpoint
        session = Session(e.base_url, dict(e.headers), api_key(e), connect_timeout)
        try:
            return await session.get_text(e.base_url.rstrip("/") + "/models", timeout=5.0, limit=1 << 20)
        finally:
            await session.aclose()

    try:
        data = json.loads(asyncio.run(ask()) or "null")
    except (ValueError, RecursionError):
        return []
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return []
    return [m["id"] for m in rows if isinstance(m, dict) and isinstance(m.get("id"), str)]
