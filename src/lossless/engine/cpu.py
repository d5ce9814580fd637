"""What this CPU computes, read once from ``/proc/cpuinfo``: its instruction-set flags and whether it
has bfloat16 instructions. Torch-free; every reader of the CPU's features reads them here.
"""

from __future__ import annotations

import functools
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


@functools.cache  # read once: every int4 layer asks which kernel it may use
def flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The CPU's feature flags as ``cpuinfo`` names them (x86 ``flags``, aarch64 ``Features``: the first
    processor speaks for all); none where there is no such file (not Linux)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


_NATIVE_BF16 = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # x86, x86, aarch64


def native_bfloat16(cpuinfo: Path = CPUINFO) -> list[str]:
    """The CPU's bfloat16 instructions (none: a bfloat16 matmul over many tokens is slow,
    ``weights.dtype``)."""
    return sorted(flags(cpuinfo) & _NATIVE_BF16)
