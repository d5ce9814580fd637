"""The speculative decoder on loaded checkpoints: ``draft:PATH`` loading and its vocabulary check, and
the decoder as a token source for the engine's generation loop (text, eos, budgets, stats)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tiny_checkpoint import write_tiny_checkpoint

from lossless.engine.engine import Engine, build_drafter
from lossless.engine.model.generate import generate_text
from lossless.engine.model.sampling import SamplingParams, make_generator
from lossless.engine.speculate.drafts import ModelDrafter, NgramDrafter
from lossless.engine.speculate.spec import parse_drafter_spec
from lossless.engine.speculate.speculative import Drafter, speculative_decode
from lossless.engine.speculate.stats import SpecStats
from lossless.errors import UsageError

GREEDY = SamplingParams(max_tokens=40, temperature=0.0)


def speculative_text(engine: Engine, drafter: Drafter, prompt: list[int], params: SamplingParams, k: int):  # type: ignore[no-untyped-def]
    stats = SpecStats(k)
    source = speculative_decode(
        engine.model,
        drafter,
        prompt,
        params,
        max_new_tokens=params.max_tokens,
        k_max=k,
        generator=make_generator(params.seed),
        stats=stats,
    )
    deltas = list(generate_text(source, engine.tokenizer, params, budget=params.max_tokens))
    return deltas, stats


def joined(deltas) -> tuple[str, list[int], str | None]:  # type: ignore[no-untyped-def]
    return "".join(d.text for d in deltas), [t for d in deltas for t in d.token_ids], deltas[-1].finish_reason


@pytest.mark.parametrize("spec", ["ngram", "draft"])
def test_greedy_through_the_generation_loop_equals_plain(tiny_checkpoint: Path, spec: str) -> None:
    target = Engine.load(tiny_checkpoint)
    drafter = build_drafter(
        parse_drafter_spec("ngram" if spec == "ngram" else f"draft:{tiny_checkpoint}"), target
    )
    assert isinstance(drafter, NgramDrafter if spec == "ngram" else ModelDrafter)
    prompt = target.encode("def main():\n    return 42\ndef main():\n    return 42\ndef")
    plain = joined(list(target.generate(prompt, GREEDY)))
    deltas, stats = speculative_text(target, drafter, prompt, GREEDY, k=4)
    assert joined(deltas) == plain
    assert stats.drafted > 0
    if spec == "draft":  # the draft is the target's own checkpoint: every greedy draft is accepted
        assert stats.accepted == stats.drafted


def test_sampling_respects_budget_and_counts(tiny_checkpoint: Path) -> None:
    target = Engine.load(tiny_checkpoint)
    params = SamplingParams(max_tokens=25, temperature=0.8, top_p=0.9, seed=3)
    drafter = build_drafter(parse_drafter_spec(f"draft:{tiny_checkpoint}", k=3), target)
    assert drafter is not None
    deltas, stats = speculative_text(target, drafter, target.encode("Hello, world!"), params, k=3)
    _, ids, finish = joined(deltas)
    assert len(ids) <= 25 and (finish == "stop" or len(ids) == 25)
    assert sum(stats.accept_counts) == stats.steps and stats.emitted + 1 >= len(ids)


def test_draft_with_a_different_vocabulary_is_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    other = write_tiny_checkpoint(tmp_path / "other", seed=1)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[-2:]  # two ordinary tokens trade ids: same size, other meaning
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tok))
    target = Engine.load(tiny_checkpoint)
    with pytest.raises(UsageError, match="vocabulary differs from the target's") as info:
        build_drafter(parse_drafter_spec(f"draft:{other}"), target)
    assert "\n" not in str(info.value)


def test_draft_path_must_exist(tmp_path: Path) -> None:
    shutil.rmtree(tmp_path)
    with pytest.raises(UsageError, match="no such file"):
        parse_drafter_spec(f"draft:{tmp_path}")
