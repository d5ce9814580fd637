"""`Engine.use_drafter`: the engine decodes speculatively behind the same interface, gives the plain
greedy text and puts the acceptance figures the server's /metrics reads on the last delta."""

from __future__ import annotations

from pathlib import Path

import pytest

from lossless.engine.drafts import parse_drafter_spec
from lossless.engine.engine import Delta, Engine
from lossless.engine.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=40, temperature=0.0)


def joined(deltas: list[Delta]) -> tuple[str, list[int], str | None]:
    return "".join(d.text for d in deltas), [t for d in deltas for t in d.token_ids], deltas[-1].finish_reason


@pytest.mark.parametrize("spec", ["none", "ngram", "draft"])
def test_engine_generate_with_a_drafter_gives_the_plain_text_and_stats(
    tiny_checkpoint: Path, spec: str
) -> None:
    engine = Engine.load(tiny_checkpoint)
    prompt = engine.encode("def main():\n    return 42\ndef main():\n    return 42\ndef")
    plain = joined(list(engine.generate(prompt, GREEDY)))
    engine.use_drafter(parse_drafter_spec({"draft": f"draft:{tiny_checkpoint}"}.get(spec, spec)))
    deltas = list(engine.generate(prompt, GREEDY))
    assert joined(deltas) == plain
    stats = deltas[-1].stats
    assert stats["completion_tokens"] == len(plain[1])
    if spec == "none":
        assert "drafted" not in stats
    else:  # what the server's /metrics reads
        assert stats["drafted"] > 0 and sum(stats["accept_counts"]) == stats["steps"]
