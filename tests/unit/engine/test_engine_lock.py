"""One Engine, one KV cache: generations from several threads (two servers on one engine, as verify and
demo run them) take turns and give exactly their serial outputs; the engine is freed however a stream
ends, and a thread that would wait for itself is told so instead."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from lossless.engine.engine import Delta, Engine
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.model.transformer import KVCache
from lossless.engine.speculate.spec import parse_drafter_spec
from lossless.engine.speculate.speculative import Draft

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# sampled: every token depends on the exact logits, so a cache another generation wrote into shows
PARAMS = (SamplingParams(max_tokens=40, temperature=1.0, seed=1), SamplingParams(max_tokens=40, seed=2))
PROMPTS = ("The quick brown fox jumps over", "def main():\n    return 42\ndef main():\n")


def pair(engine: Engine) -> tuple[Engine, Engine]:
    """The engine plainly and with n-gram drafts: two engines on one model, as `decoding_as` makes them."""
    return engine, engine.with_drafter(parse_drafter_spec("ngram"))


def job(engine: Engine, i: int) -> Iterator[Delta]:
    return engine.generate(engine.encode(PROMPTS[i]), PARAMS[i])


def ids(deltas: Sequence[Delta]) -> list[int]:
    return [t for d in deltas for t in d.token_ids]


def concurrently(engines: tuple[Engine, Engine]) -> list[list[int]]:
    """Both jobs at once, one thread each, released together."""
    start = threading.Barrier(2)
    out: list[list[int]] = [[], []]

    def run(i: int) -> None:
        start.wait()
        out[i] = ids(list(job(engines[i], i)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_two_threads_on_one_engine_give_the_serial_outputs(tiny_engine: Engine) -> None:
    engines = pair(tiny_engine)
    serial = [ids(list(job(engines[i], i))) for i in range(2)]
    assert engines[0].model is engines[1].model and engines[0].lock is engines[1].lock
    for _ in range(3):
        assert concurrently(engines) == serial


def test_a_generation_holds_the_engine_until_its_stream_ends(tiny_engine: Engine) -> None:
    """Deterministic: the second generation, and a scoring, wait while the first is suspended between
    deltas; without the lock they would run at once and write over the first one's cache."""
    first, second = pair(tiny_engine)
    serial = [ids(list(job(e, i))) for i, e in enumerate((first, second))]
    stream = job(first, 0)
    head = [next(stream)]
    assert first.lock.locked()
    done = threading.Event()
    got: list[list[int]] = []

    def other() -> None:
        second.score(second.encode(PROMPTS[0]))
        got.append(ids(list(job(second, 1))))
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    assert not done.wait(0.5)  # a tiny generation takes a few milliseconds: it is waiting
    assert ids(head + list(stream)) == serial[0]
    assert done.wait(60)
    thread.join()
    assert got == [serial[1]]
    assert not first.lock.locked()


class _Failing:
    def begin(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(
        self, context: Sequence[int], k: int, params: object, generator: object, hidden: object
    ) -> Draft:
        raise RuntimeError("the drafter failed")

    def observe(self, drafted: int, accepted: int) -> None:
        pass


def test_the_engine_is_freed_however_a_stream_ends(tiny_engine: Engine) -> None:
    prompt, params = tiny_engine.encode(PROMPTS[0]), PARAMS[0]
    stream = tiny_engine.generate(prompt, params)
    next(stream)
    stream.close()  # stopped early, as the server's worker does when a client leaves
    assert not tiny_engine.lock.locked()
    next(tiny_engine.generate(prompt, params))  # abandoned unclosed: the garbage collector closes it
    gc.collect()
    assert not tiny_engine.lock.locked()
    failing = tiny_engine.with_drafter(parse_drafter_spec("ngram"))
    failing.drafter = _Failing()
    with pytest.raises(RuntimeError, match="the drafter failed"):
        list(failing.generate(prompt, params))
    assert not tiny_engine.lock.locked()
    assert ids(list(tiny_engine.generate(prompt, params)))


def test_a_thread_that_would_wait_for_itself_gets_an_error(tiny_engine: Engine) -> None:
    prompt = tiny_engine.encode(PROMPTS[0])
    stream = tiny_engine.generate(prompt, PARAMS[0])
    next(stream)
    with pytest.raises(RuntimeError, match="already using the engine"):
        next(tiny_engine.generate(prompt, PARAMS[0]))
    with pytest.raises(RuntimeError, match="already using the engine"):
        tiny_engine.score(prompt)
    stream.close()
    assert tiny_engine.score(prompt)[1] is not None


def test_a_generation_cancelled_while_it_waits_ends_without_running(tiny_engine: Engine) -> None:
    first, second = pair(tiny_engine)
    stream = job(first, 0)
    next(stream)
    cancel = threading.Event()
    got: list[Delta] = []
    thread = threading.Thread(
        target=lambda: got.extend(second.generate(second.encode(PROMPTS[1]), PARAMS[1], cancel))
    )
    thread.start()
    time.sleep(0.1)
    cancel.set()
    thread.join(10)
    assert [(d.token_ids, d.finish_reason) for d in got] == [((), "cancelled")]
    assert first.lock.locked()  # the first generation was never disturbed
    stream.close()


def test_a_twin_shares_the_weights_and_runs_beside_its_engine(tiny_engine: Engine) -> None:
    """`Engine.twin` (what a background compile traces while the server serves): the same weight tensors,
    a KV cache and lock of its own, so the two generate at once and each gives its serial output."""
    tiny_engine.use_drafter(parse_drafter_spec("ngram"))
    twin = tiny_engine.twin()
    assert twin.model is not tiny_engine.model and twin.lock is not tiny_engine.lock
    assert twin.drafter is not tiny_engine.drafter and twin.spec == tiny_engine.spec
    weights = dict(tiny_engine.model.named_parameters())
    for name, tensor in twin.model.named_parameters():
        assert tensor is weights[name]
    caches = {id(t) for m in tiny_engine.model.modules() if isinstance(m, KVCache) for t in (m.k, m.v)}
    assert caches
    for mine, theirs in zip(tiny_engine.model.buffers(), twin.model.buffers(), strict=True):
        assert theirs.data_ptr() != mine.data_ptr() if id(mine) in caches else theirs is mine
    serial = [ids(list(job(e, i))) for i, e in enumerate((tiny_engine, twin))]
    assert concurrently((tiny_engine, twin)) == serial
