"""Tokenizer: round trips, incremental decoding of split UTF-8, chat templates, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from lossless.engine.model.tokenizer import Tokenizer
from lossless.errors import CheckpointError, UsageError


@pytest.fixture(scope="module")
def tok(tiny_checkpoint: Path) -> Tokenizer:
    config = json.loads((tiny_checkpoint / "tokenizer_config.json").read_text())
    return Tokenizer.from_json(tiny_checkpoint / "tokenizer.json", config)


def test_round_trip_and_specials(tok: Tokenizer) -> None:
    text = "Hello, élèves! 日本語 😀 def f():\n\treturn 42"
    assert tok.decode(tok.encode(text)) == text
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2  # special tokens stay whole
    assert tok.decode(ids) == "user\nhi"  # and are not shown
    assert tok.decode(ids, skip_special=False) == "<|im_start|>user\nhi<|im_end|>"
    assert tok.token_text(2) == "<|im_end|>"
    assert tok.eos_ids == {0, 2}  # eos_token <|im_end|>, and <|endoftext|> by name
    assert tok.vocab_size == 300


def test_incremental_decoding_holds_back_split_characters(tok: Tokenizer) -> None:
    ids = tok.encode("a😀b")  # the emoji is four bytes, each its own token in this small vocabulary
    assert len(ids) >= 4
    decoder = tok.decoder()
    pieces = [decoder.feed([i]) for i in ids]
    assert "".join(pieces) + decoder.flush() == "a😀b"
    assert all("\ufffd" not in p for p in pieces)
    assert "" in pieces  # the emoji's first bytes produced nothing yet


def test_incremental_decoding_flushes_an_incomplete_end(tok: Tokenizer) -> None:
    ids = tok.encode("😀")[:2]
    decoder = tok.decoder()
    assert decoder.feed(ids) == ""
    assert decoder.flush() == tok.decode(ids) == "\ufffd"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 299), max_size=30))
def test_incremental_equals_batch_decoding(tok: Tokenizer, ids: list[int]) -> None:
    decoder = tok.decoder()
    text = "".join(decoder.feed([i]) for i in ids) + decoder.flush()
    assert text == tok.decode(ids)


def test_chat_template_renders_like_smollm2(tok: Tokenizer) -> None:
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    own_system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert tok.apply_chat_template(own_system, add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    )


def test_template_helpers_and_sandbox(tok: Tokenizer) -> None:
    strict = Tokenizer(
        tok.backend,
        eos_ids=[2],
        chat_template="{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}"
        "{{ bos_token }}{{ messages | tojson }}",
        bos_token="<|im_start|>",
    )
    assert (
        strict.apply_chat_template([{"role": "user", "content": "é"}])
        == '<|im_start|>[{"role": "user", "content": "é"}]'
    )
    with pytest.raises(UsageError, match="user first"):
        strict.apply_chat_template([{"role": "assistant", "content": "x"}])
    escape = Tokenizer(tok.backend, eos_ids=[2], chat_template="{{ messages.__class__.__mro__ }}")
    with pytest.raises(UsageError, match="chat template"):
        escape.apply_chat_template([])
    with pytest.raises(UsageError, match="no chat template"):
        Tokenizer(tok.backend, eos_ids=[2]).apply_chat_template([])


def test_bad_tokenizer_files(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"tokenizer\.json"):
        Tokenizer.from_json(tmp_path / "tokenizer.json", {})
    with pytest.raises(CheckpointError, match=r"missing\.json"):
        Tokenizer.from_json(tmp_path / "missing.json", {})
