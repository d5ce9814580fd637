"""The generation loop: stop sequences, eos, budgets, logprobs, cancellation (scripted token sources)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from lossless.engine.engine import Delta, Engine
from lossless.engine.model.generate import Accepted, generate_text
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.model.tokenizer import Tokenizer
from lossless.errors import UsageError


@pytest.fixture(scope="module")
def tok(tiny_checkpoint: Path) -> Tokenizer:
    return Engine.load(tiny_checkpoint).tokenizer


def scripted(ids: list[int], per_batch: int = 1, vocab: int = 300) -> Iterator[Accepted]:
    """A token source replaying ``ids`` (as the speculative decoder would: several per batch)."""
    for i in range(0, len(ids), per_batch):
        batch = ids[i : i + per_batch]
        logits = torch.zeros(len(batch), vocab)
        logits[torch.arange(len(batch)), torch.tensor(batch)] = 5.0
        yield Accepted(batch, logits)
    raise AssertionError("the loop pulled more tokens than it needed")


def run(
    tok: Tokenizer, ids: list[int], params: SamplingParams, per_batch: int = 1, budget: int | None = None
) -> list[Delta]:
    budget = len(ids) if budget is None else budget
    return list(generate_text(scripted(ids, per_batch), tok, params, budget=budget))


def text_of(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas)


@pytest.mark.parametrize("per_batch", [1, 3])
def test_stop_sequence_is_cut_and_held_back(tok: Tokenizer, per_batch: int) -> None:
    ids = tok.encode("Hello, world! How are you today?")
    deltas = run(tok, ids, SamplingParams(stop=("world!", "xyz")), per_batch)
    assert text_of(deltas) == "Hello, "
    assert deltas[-1].finish_reason == "stop"
    assert all("w" not in d.text for d in deltas)  # "w..." was held until it was known to be the stop


def test_partial_stop_match_is_released(tok: Tokenizer) -> None:
    ids = tok.encode("Hello, world! How are you today?")
    deltas = run(tok, ids, SamplingParams(stop=("world?",)))
    assert text_of(deltas) == "Hello, world! How are you today?"
    assert deltas[-1].finish_reason == "length"


def test_eos_stops_and_is_not_text(tok: Tokenizer) -> None:
    ids = [*tok.encode("Paris."), 2, *tok.encode("junk")]
    deltas = run(tok, ids, SamplingParams())
    assert text_of(deltas) == "Paris."
    assert deltas[-1].finish_reason == "stop"
    assert [t for d in deltas for t in d.token_ids] == ids[: ids.index(2) + 1]


def test_budget_and_extra_tokens_of_a_batch(tok: Tokenizer) -> None:
    ids = tok.encode("The quick brown fox jumps over the lazy dog.")
    deltas = run(tok, ids, SamplingParams(), per_batch=4, budget=5)
    assert [t for d in deltas for t in d.token_ids] == ids[:5]
    assert text_of(deltas) == tok.decode(ids[:5])
    assert deltas[-1].finish_reason == "length" and deltas[-1].stats["completion_tokens"] == 5
    (empty,) = run(tok, ids, SamplingParams(), budget=0)
    assert (empty.text, empty.token_ids, empty.finish_reason) == ("", (), "length")


def test_logprobs_one_per_token(tok: Tokenizer) -> None:
    ids = tok.encode("a😀b")
    deltas = run(tok, ids, SamplingParams(logprobs=True, top_logprobs=2))
    for d in deltas:
        assert len(d.logprobs) == len(d.token_ids)
    flat = [lp for d in deltas for lp in d.logprobs]
    assert [lp.token_id for lp in flat] == ids
    assert all(lp.top[0][0] == lp.token_id and len(lp.top) == 2 for lp in flat)
    expected = float(torch.log_softmax(torch.tensor([5.0] + [0.0] * 299), 0)[0])
    assert flat[0].logprob == pytest.approx(expected)
    assert all(d.text for d in deltas[:-1])  # no empty deltas while the emoji's bytes were held


def test_cancel_between_tokens(tiny_engine: Engine) -> None:
    cancel = threading.Event()
    stream = tiny_engine.generate(tiny_engine.encode("Hello"), SamplingParams(max_tokens=100, seed=0), cancel)
    n = 0
    for delta in stream:
        n += len(delta.token_ids)
        if delta.finish_reason is None and n >= 3:
            cancel.set()
        last = delta
    assert last.finish_reason in ("cancelled", "stop")
    assert n < 100


def test_context_limit(tiny_checkpoint: Path) -> None:
    engine = Engine.load(tiny_checkpoint, max_context=32)
    assert engine.max_context == 32
    prompt = engine.encode("The quick brown fox jumps over the lazy dog.")[:28]
    deltas = list(engine.generate(prompt, SamplingParams(max_tokens=100, temperature=0.0)))
    n = sum(len(d.token_ids) for d in deltas)
    assert n <= 4
    with pytest.raises(UsageError, match="context holds 32"):
        list(engine.generate(prompt * 2, SamplingParams()))
    with pytest.raises(UsageError, match="empty"):
        list(engine.generate([], SamplingParams()))


def test_engine_generate_is_consistent_with_score(tiny_engine: Engine) -> None:
    prompt = tiny_engine.encode("Hello, world")
    params = SamplingParams(max_tokens=8, temperature=0.0, logprobs=True, top_logprobs=3)
    deltas = list(tiny_engine.generate(prompt, params))
    out = [t for d in deltas for t in d.token_ids]
    scored = tiny_engine.score(prompt + out, top_logprobs=3)
    assert scored[0] is None and len(scored) == len(prompt) + len(out)
    for lp, ref in zip([lp for d in deltas for lp in d.logprobs], scored[len(prompt) :], strict=True):
        assert ref is not None and ref.token_id == lp.token_id
        assert lp.logprob == pytest.approx(ref.logprob, abs=1e-4)
        assert lp.top[0][0] == lp.token_id  # greedy picks the most likely token
