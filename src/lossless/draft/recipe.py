"""The draft head's training recipe: every setting of ``lossless draft train``, with why it is so. No
torch here: the CLI shows these defaults in ``--help``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    seed: int = 0
    gen_dtype: str = "bfloat16"  # the target's dtype while collecting (batched bf16 was ~1.5x fp32 on the
    # CPU with bfloat16 instructions the head was trained on; on an AVX2-only one it is slower)
    max_new: int = 192  # answer tokens at most
    prompts: int = 0  # use the first N bundled prompts (0: all; fewer only for a quick trial)
    written: int = 2400  # prompts the target writes itself (Magpie-style), each answered once
    gen_batch: int = 64  # collecting 3,200 answers (504k tokens) took 47 min on 2 threads
    vocab: int = 8192  # draft vocabulary size (held-out answer tokens inside: 4096 84%, 8192 91%)
    block: int = 7
    ffn: int = 1024  # SwiGLU width (on 800 answers alone 1024 memorised more than 512)
    rank: int = 64
    steps: int = 4000
    batch: int = 256  # anchors per step
    lr: float = 1e-3
    weight_decay: float = 0.1
    dropout: float = 0.1  # 0.3 when 800 answers were all the data
    ce_weight: float = 0.1
    tv_weight: float = 0.9
    position_decay: float = 0.8
    holdout: int = 40  # sequences held out for calibration and evaluation
    log_every: int = 50
    eval_every: int = 250  # held-out evaluation; the best evaluated state is the one kept
