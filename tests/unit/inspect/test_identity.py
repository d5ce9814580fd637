"""Tokenizer identity: the bundled reference table, the matching rule, and a measurement's answers read."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from lossless.client.wire import Reply
from lossless.inspect import identity
from lossless.inspect.identity import MESSAGES, PROBES, Measured, identify, judge, measured

# the families the issue names, and SmolLM2's: each must be told apart from every other
NAMED = ("smollm2", "llama-bpe", "llama-spm", "qwen2", "gpt-2")


def test_the_table_was_made_with_these_strings() -> None:
    table = json.loads(identity.TABLE.read_text(encoding="utf-8"))
    assert (table["prefix"], table["suffix"], table["baseline"]) == (
        identity.PREFIX,
        identity.SUFFIX,
        identity.BASELINE,
    )
    assert table["probes"] == PROBES  # a string changed without `benchmarks/tokenizer_fingerprints.py`
    assert all(list(f["counts"]) == list(PROBES) for f in table["families"].values())
    assert identity.TABLE.stat().st_size < 10_000  # counts only


def test_families_are_told_apart_but_llama_spm_and_phi_3() -> None:
    refs = identity.bundled()
    assert set(NAMED) <= set(refs) and len(refs) >= 15
    same = [{a, b} for a, b in itertools.combinations(refs, 2) if refs[a] == refs[b]]
    # phi-3's vocabulary is Llama 2's SentencePiece one plus chat control tokens: no text tells them apart
    assert same == [{"llama-spm", "phi-3"}]
    for family in refs:
        found = identify(refs[family])
        assert found.verdict == "evident" and family in (found.family or "").split(" / ")
        assert found.distance == 0 and found.runner_up_distance and found.runner_up_distance >= 5
    assert identify(refs["phi-3"]).family == "llama-spm / phi-3"


def test_a_count_or_two_off_is_a_best_guess() -> None:
    counts = {**identity.bundled()["qwen2"]}
    counts["emoji"] += 1
    found = identify(counts)
    assert (found.verdict, found.family, found.distance) == ("inconclusive", "qwen2", 1)
    assert found.runner_up == "qwen35" and found.runner_up_distance == 6
    assert found.evidence["differs_on"] == ["emoji"]
    counts["digits"] -= 2  # 3 off: still the nearest by far
    assert identify(counts).verdict == "inconclusive"
    counts["code"] += 1  # 4 off: farther than NEAR
    found = identify(counts)
    assert (found.verdict, found.family, found.nearest) == ("not evident", None, "qwen2")
    assert "no reference matches: nearest qwen2 at 4" in found.note


def test_a_guess_needs_the_runner_up_twice_as_far() -> None:
    refs = {"a": {"digits": 10, "emoji": 3}, "b": {"digits": 13, "emoji": 3}}
    assert identify({"digits": 11, "emoji": 3}, refs).verdict == "inconclusive"  # 1 vs 2
    found = identify({"digits": 12, "emoji": 3}, refs)  # 2 vs 1: b
    assert (found.verdict, found.family) == ("inconclusive", "b")
    assert identify({"digits": 11, "emoji": 4}, refs).verdict == "not evident"  # 2 vs 3
    refs["c"] = {"digits": 12, "emoji": 3}
    found = identify({"digits": 11, "emoji": 3}, refs)  # a and c both 1 off: a tie is no guess
    assert (found.verdict, found.family) == ("not evident", None)


def test_only_the_strings_counted_are_compared() -> None:
    llama3 = identity.bundled()["llama-bpe"]
    found = identify({"digits": llama3["digits"], "chinese": llama3["chinese"], "unknown": 99})
    assert found.evidence["strings"] == 2 and found.distance == 0
    assert "llama-bpe" in (found.family or "")
    assert identify({}).verdict == "inconclusive"
    assert identify({}).family is None


def _reply(prompt_tokens: int | None, status: int = 200, **body: str) -> Reply:
    usage = None if prompt_tokens is None else {"prompt_tokens": prompt_tokens, "completion_tokens": 1}
    return Reply(status, 0.01, usage=usage, body=body, error=None if status == 200 else "boom")


def test_measured_counts_are_differences_from_the_baseline() -> None:
    replies = [_reply(20, model="m", system_fingerprint="fp1")]
    replies += [_reply(20 + i, model="m") for i, _ in enumerate(PROBES)]
    replies += [_reply(20, model="m2", system_fingerprint="fp1")]
    m = measured(replies)
    assert m.counts == {p: i for i, p in enumerate(PROBES)}
    assert (m.models, m.fingerprints, m.note) == (("m", "m2"), ("fp1",), "")
    replies[2] = _reply(None, status=500)
    m = measured(replies)
    assert m.counts is not None and list(PROBES)[1] not in m.counts
    assert m.note == f"not counted: {list(PROBES)[1]}"


@pytest.mark.parametrize(
    ("first", "last", "said"),
    [
        (None, None, "the server sends no usage.prompt_tokens: its tokenizer cannot be told"),
        (20, 21, "one message was counted 20 then 21 prompt tokens"),
        (-1, 20, "the baseline message was not answered (HTTP 500: boom)"),
    ],
)
def test_a_measurement_that_cannot_tell_says_why(first: int | None, last: int | None, said: str) -> None:
    head = _reply(None, status=500) if first == -1 else _reply(first, model="m")
    replies = [head, *(_reply(None if first is None else 30) for _ in PROBES), _reply(last)]
    m = measured(replies)
    assert m.counts is None and said in m.note
    found = judge(m)
    assert (found.verdict, found.family) == ("inconclusive", None)
    assert found.note.startswith("cannot tell: ") and said in found.note


def test_judge_adds_what_the_server_declares() -> None:
    counts = identity.bundled()["gpt-2"]
    m = Measured(dict(counts), {n: None for n in MESSAGES}, ("gpt2-xl",), ("fp",), "not counted: x")
    found = judge(m)
    assert (found.verdict, found.family) == ("evident", "gpt-2")
    assert found.evidence["declared_model"] == ["gpt2-xl"]
    assert found.evidence["system_fingerprint"] == ["fp"]
    assert found.note == "not counted: x"


def _tokenizer_json(folder: Path) -> Path:
    """A small byte-level BPE tokenizer.json, trained on the probe strings themselves."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(PROBES.values(), trainers.BpeTrainer(vocab_size=400, initial_alphabet=alphabet))
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def test_a_named_tokenizer_is_a_reference(tmp_path: Path) -> None:
    path = _tokenizer_json(tmp_path / "my-model")
    refs = identity.references([str(path)])
    assert set(refs) == set(identity.bundled()) | {"my-model"}
    found = identify(refs["my-model"], refs)
    assert (found.verdict, found.family) == ("evident", "my-model")
    assert identify(refs["my-model"]).family != "my-model"  # not among the bundled ones
