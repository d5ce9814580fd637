"""What processes a bfloat16 model's prompts (`engine.model.prompt_numerics`): a float32 twin when asked
or where the CPU has no bfloat16 instructions, else whichever measured faster at load; the line that
says so, and the served prompt dtype, follow the choice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

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


@pytest.mark.parametrize(("own", "wide"), [(0.2, 0.1), (0.1, 0.2)])
def test_the_faster_measured_way_is_kept(
    tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, own: float, wide: float
) -> None:
    # the seam: a CPU with the instructions, and the two timings (measured for real below)
    monkeypatch.setattr(prompt_numerics, "native_bfloat16", lambda: ["avx512_bf16"])
    monkeypatch.setattr(prompt_numerics, "_time_prompts", lambda model, n: (own, wide))
    engine = Engine.load(tiny_checkpoint, dtype="bfloat16")
    twin = wide < own
    assert (engine.model.prompt_model is not None) == twin
    assert engine.prompt_dtype == ("float32" if twin else "bfloat16")
    assert engine.prompt_choice is not None
    slower = "bfloat16" if twin else "float32"
    assert f"prompt took 100 ms, against 200 ms in {slower}, measured at start-up" in engine.prompt_choice
    assert engine.prompt_choice.startswith(f"prompts processed in {engine.prompt_dtype} (faster here: ")


def test_without_bfloat16_instructions_float32_is_taken_unmeasured(
    tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(model: object, n: int) -> tuple[float, float]:
        raise AssertionError("measured")

    monkeypatch.setattr(prompt_numerics, "native_bfloat16", lambda: [])
    monkeypatch.setattr(prompt_numerics, "_time_prompts", never)
    engine = Engine.load(tiny_checkpoint, dtype="bfloat16")
    assert engine.prompt_dtype == "float32"
    assert (
        engine.prompt_choice is not None and "this CPU has no bfloat16 instructions" in engine.prompt_choice
    )


def test_this_cpus_choice_is_consistent_and_decodes_like_the_explicit_one(tiny_checkpoint: Path) -> None:
    """No seam: whatever this CPU chose, the engine reports it, and generation equals an engine told to
    make the same choice."""
    chosen = Engine.load(tiny_checkpoint, dtype="bfloat16")
    wide = chosen.prompt_dtype == "float32"
    assert (chosen.model.prompt_model is not None) == wide
    assert chosen.prompt_choice is not None
    assert ("measured at start-up" in chosen.prompt_choice) == bool(native_bfloat16())
    told = Engine.load(tiny_checkpoint, dtype="bfloat16", float32_prompts=wide)
    ids = chosen.encode("Hello, world! How are you today? I am fine, thank you.")
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    texts = [[t for d in e.generate(ids, params) for t in d.token_ids] for e in (chosen, told)]
    assert texts[0] == texts[1]


def test_the_measurement_times_both_ways_on_the_real_model(tiny_checkpoint: Path) -> None:
    engine = Engine.load(tiny_checkpoint, dtype="bfloat16", float32_prompts=True)
    own, wide = prompt_numerics._time_prompts(engine.model, 16)
    assert 0 < own < 60 and 0 < wide < 60
    cache = engine.model.layers[0].attention.kv_cache
    assert cache is not None and cache.k.dtype == torch.bfloat16
