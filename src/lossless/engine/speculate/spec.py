"""The ``--speculative`` spec: which drafter, with its per-kind defaults (measured where they are set).
Torch-free, so the CLI checks ``--speculative`` and its knobs before the engine is imported."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lossless.errors import UsageError

SPEC_HELP = (
    "auto (dspark for the embedded model, ngram for another), ngram, draft:PATH (a small checkpoint sharing "
    "the target's tokenizer), dspark (the trained draft head shipped for the embedded model; dspark:DIR for "
    "another) or none"
)


@dataclass(frozen=True)
class DrafterSpec:
    kind: Literal["ngram", "draft", "dspark", "none"]
    path: Path | None = None  # the draft checkpoint (kind "draft"), a head's folder (kind "dspark")
    k: int = 8  # longest draft per step
    threshold: float | None = None  # draft models: stop drafting after a token drawn with probability
    # below this; dspark: stop before a position whose predicted survival (product of confidences) is
    # below this (None: DSPARK_THRESHOLD for the target's dtype)
    # dspark: a tree of up to this many candidate tokens per step (0: one chain; None: DSPARK_TREE for the
    # target's dtype)
    tree: int | None = 0


# Per-kind defaults. n-gram: measured with benchmarks/speculative_speed.py; a draft costs nothing to
# make and the length backs off by itself, so long drafts pay whenever the text is copying. Draft
# model: the usual starting point, not measured here (SmolLM2-135M is its family's smallest, so the
# embedded model has no smaller draft); a draft model pays a forward per drafted token. dspark: its
# block, 7 tokens; the confidence head decides how many of them to draft, at a threshold that depends on
# what a wider target forward costs: a bfloat16 forward over 2-8 tokens costs what one over a single
# token does on a CPU, a float32 one up to 1.7x. In benchmarks/speculative_speed.py 0.1 beat 0.3 on all
# four suite/temperature rows with bfloat16 weights, and 0.3 beat 0.1 on all four with float32.
DEFAULT_K = {"ngram": 8, "draft": 4, "dspark": 7, "none": 0}
DEFAULT_THRESHOLD = {"draft": 0.3}
DSPARK_THRESHOLD = {"bfloat16": 0.1, "float32": 0.3, "int4": 0.1}  # int4 computes in bfloat16
# dspark: a tree of up to 4 candidates per step (`HeadDrafter`: the likeliest for greedy requests, three
# distinct draws for the first position of sampled ones). Open chat, benchmarks/speculative_speed.py,
# bfloat16: greedy 1.68x against one chain's 1.28x, temperature 1 1.29x against 1.26x (accepted length
# 1.56 against 1.44); trees of 2-10 measured, 4 best. float32: greedy 1.13x against 0.90x, temperature
# 1 0.96x against 0.87x. int4: 2 (tuned on torch's kernel; ours not re-tuned), since torch's int4 kernel
# multiplies 4 rows at a time, so verifying 5 tokens costs what 8 do (compiled, 2 AVX-512 cores: 12.6 ms
# for one token, 17.7 for 4, 25.3 for 5); greedy open chat 83.7 tok/s with 2 candidates, 76.0 with 3,
# 65.0 with 4 (plain 77.3), the same 1.76 accepted length with 2 and 3.
DSPARK_TREE = {"bfloat16": 4, "float32": 4, "int4": 2}


def auto_drafter(model: str | Path | None) -> str:
    """``--speculative auto``: the drafter that wins at one stream on open chat and on grounded prompts.
    The shipped DSpark head (prompt lookup beside it) for the embedded model, whose head it is; n-gram
    prompt lookup for any other checkpoint. Measured for the embedded model's int4 weights, eager, 2
    AVX-512 cores, against plain int4 decoding (docs/results/2026-12-04-engine-defaults.md): dspark 1.38x
    on chat and 2.6x on grounded prompts, n-gram 1.22x and 2.4x."""
    from lossless.models import EMBEDDED

    if model is None or str(model) in EMBEDDED:  # --model: none (the default), or an embedded name
        return "dspark"
    return "dspark" if Path(model).name in {m.filename for m in EMBEDDED.values()} else "ngram"


def resolve_drafter(spec: str, model: str | Path | None) -> str:
    """``spec`` with ``auto`` replaced by `auto_drafter` for ``model``."""
    return auto_drafter(model) if spec == "auto" else spec


def parse_drafter_spec(
    spec: str, k: int | None = None, threshold: float | None = None, tree: int | None = None
) -> DrafterSpec:
    """``--speculative``, ``--spec-k``, ``--spec-threshold``, ``--spec-tree`` -> a DrafterSpec;
    UsageError when wrong."""
    kind, _, rest = spec.strip().partition(":")
    if kind not in DEFAULT_K or (kind == "draft" and not rest) or (kind in ("ngram", "none") and rest):
        raise UsageError(f"--speculative: expected {SPEC_HELP}; got {spec!r}")
    if k is not None and not 1 <= k <= 32:
        raise UsageError(f"--spec-k: expected a draft length from 1 to 32; got {k}")
    if threshold is not None and not 0.0 <= threshold < 1.0:
        raise UsageError(f"--spec-threshold: expected a probability in [0, 1); got {threshold}")
    if tree is not None and not (0 <= tree <= 64 and (tree == 0 or kind == "dspark")):
        raise UsageError(
            f"--spec-tree: expected 0 to 64 candidate tokens, with --speculative dspark; got {tree}"
        )
    path = Path(rest).expanduser() if rest else None
    if path is not None and not path.exists():
        raise UsageError(f"--speculative draft:{rest}: no such file or directory")
    return DrafterSpec(
        kind,  # type: ignore[arg-type]
        path,
        DEFAULT_K[kind] if k is None else k,
        DEFAULT_THRESHOLD.get(kind) if threshold is None else threshold,
        (None if kind == "dspark" else 0) if tree is None else tree,
    )
