"""Where a command's requests go: the URLs it was given, or the embedded model served for the occasion.

One choice for every command (bench, probe, verify, demo): with no URL, the embedded model (or the
checkpoint ``--model`` names) is served as ``lossless serve`` serves it by default - weights in the
fastest exact dtype for this file and CPU (``auto``), decoding speculatively with the auto drafter (the
trained DSpark head for the embedded model, whose head it is, n-gram prompt lookup for any other
checkpoint). A command that compares modes (verify, demo) adds a second server on the same weights
that decodes plainly. Two servers share one engine (one copy of the weights, one KV cache, which the
engine guards itself).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

from lossless import models
from lossless.client.endpoints import Endpoint


def drafter_name(spec: str) -> str:
    """A ``--speculative`` spec in words, for people."""
    kind, _, path = spec.partition(":")
    names = {
        "dspark": "the DSpark draft head, prompt lookup beside it",
        "ngram": "n-gram prompt lookup",
        "draft": f"draft model {path}",
        "none": "no drafter",
    }
    return names.get(kind, spec)


@dataclass(frozen=True)
class Embedded:
    """How the embedded model is served when a command is given no URL."""

    model: str | None = None  # embedded model name or checkpoint path; None: the default model
    dtype: str = "auto"  # auto: `resolve_dtype` (int4 for a Q4 GGUF, else bfloat16 or float32 by the CPU)
    drafter: str | None = None  # the speculative server's; None or auto: serve's (`spec.auto_drafter`)

    @property
    def speculative(self) -> str:
        from lossless.engine.speculate.spec import resolve_drafter

        return resolve_drafter(self.drafter or "auto", self.model)


@dataclass(frozen=True)
class Served:
    endpoints: tuple[Endpoint, ...]  # ("embedded",), or ("plain", "speculative")
    model: str  # the name the servers answer to
    dtype: str  # what "auto" became
    dtype_reason: str


@contextmanager
def serve_embedded(spec: Embedded, *, speculative: bool = False) -> Iterator[Served]:
    """Load the model once and serve it (twice with ``speculative``) on 127.0.0.1 until the block ends."""
    from lossless.engine.weights.dtype import resolve_dtype
    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model
    from lossless.server.options import ServeOptions

    dtype, reason = resolve_dtype(spec.dtype, models.resolve(spec.model))
    # one server decodes as lossless serve does by default; two (``speculative``): plainly, and with
    # the drafter, over one copy of the weights
    alone = ServeOptions(port=0, model=spec.model, dtype=dtype, speculative=spec.speculative)
    plain = replace(alone, speculative="none")
    loaded = load_model(plain if speculative else alone)
    sides = {"plain": plain, "speculative": alone} if speculative else {"embedded": alone}
    with ExitStack() as stack:
        found = tuple(
            Endpoint(
                name,
                stack.enter_context(start_embedded(config, loaded=loaded)),
                loaded.name,
                running_usage=True,  # ours sends usage in every chunk when asked
            )
            for name, config in sides.items()
        )
        yield Served(found, loaded.name, dtype, reason)


@contextmanager
def endpoints(
    given: tuple[Endpoint, ...], spec: Embedded, *, speculative: bool = False
) -> Iterator[tuple[Endpoint, ...]]:
    """``given``, or the embedded model served as ``spec`` says while the block runs."""
    if given:
        yield given
        return
    with serve_embedded(spec, speculative=speculative) as served:
        yield served.endpoints
