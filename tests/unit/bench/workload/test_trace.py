"""Mooncake traces and ShareGPT files -> prompts: replay offsets, shared prefixes, token-exactness, errors."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lossless.bench.workload.trace import Dialogue, load_sharegpt, load_trace, read_sharegpt, sharegpt_prompts
from lossless.client.prompt import Prompt
from lossless.errors import UsageError

Encoder = tuple[Callable[[str], list[int]], Callable[[list[int]], str]]
CHARS: Encoder = (lambda text: [ord(c) for c in text], lambda ids: "".join(map(chr, ids)))


def write(tmp_path: Path, rows: list[Any], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def row(ts: Any, n: Any, out: Any = 10, ids: list[Any] | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"timestamp": ts, "input_length": n, "output_length": out}
    return r if ids is None else {**r, "hash_ids": ids}


def load(path: Path, seed: int = 0, **kw: Any) -> list[tuple[float, Prompt]]:
    return load_trace(path, kw.pop("speed", 1.0), random.Random(seed), **kw)


def common(a: str, b: str) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_offsets_are_relative_to_the_first_line_and_scaled_by_speed(tmp_path: Path) -> None:
    path = write(
        tmp_path, [row(27482, 700, 52, [1, 2]), row(27482, 80, 3), row(30482, 900, 1), row(31982, 9)]
    )
    got = load(path, speed=2.0, force_output=True)
    assert [t for t, _ in got] == [0.0, 0.0, 1.5, 2.25]
    assert [p.id for _, p in got] == ["trace-0", "trace-1", "trace-2", "trace-3"]
    assert {p.cls for _, p in got} == {"trace"} and all(p.force_output for _, p in got)
    assert [(p.max_tokens, p.output_tokens) for _, p in got] == [(52, 52), (3, 3), (1, 1), (10, 10)]
    assert [t for t, _ in load(path, speed=0.5)] == [0.0, 0.0, 6.0, 9.0]
    assert not any(p.force_output for _, p in load(path))


def test_shared_leading_hash_ids_share_a_text_prefix(tmp_path: Path) -> None:
    rows = [
        row(0, 1500, ids=[1, 2, 3]),
        row(1, 1400, ids=[1, 2, 4]),
        row(2, 1500, ids=[5, 2, 3]),
        row(3, 1024, ids=[1, 2]),
        row(4, 600, ids=[1, 2]),
    ]
    for encoder in (None, CHARS):
        a, b, c, d, e = (p.text for _, p in load(write(tmp_path, rows), encoder=encoder))
        blocks = d  # exactly two whole blocks, ids 1 and 2
        assert a.startswith(blocks) and b.startswith(blocks) and blocks.endswith("\n")
        assert common(a, b) < len(blocks) + 12  # block 3 and block 4 part at once (but for a word, maybe)
        assert common(a, c) < 12  # a different first id: a different text from the start
        # a cut block is the whole one's opening, but for a word or two topping it up to the exact count
        assert blocks.startswith(e) if encoder is None else common(blocks, e) > len(e) - 12


def test_a_block_is_the_same_text_in_every_file_and_run(tmp_path: Path) -> None:
    first = load(write(tmp_path, [row(0, 1100, ids=[7, 8, 9])], "a.jsonl"), seed=1)[0][1].text
    again = load(write(tmp_path, [row(0, 60), row(5, 1100, ids=[7, 8, 9])], "b.jsonl"), seed=2)
    assert again[1][1].text == first


def test_lines_without_hash_ids_share_no_prefix(tmp_path: Path) -> None:
    got = load(write(tmp_path, [row(0, 300), row(0, 300, ids=[]), row(1, 300)]), encoder=CHARS)
    texts = [p.text for _, p in got]
    assert [t[: t.index("(")] for t in texts] == ["Request 0 ", "Request 1 ", "Request 2 "]
    assert all(common(x, y) < 12 for x, y in itertools.combinations(texts, 2))
    assert [len(t) for t in texts] == [300] * 3


def test_tokens_past_the_listed_ids_are_the_requests_own(tmp_path: Path) -> None:
    got = load(write(tmp_path, [row(0, 2000, ids=[1]), row(1, 2000, ids=[1])]), encoder=CHARS)
    a, b = (p.text for _, p in got)
    assert len(a) == len(b) == 2000 and common(a, b) == a.index("\n") + 1 + len("Request ")
    assert a[a.index("\n") + 1 :].startswith("Request 0 (")


def test_char_tokens_are_exact_and_overhead_is_taken_off(tmp_path: Path) -> None:
    rows = [row(0, 513, ids=[1, 2]), row(0, 1200, ids=[1, 2, 3]), row(0, 40), row(0, 5, ids=[4]), row(0, 3)]
    got = load(write(tmp_path, rows), encoder=CHARS, overhead=10, block_tokens=256)
    assert [len(p.text) for _, p in got] == [503, 1190, 30, 1, 1]
    assert [p.input_tokens for _, p in got] == [513, 1200, 40, 11, 11]  # what the server will count


def test_without_an_encoder_words_approximate_the_length(tmp_path: Path) -> None:
    got = load(write(tmp_path, [row(0, 13_000, ids=list(range(20))), row(0, 13_000)]), overhead=100)
    for _, p in got:
        assert p.input_tokens is None and p.output_tokens == 10
        assert len(p.text.split()) == pytest.approx(12_900 / 1.3, rel=0.02)


def test_a_tokenizer_that_merges_across_a_newline_is_mended(tmp_path: Path) -> None:
    def encode(text: str) -> list[int]:  # a newline and the character after it make one token
        ids, k = [], 0
        while k < len(text):
            pair = text[k] == "\n" and k + 1 < len(text)
            ids.append(0x110000 + ord(text[k + 1]) if pair else ord(text[k]))
            k += 2 if pair else 1
        return ids

    def decode(ids: list[int]) -> str:
        return "".join("\n" + chr(i - 0x110000) if i >= 0x110000 else chr(i) for i in ids)

    rows = [row(0, 900, ids=[1, 2, 3]), row(0, 800, ids=[1, 2]), row(0, 500)] * 4
    got = load(write(tmp_path, rows), encoder=(encode, decode), block_tokens=256)
    assert [len(encode(p.text)) for _, p in got] == [r["input_length"] for r in rows]
    assert got[-3][1].text[:400] == got[-2][1].text[:400]  # shared blocks still open alike


@pytest.fixture(scope="module")
def smollm2() -> Encoder:
    pytest.importorskip("tokenizers", reason="the engine extra is not installed")
    from lossless.models import resolve
    from lossless.provision.counting import load_token_encoder

    path = resolve(pull_missing=False)
    if not path.is_file():
        pytest.skip(f"the embedded SmolLM2 is not cached at {path} (lossless pull fetches it)")
    return load_token_encoder(str(path))


def synthetic_trace(lines: int, rng: random.Random, block: int = 512) -> list[dict[str, Any]]:
    """Requests that continue earlier ones (shared leading ids) or start afresh, some without ids."""
    rows: list[dict[str, Any]] = []
    made = itertools.count()
    for i in range(lines):
        n = rng.randint(1, 4000)
        need = math.ceil(n / block)
        ids = [*rng.choice(rows)["hash_ids"][: rng.randint(1, need)]] if rows and rng.random() < 0.6 else []
        ids += [next(made) for _ in range(need - len(ids))]
        rows.append(row(i * 37, n, rng.randint(1, 300), ids))
    for r in rows[::10]:
        r["hash_ids"] = []
    return rows


@pytest.mark.slow
def test_smollm2_prompts_are_token_exact_and_share_prefix_tokens(tmp_path: Path, smollm2: Encoder) -> None:
    encode, _ = smollm2
    rows = synthetic_trace(300, random.Random(3))
    started = time.perf_counter()
    got = load(write(tmp_path, rows), encoder=smollm2, overhead=9)
    built = time.perf_counter() - started
    tokens = [encode(p.text) for _, p in got]
    assert [len(t) for t in tokens] == [max(1, r["input_length"] - 9) for r in rows]
    assert [p.input_tokens for _, p in got] == [max(10, r["input_length"]) for r in rows]
    shared = 0
    for (a, ta), (b, tb) in itertools.combinations(zip(rows, tokens, strict=True), 2):
        k = common_ids(a["hash_ids"], b["hash_ids"])
        whole = min(k * 512, len(ta) - 1, len(tb) - 1)  # a cut last block shares only part of itself
        if k and whole > 0:
            shared += 1
            assert ta[:whole] == tb[:whole]
    assert shared > 100
    if os.environ.get("LOSSLESS_TEST_TIMES"):
        print(f"\n300-line trace, {sum(map(len, tokens))} tokens, built in {built:.2f} s")


def common_ids(a: list[int], b: list[int]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_multi_token_words_are_topped_up_exactly(tmp_path: Path, tiny_checkpoint: Path) -> None:
    from lossless.provision.counting import load_token_encoder

    encoder = load_token_encoder(str(tiny_checkpoint))  # a ~300-token vocabulary: most words are 2-9
    rows = synthetic_trace(40, random.Random(5), block=64)
    got = load(write(tmp_path, rows), encoder=encoder, overhead=4, block_tokens=64)
    assert [len(encoder[0](p.text)) for _, p in got] == [max(1, r["input_length"] - 4) for r in rows]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{nope", r"t\.jsonl:2: not valid JSON"),
        ("[1, 2]", r"t\.jsonl:2: each line must be a JSON object"),
        ({"timestamp": 1, "output_length": 5}, r"t\.jsonl:2: 'input_length' must be a whole number.*None"),
        (row(1, -5), r"t\.jsonl:2: 'input_length' must be .*-5"),
        (row(1, 0), r"t\.jsonl:2: 'input_length' must be .*got 0"),
        (row(1, 7.5), r"t\.jsonl:2: 'input_length' must be .*7\.5"),
        (row(1, 10, out=True), r"t\.jsonl:2: 'output_length' must be .*True"),
        (row(1, 10, out="5"), r"t\.jsonl:2: 'output_length' must be .*'5'"),
        (row("soon", 10), r"t\.jsonl:2: 'timestamp' must be a number"),
        ({"input_length": 1, "output_length": 1}, r"t\.jsonl:2: 'timestamp' must be a number"),
        ({**row(1, 10), "hash_ids": 4}, r"t\.jsonl:2: 'hash_ids' must be a list of integers"),
        (row(1, 10, ids=["a"]), r"t\.jsonl:2: 'hash_ids' must be a list of integers"),
        (row(1, 10, ids=[1.0]), r"t\.jsonl:2: 'hash_ids' must be a list of integers"),
        (row(1, 513, ids=[1, 2, 3]), r"t\.jsonl:2: 3 hash ids, but 513 input tokens fill only 2 blocks"),
        (row(-1, 10), r"t\.jsonl:2: timestamp -1 is before the line above's \(0\)"),
    ],
)
def test_bad_lines_are_named(tmp_path: Path, line: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load(write(tmp_path, [row(0, 10), line]))


def test_bad_files_and_options(tmp_path: Path) -> None:
    ok = write(tmp_path, [row(0, 10)], "ok.jsonl")
    for rows in ([], ["", "   "]):
        with pytest.raises(UsageError, match="is empty"):
            load(write(tmp_path, rows))
    with pytest.raises(UsageError, match="cannot read trace"):
        load(tmp_path / "missing.jsonl")
    for speed in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(UsageError, match="speed must be a number above 0"):
            load(ok, speed=speed)
    for kw in ({"block_tokens": 0}, {"overhead": -1}):
        with pytest.raises(UsageError, match="block_tokens"):
            load(ok, **kw)


# --- ShareGPT ----------------------------------------------------------------------------------------

CONVERSATIONS: list[Any] = [
    {
        "id": "a1",
        "conversations": [
            {"from": "human", "value": "Hello there"},
            {"from": "gpt", "value": "Hi! How can I help you today?"},
            {"from": "human", "value": "Tell me a joke"},
        ],
    },
    {
        "id": "b2",
        "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "user", "value": "Name a colour"},
            {"from": "assistant", "value": "Blue"},
        ],
    },
    {"id": "c3", "conversations": [{"from": "gpt", "value": "I start, nobody asks"}]},
    {
        "conversations": [
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "It is four, as everyone knows"},
            {"role": "assistant", "content": "Really"},
            {"role": "user", "content": " "},
            {"role": "assistant", "content": "blank turns and their replies are dropped"},
        ]
    },
    {"id": "d4"},
]
EXPECTED = [
    Dialogue("a1", ("Hello there", "Tell me a joke"), (7, 0)),
    Dialogue("b2", ("Name a colour",), (1,), "Be brief."),
    Dialogue("3", ("What is 2 + 2?",), (7,)),
]


def test_sharegpt_json_and_jsonl_read_alike(tmp_path: Path) -> None:
    array = tmp_path / "s.json"
    array.write_text(json.dumps(CONVERSATIONS, indent=1))
    assert read_sharegpt(array) == (EXPECTED, 2)
    assert load_sharegpt(write(tmp_path, CONVERSATIONS, "s.jsonl")) == EXPECTED


def test_sharegpt_prompts_cycle_first_turns(tmp_path: Path) -> None:
    got = list(itertools.islice(sharegpt_prompts(EXPECTED, random.Random(0)), 5))
    assert [p.id for p in got] == [f"sharegpt-{i}" for i in range(5)] and {p.cls for p in got} == {"sharegpt"}
    assert [p.messages for p in got[:3]] == [
        (("user", "Hello there"),),
        (("system", "Be brief."), ("user", "Name a colour")),
        (("user", "What is 2 + 2?"),),
    ]
    assert [p.max_tokens for p in got] == [9, 1, 9, 9, 1]  # round(7 * 1.3), at least 1
    silent = Dialogue("x", ("Hi",), (0,))
    assert next(sharegpt_prompts([silent], random.Random(0))).max_tokens is None
    with pytest.raises(UsageError, match="no ShareGPT conversations"):
        sharegpt_prompts([], random.Random(0))


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("s.json", '[{"conversations": []},\n  nope]', r"s\.json:2: not valid JSON"),
        ("s.jsonl", '{"conversations": []}\n{"id": ', r"s\.jsonl:2: not valid JSON"),
        ("s.json", '[{"conversations": []}, 5]', r"s\.json entry 1: each conversation must be a JSON object"),
        ("s.jsonl", "[1]\n", r"s\.jsonl entry 0: each conversation must be"),
        ("s.jsonl", '"text"\n', r"s\.jsonl:1: each conversation must be a JSON object"),
        (
            "s.json",
            '[{"id": 1}, {"conversations": [{"from": "gpt", "value": "x"}]}]',
            "none of its 2 entries",
        ),
        ("s.json", "", "is empty"),
        ("s.json", "[]", "is empty"),
    ],
)
def test_bad_sharegpt_files_are_named(tmp_path: Path, name: str, text: str, message: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(UsageError, match=message):
        load_sharegpt(tmp_path / name)
