"""``--dtype auto``: a GGUF's own Q4 blocks (int4) where the file stores them, else bfloat16 where the
CPU has bfloat16 instructions, float32 elsewhere; chosen from the file and the CPU's features alone;
whatever loads weights sees the dtype it became, never "auto"."""

from __future__ import annotations

from pathlib import Path

import pytest

from lossless.engine.weights.dtype import DTYPES, resolve_dtype
from lossless.errors import UsageError
from lossless.server.options import ServeOptions

X86_NO_BF16 = (
    "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c\nprocessor\t: 1\nflags\t\t: avx512_bf16\n"
)


@pytest.mark.parametrize(
    ("cpuinfo", "dtype"),
    [
        ("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n", "bfloat16"),
        ("flags\t\t: fpu avx2 amx_bf16 amx_tile\n", "bfloat16"),
        ("Features\t: fp asimd sve bf16 i8mm\n", "bfloat16"),  # aarch64
        (X86_NO_BF16, "float32"),  # the first processor's line is read: this machine's kind
        ("Features\t: fp asimd\n", "float32"),
        (None, "float32"),  # no /proc/cpuinfo: not Linux
    ],
)
def test_auto_is_bfloat16_only_with_bfloat16_instructions(
    tmp_path: Path, cpuinfo: str | None, dtype: str
) -> None:
    path = tmp_path / "cpuinfo"
    if cpuinfo is not None:
        path.write_text(cpuinfo)
    got, reason = resolve_dtype("auto", cpuinfo=path)
    assert got == dtype
    assert reason.startswith(f"{dtype} weights (auto): ") and "\n" not in reason and len(reason) < 100


def test_a_named_dtype_is_kept_and_a_wrong_one_refused() -> None:
    assert "auto" in DTYPES and ServeOptions().dtype == "auto"
    for name in ("bfloat16", "float32", "float64"):
        assert resolve_dtype(name) == (name, f"{name} weights, as asked")
    with pytest.raises(
        UsageError, match="--dtype: expected one of auto, int4, bfloat16, float32; got 'float16'"
    ):
        resolve_dtype("float16")


def test_served_models_are_loaded_in_the_resolved_dtype(tiny_checkpoint: Path) -> None:
    from lossless.server.main import decoding_as, load_model

    loaded = load_model(ServeOptions(model=str(tiny_checkpoint)))
    assert loaded.engine.dtype == resolve_dtype("auto")[0]
    speculative = decoding_as(loaded, ServeOptions(speculative="ngram"))
    assert speculative.engine.dtype == loaded.engine.dtype and speculative.engine.model is loaded.engine.model


@pytest.mark.parametrize(
    ("quant", "dtype"), [("Q4_1", "int4"), ("Q4_0", "int4"), ("Q8_0", None), ("F32", None)]
)
def test_auto_serves_a_gguf_s_own_q4_blocks_and_other_files_by_the_cpu(
    tiny_checkpoint: Path, tmp_path: Path, quant: str, dtype: str | None
) -> None:
    from gguf import GGMLQuantizationType
    from tiny_gguf import write_gguf

    path = write_gguf(tiny_checkpoint, tmp_path / f"tiny-{quant}.gguf", GGMLQuantizationType[quant])
    got, reason = resolve_dtype("auto", path)
    assert got == (dtype or resolve_dtype("auto")[0])
    if dtype == "int4":
        assert reason == f"int4 weights (auto): the file's own {quant} blocks, multiplied as they are"
    assert resolve_dtype("auto", tiny_checkpoint) == resolve_dtype("auto")  # a folder: by the CPU
