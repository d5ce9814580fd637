"""On the real SmolLM2-135M in the numerics ``lossless serve`` gives it here (int4 on our kernel, the output
layer on the file's Q8_0 blocks): the greedy tokens of every request in a continuous batch - prompts from
a few tokens to three chunks row by row and five through torch's attention, other budgets, joining at
other steps, more requests than slots - are the tokens it gets alone, every one of them; with the plain
norm in the batch's pass (the one it replaced, `batch.forward.rms_norm_rows`) some are not, so the test
can fail. Requests drafting inside the batch (the draft head's trees, n-gram chains) get those tokens
too."""

from __future__ import annotations

from pathlib import Path

import pytest

from lossless.engine.batch import forward as batch_forward
from lossless.engine.batch.decode import PREFILL_CHUNK, ROWWISE_PROMPT, DecodeBatch
from lossless.engine.engine import Engine
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate.spec import parse_drafter_spec

pytestmark = pytest.mark.slow

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain recursion to a child in two sentences.",
    "List three colours.",
    "Why is the sky blue?",
    "Give me a short recipe for pancakes.",
]
DOCUMENT = (
    "The river Severn is the longest river in Great Britain, about 354 km long. It rises in the Cambrian "
    "Mountains in Wales and flows through Shrewsbury, Worcester and Gloucester to the Bristol Channel. "
) * 6  # ~300 tokens with the question: three chunks of the prompt, row by row
BUDGETS = [24, 12, 24, 8, 16, 20, 24, 10]
ARRIVALS = [0, 0, 1, 3, 3, 6, 8, 10]  # steps; 8 requests in 5 slots


@pytest.fixture(scope="module")
def engine(smollm2_path: Path) -> Engine:
    engine = Engine.load(smollm2_path, dtype="int4")
    if not engine.decode_batch(1).invariant:
        pytest.skip("our int4 and 8-bit kernels are not both built here (AVX-512 VNNI): not invariant")
    return engine


def prompts(engine: Engine) -> list[list[int]]:
    chats = [[{"role": "user", "content": q}] for q in QUESTIONS]
    chats.append([{"role": "user", "content": f"{DOCUMENT}\nHow long is the Severn?"}])
    # ~600 tokens: over ROWWISE_PROMPT, so in chunks through torch's attention, cut the same in any batch
    chats.append([{"role": "user", "content": f"{DOCUMENT * 2}\nWhere does the Severn rise?"}])
    return [engine.chat_prompt(chat) for chat in chats]


def serve(engine: Engine, which: list[int], slots: int, arrivals: list[int]) -> dict[int, list[int]]:
    batch: DecodeBatch[int] = engine.decode_batch(slots)
    asked = prompts(engine)
    waiting = sorted(which, key=lambda i: arrivals[i])
    tokens: dict[int, list[int]] = {i: [] for i in which}
    ACCEPTED.clear()
    for step in range(2000):
        while waiting and arrivals[waiting[0]] <= step and batch.free():
            i = waiting.pop(0)
            params = SamplingParams(max_tokens=BUDGETS[i], temperature=0.0, ignore_eos=True)
            batch.add(i, asked[i], params)
        if not waiting and not batch.running():
            return tokens
        for i, delta in batch.step():
            tokens[i] += delta.token_ids
            if delta.finish_reason is not None:
                ACCEPTED.append(delta.stats.get("accepted", 0))
    raise AssertionError("the batch did not finish")


ACCEPTED: list[int] = []  # the last `serve`'s drafted tokens accepted, by request


def alone_and_mixed(
    engine: Engine, drafting: Engine | None = None
) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Each request alone on ``engine`` and all of them in one batch on ``drafting`` (default: the same)."""
    alone = {i: serve(engine, [i], 1, [0] * len(BUDGETS))[i] for i in range(len(BUDGETS))}
    return alone, serve(drafting or engine, list(range(len(BUDGETS))), 5, ARRIVALS)


def test_greedy_tokens_under_load_are_the_tokens_alone(engine: Engine) -> None:
    lengths = [len(p) for p in prompts(engine)]
    assert min(lengths) < 40 and 2 * PREFILL_CHUNK < lengths[-2] <= ROWWISE_PROMPT < lengths[-1]
    alone, mixed = alone_and_mixed(engine)
    assert [len(mixed[i]) for i in range(len(BUDGETS))] == BUDGETS
    assert [i for i in alone if mixed[i] != alone[i]] == []


@pytest.mark.parametrize("drafter", ["dspark", "ngram"])
def test_greedy_tokens_speculating_under_load_are_plain_decoding_s_alone(
    engine: Engine, drafter: str
) -> None:
    """Each request drafting in the batch (the draft head's trees, or n-gram chains; fewer draft tokens as
    more requests decode) gets the tokens plain decoding gives it alone."""
    alone, mixed = alone_and_mixed(engine, engine.with_drafter(parse_drafter_spec(drafter)))
    assert [len(mixed[i]) for i in range(len(BUDGETS))] == BUDGETS
    assert [i for i in alone if mixed[i] != alone[i]] == []
    assert sum(ACCEPTED) > 0  # drafts were accepted: the test saw speculation


def test_the_plain_norm_in_the_batch_changes_answers(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_forward, "rms_norm_rows", lambda norm, x: norm(x))
    monkeypatch.setattr(batch_forward, "layer_stack", lambda model: None)  # every step's layers op by op
    alone, mixed = alone_and_mixed(engine)
    assert [i for i in alone if mixed[i] != alone[i]] != []
