"""What processes a bfloat16 model's prompts (`engine.model.prompt_numerics`): a float32 twin when asked
or where the CPU has no bfloat16 instructions, else the model's own, never chosen by a timing; the line
that says so, and the served prompt dtype, follow the choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from lossless.engine.cpu import native_bfloat16
from lossless.engine.engine import Engine
from lossless.engine.model import prompt_numerics
from lossless.engine.model.sampling import SamplingParams


@pytest.mark.parametrize("wide", [True, False])
def test_an_explicit_choice_is_kept_and_said(tiny_checkpoint: Path, wide: bool) -> None:
    engine = Engine.load(tiny_checkpoint, dtype="bfloat16", float32_prompts=wide)
    assert engine.prompt_dtype == ("float32" if wide else "bfloat16")
    assert (engine.model.prompt_model is not None) == wide
    assert engine.prompt_choice is not None and engine.prompt_choice.endswith(
        "as asked; their keys and values kept in bfloat16" if wide else "in bfloat16, as asked"
    )


def test_float32_weights_have_no_prompt_choice(tiny_checkpoint: Path) -> None:
    engine = Engine.load(tiny_checkpoint, dtype="float32")
    assert engine.prompt_choice is None and engine.prompt_dtype == "float32"


@pytest.mark.parametrize("native", [["avx512_bf16"], []])
def test_the_cpus_features_choose_never_a_timing(
    tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, native: list[str]
) -> None:
    # the seam: what the CPU computes; the rule reads nothing else (a busy machine serves the same)
    monkeypatch.setattr(prompt_numerics, "native_bfloat16", lambda: native)
    engine = Engine.load(tiny_checkpoint, dtype="bfloat16")
    assert engine.prompt_dtype == ("bfloat16" if native else "float32")
    assert (engine.model.prompt_model is not None) == (not native)
    assert engine.prompt_choice is not None
    if native:
        assert (
            engine.prompt_choice
            == "prompts processed in bfloat16 (this CPU has bfloat16 instructions: avx512_bf16)"
        )
    else:
        assert "this CPU has no bfloat16 instructions" in engine.prompt_choice


def test_this_cpus_choice_is_consistent_and_decodes_like_the_explicit_one(tiny_checkpoint: Path) -> None:
    """No seam: whatever this CPU chose, the engine reports it, and generation equals an engine told to
    make the same choice."""
    chosen = Engine.load(tiny_checkpoint, dtype="bfloat16")
    wide = chosen.prompt_dtype == "float32"
    assert (chosen.model.prompt_model is not None) == wide
    assert chosen.prompt_choice is not None
    assert wide == (not native_bfloat16())
    told = Engine.load(tiny_checkpoint, dtype="bfloat16", float32_prompts=wide)
    ids = chosen.encode("Hello, world! How are you today? I am fine, thank you.")
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    texts = [[t for d in e.generate(ids, params) for t in d.token_ids] for e in (chosen, told)]
    assert texts[0] == texts[1]
