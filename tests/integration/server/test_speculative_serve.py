"""`Engine.use_drafter`: the engine decodes speculatively behind the same interface, gives the plain
greedy text and puts the acceptance figures the server's /metrics reads on the last delta."""

from __future__ import annotations

from pathlib import Path

import pytest

from lossless.engine.engine import Delta, Engine
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate.spec import parse_drafter_spec

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


def _metric(text: str, name: str) -> float:
    # the sum over the metric's label sets (name{...} value lines)
    return sum(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith((name + " ", name + "{"))
    )


def test_one_loaded_model_serves_plain_and_speculative_side_by_side(tiny_checkpoint: Path) -> None:
    """verify and demo serve one loaded model twice: the second server must really draft, the first not."""
    import httpx

    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model
    from lossless.server.options import ServeOptions

    # float32 on every machine: greedy texts are equal there (bfloat16 rounds a forward over several tokens
    # differently from one over a single token)
    plain = ServeOptions(model=str(tiny_checkpoint), dtype="float32", speculative="none")
    loaded = load_model(plain)
    body = {"prompt": "abc abc abc abc abc abc abc", "max_tokens": 24, "temperature": 0}
    with (
        start_embedded(plain, loaded=loaded) as plain_url,
        start_embedded(
            ServeOptions(model=str(tiny_checkpoint), dtype="float32", speculative="ngram"), loaded=loaded
        ) as spec_url,
        httpx.Client(trust_env=False, timeout=60) as client,
    ):
        texts = [
            client.post(url + "/completions", json=body).json()["choices"][0]["text"]
            for url in (plain_url, spec_url)
        ]
        steps = [
            _metric(client.get(url.removesuffix("/v1") + "/metrics").text, "lossless_spec_verify_steps_total")
            for url in (plain_url, spec_url)
        ]
    assert texts[0] == texts[1]  # greedy: speculative decoding gives the plain text
    # the tiny model's text rarely repeats, so few drafts; but every speculative step is counted
    assert steps[0] == 0 and steps[1] > 0
    assert loaded.engine.spec is None or loaded.engine.spec.kind == "none"  # the plain server stayed plain
