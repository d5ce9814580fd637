from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from lossless.bench.workload.arrivals import gamma, poisson
from lossless.bench.workload.prompts import prompts
from lossless.errors import UsageError


def take(suite: str, n: int, seed: int = 0) -> list:
    return list(itertools.islice(prompts(suite, random.Random(seed)), n))


@pytest.mark.parametrize("suite", ["short", "long", "mixed", "lengths"])
def test_suites_are_seeded(suite: str) -> None:
    assert take(suite, 9) == take(suite, 9)
    assert take(suite, 9, seed=1) != take(suite, 9) or suite == "short"


def test_lengths_have_three_sizes_and_unique_prefixes() -> None:
    ps = take("lengths", 6)
    assert [p.cls for p in ps] == ["len-100", "len-1k", "len-10k"] * 2
    words = [len(p.text.split()) for p in ps[:3]]
    assert 60 < words[0] < 100 and 700 < words[1] < 800 and 7000 < words[2] < 8000
    prefixes = [p.text[:40] for p in ps]
    assert len(set(prefixes)) == len(prefixes)


def test_file_suite(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"prompt": "hi"}\n{"messages": [{"role": "user", "content": "yo"}], "max_tokens": 5, "id": "x"}\n'
    )
    a, b, c = take(f"file:{f}", 3)
    assert a.text == "hi" and b.id == "x" and b.max_tokens == 5 and c == a
    f.write_text('{"nope": 1}\n')
    with pytest.raises(UsageError, match=r"p\.jsonl:1"):
        take(f"file:{f}", 1)


def test_unknown_suite() -> None:
    with pytest.raises(UsageError, match="unknown suite"):
        prompts("bogus", random.Random(0))


@pytest.mark.parametrize(
    "make", [lambda r: poisson(4.0, r), lambda r: gamma(4.0, 0.5, r), lambda r: gamma(4.0, 3, r)]
)
def test_arrivals_keep_the_mean_rate(make) -> None:  # type: ignore[no-untyped-def]
    times = list(itertools.islice(make(random.Random(0)), 20_000))
    assert times == sorted(times)
    assert 20_000 / times[-1] == pytest.approx(4.0, rel=0.05)


def test_burstiness_changes_spread_not_mean() -> None:
    def cv(shape: float) -> float:
        t = list(itertools.islice(gamma(2.0, shape, random.Random(1)), 5000))
        gaps = [b - a for a, b in itertools.pairwise(t)]
        mean = sum(gaps) / len(gaps)
        return (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5 / mean

    assert cv(0.25) > 1.5 > cv(1.0) > 0.8 > cv(4.0)


def test_grounded_prompts_carry_what_the_answer_copies() -> None:
    ps = take("grounded", 12)
    assert take("grounded", 12) == ps and {p.cls for p in ps} == {"grounded"}
    # every prompt holds a passage or a function, which a faithful answer repeats
    assert all(len(p.text) > 150 and ("\n\n" in p.text) for p in ps)


def test_suites_joined_by_plus_take_turns_with_unique_ids() -> None:
    ps = take("short+long+grounded", 9)
    assert [p.cls for p in ps] == ["short", "long", "grounded"] * 3
    assert len({p.id for p in ps}) == 9 and take("short+long+grounded", 9) == ps
    assert len({p.id for p in take("short+short", 6)}) == 6
    with pytest.raises(UsageError, match="unknown suite 'nope'"):
        prompts("short+nope", random.Random(0))
