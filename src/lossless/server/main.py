"""``lossless serve``: load the model, bind, announce the URL on stderr once ready, serve until Ctrl-C."""

from __future__ import annotations

import asyncio
import math
import signal
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import uvicorn

from lossless import models
from lossless.engine.batch.decode import DRAFT_ROWS
from lossless.engine.engine import Engine
from lossless.engine.speculate.spec import parse_drafter_spec, resolve_drafter
from lossless.engine.torch_thread import in_fresh_thread
from lossless.engine.weights.dtype import resolve_dtype
from lossless.errors import UsageError
from lossless.server.compiling import BackgroundCompile, child_config, compile_now, engine_cache
from lossless.server.http.app import RequestContext, create_app
from lossless.server.http.connection import guarded_h11
from lossless.server.http.limits import DEFAULT_LIMITS, RequestLimits
from lossless.server.options import ServeOptions

_EVERYWHERE = ("", "0.0.0.0", "::")  # wildcard addresses: bound on every interface


@dataclass(frozen=True)
class LoadedModel:
    engine: Engine
    name: str  # what /v1/models reports
    aliases: frozenset[str]  # other names requests may use for it
    compile_s: float | None = None  # seconds spent compiling at start-up (None: eager)


def load_model(config: ServeOptions) -> LoadedModel:
    """`_load_model` in a thread that ends with it: the jobs' threads are then the process's only
    OpenMP teams (`engine.torch_thread`)."""
    return in_fresh_thread(lambda: _load_model(config), name="lossless-load")


def _load_model(config: ServeOptions) -> LoadedModel:
    """The engine plus its names. Loaded by an embedded name (or by default), the model is served under
    that name; loaded from a path, under the engine's name. Either way requests may also call it by the
    checkpoint's file name or stem, or by whatever ``--model`` said. A ``config.dtype`` of "auto" is
    resolved here (`resolve_dtype`): the engine, and whatever reads its dtype, sees the real one."""
    path = models.resolve(config.model)
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    dtype, _ = resolve_dtype(config.dtype, path)
    engine = Engine.load(path, dtype=dtype, max_context=config.max_context, int4_kernel=config.int4_kernel)
    drafter = resolve_drafter(config.speculative, path)
    spec = parse_drafter_spec(drafter, config.spec_k, config.spec_threshold, config.spec_tree)
    engine.use_drafter(spec)
    compile_s = compile_now(engine) if config.compile == "wait" else None  # background: `serve`
    requested = config.model or models.DEFAULT_MODEL
    name = requested if requested in models.EMBEDDED else engine.name
    aliases = {engine.name, path.stem, path.name, requested, *_embedded_names(path)}
    return LoadedModel(engine, name, frozenset(aliases) - {name}, compile_s)


def prepare_compiled(model: str | None) -> tuple[Path, float | None]:
    """``lossless models pull --compile``: compile what ``lossless serve --model MODEL`` serves by default
    into its cache folder, so that the server's first start swaps compiled graphs in within seconds (22-24 s
    after launch on 2 cores). The folder, and the seconds it took (None: the folder was complete already)."""
    loaded = load_model(ServeOptions(model=model, compile="off"))
    cache = engine_cache(loaded.engine)
    if cache.complete() is not None:
        return cache.folder, None
    return cache.folder, in_fresh_thread(lambda: compile_now(loaded.engine), name="lossless-compile")


def decoding_as(loaded: LoadedModel, config: ServeOptions) -> LoadedModel:
    """``loaded`` decoding as ``config`` says (its drafter), sharing the weights: one copy in memory.

    The drafter lives on the engine, so a second mode needs a second engine (`Engine.with_drafter`). It
    shares the weights *and the KV cache*, and the lock that guards them: two servers on one engine take
    turns request by request, and can never interleave two generations. ``config.dtype`` plays no part:
    the weights are loaded already, and ``auto`` keeps the drafter it was loaded with (``config.model``
    need not name the loaded model: tests serve a tiny one under default options).
    """
    if config.speculative == "auto":
        return loaded
    spec = parse_drafter_spec(config.speculative, config.spec_k, config.spec_threshold, config.spec_tree)
    current = getattr(loaded.engine, "spec", None) or parse_drafter_spec("none")
    if current == spec:
        return loaded
    return LoadedModel(loaded.engine.with_drafter(spec), loaded.name, loaded.aliases, loaded.compile_s)


def _embedded_names(path: Path) -> list[str]:
    return [m.name for m in models.EMBEDDED.values() if models.cached_path(m) == path]


def build_app(
    loaded: LoadedModel, config: ServeOptions, limits: RequestLimits = DEFAULT_LIMITS
) -> RequestContext:
    return create_app(
        loaded.engine,
        name=loaded.name,
        aliases=loaded.aliases,
        max_queue=config.max_queue,
        limits=limits,
        max_batch=config.max_batch,
    )


def batched(config: ServeOptions) -> ServeOptions:
    """``config`` as a continuous batch serves it (``--max-batch`` above 1): no compile where the batch
    runs (its forward is eager: compiled graphs would serve nothing). A draft model keeps one request at a
    time (`batch_lines`), compiled as asked."""
    if config.max_batch <= 1 or resolve_drafter(config.speculative, config.model).startswith("draft:"):
        return config
    return replace(config, compile="off")


