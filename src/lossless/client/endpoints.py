"""Endpoints to measure: from URLs on the command line or a TOML file of ``[[endpoint]]`` tables.

An Endpoint names the environment variable that holds its API key, never the key: the key is read from
the environment only when the HTTP client is built, and lives in that client's headers alone.

    [[endpoint]]
    name = "fast"
    base_url = "https://api.example.com/v1"
    model = "some-model"
    api_key_env = "EXAMPLE_API_KEY"
    body = { reasoning_effort = "low" }     # extra request fields (optional)
    headers = { "x-team" = "bench" }        # extra headers (optional)
    price = { input = 0.15, output = 0.60, cached_input = 0.075 } # USD per million tokens (optional;
                                            # cached_input: prompt tokens served from the prefix cache)
    tokenizer = "path/to/tokenizer.json"    # counts output tokens if the server sends no usage (optional)
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from lossless import validate
from lossless.errors import EndpointError, UsageError

_FIELDS = ("name", "base_url", "model", "api_key_env", "body", "headers", "price", "tokenizer")


@dataclass(frozen=True)
class Endpoint:
    name: str  # label in tables and records
    base_url: str  # e.g. https://host/v1 (no trailing slash)
    model: str  # the "model" request field
    api_key_env: str | None = None  # environment variable holding the key; None -> no Authorization header
    body: Mapping[str, Any] = field(default_factory=dict)  # extra request fields, merged last
    headers: Mapping[str, str] = field(default_factory=dict)  # extra request headers
    price_in: float | None = None  # USD per million input tokens
    price_out: float | None = None  # USD per million output tokens
    price_cached_in: float | None = None  # USD per million cached input tokens; None: at price_in
    tokenizer: str | None = None  # counts N_out when the server sends no usage: tokenizer.json, GGUF, name
    # found, not written: it takes stream_options.continuous_usage_stats (vLLM's; ours), so every chunk of
    # a stream carries the running token count and inter-token times are per token, not per chunk
    running_usage: bool = False
    stream: bool | None = None  # set, not written: its requests streamed (or not) whatever the run's are


def api_key(endpoint: Endpoint) -> str | None:
    if endpoint.api_key_env is None:
        return None
    key = os.environ.get(endpoint.api_key_env)
    if not key:
        raise EndpointError(
            f"endpoint {endpoint.name!r}: environment variable {endpoint.api_key_env} is not set"
        )
    try:  # the key goes in a header: a line break there was refused only when the request was made
        validate.http_headers({"authorization": f"Bearer {key}"}, "")
    except UsageError:
        raise UsageError(  # the message names the variable, never the key
            f"endpoint {endpoint.name!r}: environment variable {endpoint.api_key_env} holds a line break "
            "or control character, which an HTTP header cannot carry"
        ) from None
    return key


def public_url(url: str) -> str:
    """``url`` as it may be printed or saved: without user info (a password may sit there), query or
    fragment (some providers put a key there)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host  # IPv6
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def parse_urls(urls: Sequence[str], model: str | None, api_key_env: str | None) -> tuple[Endpoint, ...]:
    """URLs as endpoints of ``model``, checked, each named by its host; no request is made."""
    if not model:
        raise UsageError("--model is required with endpoint URLs")
    if api_key_env is not None:
        validate.env_name(api_key_env, "--api-key-env")
    checked = [validate.http_url(u, "argument") for u in urls]  # before urlsplit below can raise
    # host[:port], never the user info: a name is printed and saved, and a password may sit there
    names = [urlsplit(u).netloc.rpartition("@")[2] for u in checked]
    if len(set(names)) < len(names):  # same host twice: tell them apart by position
        names = [f"{n}#{i + 1}" for i, n in enumerate(names)]
    return tuple(
        Endpoint(name=n, base_url=u, model=model, api_key_env=api_key_env)
        for n, u in zip(names, checked, strict=True)
    )


def load_toml(path: Path) -> tuple[Endpoint, ...]:
    doc = _read_toml(path)
    unknown = sorted(set(doc) - {"endpoint"})
    if unknown:  # a misspelt [[endpionts]] would otherwise be ignored without a word
        raise UsageError(f"endpoints file {path}: unknown top-level key(s) {', '.join(unknown)}")
    tables = doc.get("endpoint")
    if not isinstance(tables, list) or not tables:
        raise UsageError(f"endpoints file {path} has no [[endpoint]] tables")
    endpoints = tuple(_endpoint(t, f"{path} endpoint #{i + 1}") for i, t in enumerate(tables))
    names = [e.name for e in endpoints]
    if len(set(names)) < len(names):
        raise UsageError(f"endpoints file {path}: endpoint names must be unique, got {names}")
    return endpoints


