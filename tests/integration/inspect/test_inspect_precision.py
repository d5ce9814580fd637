"""Precision (claim 2 of `lossless inspect`) against our own server on the real embedded model: float32
and bfloat16 servers as references, a second float32 and a second bfloat16 server as candidates; each
candidate placed at its own precision, its repeats bit-identical, the other reference far outside the band.

The weights are loaded once per dtype for the module; a reference and its candidate are two servers on
that one engine (a server is an HTTP front over it: what the candidate is asked is answered exactly as
a separately loaded copy answers, the engine being deterministic on a CPU).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lossless.client.endpoints import Endpoint
from lossless.inspect import precision
from lossless.inspect.precision import Scores

if TYPE_CHECKING:
    from lossless.engine.engine import Engine

pytestmark = pytest.mark.slow
DTYPES = ("float32", "bfloat16")
# three short texts of the eight (135 tokens): a bfloat16 forward is ~5x a float32 one on a CPU without
# bfloat16 instructions, and the three keep the file near 90 s on 2 busy cores
TEXTS = tuple(precision.TEXTS[i] for i in (0, 4, 6))


@pytest.fixture(scope="module")
def servers(smollm2_path: Path, smollm2_engine: Engine) -> Iterator[dict[str, Endpoint]]:
    """Per dtype a reference and a candidate server (float32 on the session's engine)."""
    from lossless.server.launch import start_embedded
    from lossless.server.main import LoadedModel, load_model
    from lossless.server.options import ServeOptions

    with ExitStack() as stack:
        found = {}
        for dtype in DTYPES:
            loaded = (
                LoadedModel(smollm2_engine, smollm2_engine.name, frozenset())
                if dtype == "float32"
                else load_model(ServeOptions(model=str(smollm2_path), dtype=dtype))
            )
            for role in ("reference", "candidate"):
                url = stack.enter_context(start_embedded(ServeOptions(dtype=dtype), loaded=loaded))
                found[f"{role} {dtype}"] = Endpoint(f"{role} {dtype}", url, loaded.name)
        yield found


@pytest.fixture(scope="module")
def references(servers: dict[str, Endpoint]) -> dict[str, Scores]:
    return {d: asyncio.run(precision.score(servers[f"reference {d}"], texts=TEXTS))[0] for d in DTYPES}


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_candidate_is_placed_at_its_own_precision(
    dtype: str, servers: dict[str, Endpoint], references: dict[str, Scores]
) -> None:
    first, second = asyncio.run(precision.score(servers[f"candidate {dtype}"], 2, TEXTS))
    got = precision.judge(first, second, references)
    print(f"\n{dtype}: {got.as_dict()}")  # docs/results/2026-12-02-inspect.md's figures
    assert got.verdict == "evident" and got.nearest == dtype, got.note
    assert got.method == "echo" and got.bit_identical is True and got.floor == 0.0
    assert got.texts == len(TEXTS) and got.tokens > 100
    (near, far) = got.distances
    assert near["reference"] == dtype and near["distance"] <= precision.BAND
    assert far["ci"][0] > 2 * precision.BAND  # float32 against bfloat16: ~0.04 nats/token