def batch_lines(config: ServeOptions, engine: Engine) -> list[str]:
    """What start-up says of the batch: its size, how it drafts and its KV cache, or why requests run one
    at a time."""
    if config.max_batch <= 1:
        return []
    if engine.drafter is not None and engine.batch_drafter() is None:
        return [
            "lossless: a draft model's KV cache holds one sequence: requests run one at a time "
            f"(--speculative ngram, dspark or none decode up to {config.max_batch} together)"
        ]
    per_position = 2 * engine.args.n_layers * engine.args.n_kv_heads * engine.args.head_dim
    megabytes = per_position * engine.model.output.weight.element_size() * engine.max_context / 1e6
    drafting = "plain decoding"
    if engine.spec is not None and engine.drafter is not None:
        drafting = (
            f"each request drafting with its own {engine.spec.kind} drafter, fewer draft tokens as more "
            f"requests decode (none beyond {DRAFT_ROWS // 2})"
        )
    return [
        f"lossless: continuous batching of up to {config.max_batch} requests, {drafting}, eager (compiled "
        f"graphs do not serve the batch yet); a KV cache slot of {engine.max_context} positions each, "
        f"{megabytes:.0f} MB a slot at most, taken as used"
    ]


def bind(host: str, port: int) -> socket.socket:
    """Listen before uvicorn starts, so that a busy port is a one-line error and port 0 has a number."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def url_of(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    if host in _EVERYWHERE:  # loopback reaches it from here
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """Tells the app when shutdown begins. uvicorn waits ``timeout_graceful_shutdown`` for responses to
    end, then cancels them: a queued request got a plain-text 500 and a running stream was cut mid-event.
    Told first, the app answers its queue with 503s and gives the running generation ``shutdown_grace_s``
    (ending it with an error event if it needs longer), all within uvicorn's wait."""

    def __init__(self, config: uvicorn.Config, app: RequestContext) -> None:
        super().__init__(config)
        self.app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.app.begin_shutdown()
        await super().shutdown(sockets)


def uvicorn_server(app: RequestContext, limits: RequestLimits = DEFAULT_LIMITS) -> uvicorn.Server:
    def count(status: int) -> None:  # refusals made before a request reaches the app
        app.metrics.requests.inc(1, "other", str(status))

    # log_config=None: leave the process's logging alone (the server also runs inside other commands);
    # uvicorn's warnings and errors still reach stderr through logging's last-resort handler.
    config = uvicorn.Config(
        app,
        http=guarded_h11(limits.head_timeout_s, count),
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="on",
        # a second beyond the generation's grace: its last events and [DONE] still leave
        timeout_graceful_shutdown=math.ceil(limits.shutdown_grace_s) + 1,
    )
    return _Server(config, app)


OUTPUT_LAYERS = {  # Engine.output_layer -> what serves it
    "q8": "the file's Q8_0 blocks, our 8-bit kernel (activations rounded to int8 per block of 32)",
    "packed": "oneDNN's packed bfloat16 weight (this CPU computes bfloat16)",
}


def serve(config: ServeOptions, limits: RequestLimits = DEFAULT_LIMITS) -> None:
    dtype, reason = resolve_dtype(config.dtype, models.resolve(config.model))
    config = batched(replace(config, dtype=dtype))
    loaded = load_model(config)
    sock = bind(config.host, config.port)
    server = uvicorn_server(build_app(loaded, config, limits), limits)
    line = f"lossless: serving {loaded.name} at {url_of(sock, config.host)}/v1"
    if config.host in _EVERYWHERE:
        line += f" (listening on all interfaces, {config.host})"
    # the URL line comes first (scripts read it), the weights' dtype and why just after it
    lines = [line, f"lossless: {reason}"]
    if loaded.engine.int4_kernel is not None:
        lines.append(f"lossless: int4 layers on {loaded.engine.int4_kernel[1]}")
    if loaded.engine.prompt_choice is not None:
        lines.append(f"lossless: {loaded.engine.prompt_choice}")
    if loaded.engine.output_layer in OUTPUT_LAYERS:
        lines.append(f"lossless: output layer on {OUTPUT_LAYERS[loaded.engine.output_layer]}")
    if loaded.compile_s is not None:
        lines.append(f"lossless: forward passes compiled in {loaded.compile_s:.0f} s (torch.compile)")
    lines += batch_lines(config, loaded.engine)
    background = None
    if config.compile == "background":
        background = BackgroundCompile(loaded.engine, child_config(config, loaded.engine), _say)
    # uvicorn shuts down on SIGTERM as on Ctrl-C, then raises the signal again with the handler it found:
    # the default one ended the process there, before the compile child was stopped (it ran on for
    # minutes, orphaned). With this one SIGTERM ends the server as Ctrl-C does, children and all.
    before = signal.signal(signal.SIGTERM, _interrupt)
    try:
        asyncio.run(_serve_and_announce(server, sock, lines, background))
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it shut down on; for a server that is the end
        print("lossless: stopped", file=sys.stderr)
    finally:
        if background is not None:
            background.stop()
        sock.close()
        signal.signal(signal.SIGTERM, before)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _serve_and_announce(
    server: uvicorn.Server, sock: socket.socket, lines: list[str], background: BackgroundCompile | None
) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        print("\n".join(lines), file=sys.stderr, flush=True)
        if background is not None:  # after the URL line: scripts wait for that one first
            background.start()
    await task
