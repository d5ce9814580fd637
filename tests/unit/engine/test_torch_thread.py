"""`in_fresh_thread`: the work's result or its very exception, from a thread that has ended."""

from __future__ import annotations

import threading

import pytest

from lossless.engine.torch_thread import in_fresh_thread


def test_returns_the_result_from_another_thread_that_ends() -> None:
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 42

    assert in_fresh_thread(work, name="lossless-test") == 42
    (thread,) = seen
    assert thread is not threading.current_thread() and thread.name == "lossless-test"
    assert not thread.is_alive()


def test_raises_the_work_s_own_exception() -> None:
    class Boom(Exception):
        pass

    def work() -> None:
        raise Boom("as raised")

    with pytest.raises(Boom, match="as raised"):
        in_fresh_thread(work)
