"""Frozen run configurations: the CLI parses options into one of these and passes it down."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeConfig:
    model: str | None = None  # embedded model name or a checkpoint path; None -> the default model
    host: str = "127.0.0.1"  # loopback unless the user asks otherwise
    port: int = 8000
    dtype: str = "float32"  # weights are dequantized to this at load
    max_queue: int = 64  # waiting requests beyond this get 429
    max_context: int | None = None  # cap on prompt + generated tokens; None -> the model's
    speculative: str = "none"  # drafter spec: ngram, draft:PATH or none (engine/drafts.py)
    spec_k: int | None = None  # longest draft per step; None -> the drafter's default
    spec_threshold: float | None = None  # draft models: stop after a token below this probability
    spec_tree: int | None = None  # dspark: candidate tokens per step in a tree (None, 0: one chain)
    threads: int | None = None  # torch intra-op threads; None -> torch's default