def load_pair(path: Path) -> tuple[Endpoint, Endpoint]:
    """verify's two sides from the one endpoints file format, two ``[[endpoint]]`` tables (the baseline
    first); or, as earlier versions wrote it, a ``[baseline]`` and a ``[candidate]`` table (the same
    fields, ``name`` optional). Each side has its own URL, model, key, headers and extra body fields,
    e.g. one endpoint with reasoning on against itself with it off.

        [baseline]
        base_url = "https://api.example.com/v1"
        model = "m"
        [candidate]
        base_url = "https://api.example.com/v1"
        model = "m"
        body = { reasoning_effort = "none" }
    """
    doc = _read_toml(path)
    if "endpoint" in doc:
        found = load_toml(path)
        if len(found) != 2:
            raise UsageError(
                f"endpoints file {path}: verify compares two [[endpoint]] tables, got {len(found)}"
            )
        return found[0], found[1]
    unknown = set(doc) - {"baseline", "candidate"}
    if unknown or not {"baseline", "candidate"} <= set(doc):
        raise UsageError(
            f"endpoints file {path}: expected a [baseline] and a [candidate] table, got {sorted(doc)}"
        )
    sides = []
    for side in ("baseline", "candidate"):
        table = doc[side]
        if isinstance(table, dict):
            table = {"name": side, **table}
        sides.append(_endpoint(table, f"{path} [{side}]"))
    return sides[0], sides[1]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read endpoints file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"endpoints file {path} is not UTF-8 text: {exc.reason}") from exc
    except ValueError as exc:  # TOMLDecodeError, and an int past Python's 4300 digits
        raise UsageError(f"endpoints file {path} is not valid TOML: {exc}") from exc
    except RecursionError:
        raise UsageError(f"endpoints file {path} nests too deeply") from None


def _endpoint(table: Any, where: str) -> Endpoint:
    if not isinstance(table, dict):
        raise UsageError(f"{where} is not a table")
    unknown = set(table) - set(_FIELDS)
    if unknown:
        raise UsageError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    for key in ("name", "base_url", "model"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise UsageError(f"{where}: '{key}' must be a non-empty string")
    key_env = table.get("api_key_env")
    if key_env == "":  # as good as absent: no Authorization header
        key_env = None
    if key_env is not None:
        validate.env_name(key_env, f"{where}: 'api_key_env'")
    tokenizer = table.get("tokenizer")
    if tokenizer is not None and (not isinstance(tokenizer, str) or not tokenizer):
        raise UsageError(f"{where}: 'tokenizer' must be a path or an embedded model's name")
    body, headers = table.get("body", {}), table.get("headers", {})
    if not isinstance(body, dict) or not isinstance(headers, dict):
        raise UsageError(f"{where}: 'body' and 'headers' must be tables")
    price_in, price_out, price_cached_in = _price(table.get("price"), where)
    return Endpoint(
        name=table["name"],
        base_url=validate.http_url(table["base_url"], where),
        model=table["model"],
        api_key_env=key_env,
        body=validate.json_body(body, where),
        headers=validate.http_headers(headers, where),
        price_in=price_in,
        price_out=price_out,
        price_cached_in=price_cached_in,
        tokenizer=tokenizer,
    )


def _price(value: Any, where: str) -> tuple[float | None, float | None, float | None]:
    if value is None:
        return None, None, None
    if isinstance(value, dict) and set(value) <= {"input", "output", "cached_input"}:
        found = (value.get("input", 0.0), value.get("output", 0.0), value.get("cached_input"))
    elif isinstance(value, list) and len(value) == 2:
        found = (value[0], value[1], None)
    else:
        raise UsageError(
            f"{where}: 'price' must be {{input = USD/Mtok, output = USD/Mtok[, cached_input = USD/Mtok]}}"
        )
    if not all(validate.is_number(p) and p >= 0 for p in found if p is not None):  # not true, nan or inf
        raise UsageError(f"{where}: prices must be non-negative numbers, got {value!r}")
    return float(found[0]), float(found[1]), None if found[2] is None else float(found[2])
