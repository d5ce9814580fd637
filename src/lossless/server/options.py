"""What ``lossless serve`` was asked to do: frozen options, every default defined here once (``--help``
reads them). Torch-free: ``--dtype`` and ``--speculative`` are checked with ``engine.cpu`` and
``engine.speculate.spec``, which are torch-free too, before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPILE_MODES = ("off", "background", "wait")  # `server.compiling`


@dataclass(frozen=True)
class ServeOptions:
    model: str | None = None  # embedded model name or a checkpoint path; None -> the default model
    host: str = "127.0.0.1"  # loopback unless the user asks otherwise
    port: int = 8000
    dtype: str = "auto"  # the weights' numerics; auto: the fastest exact for file and CPU (`resolve_dtype`)
    int4_kernel: str | None = None  # int4 layers: auto, q8 (ours) or torch; None: LOSSLESS_INT4_KERNEL
    max_queue: int = 64  # waiting requests beyond this get 429
    max_context: int | None = None  # cap on prompt + generated tokens; None -> the model's
    speculative: str = "auto"  # drafter: auto, ngram, draft:PATH, dspark[:DIR] or none (`parse_drafter_spec`)
    spec_k: int | None = None  # longest draft per step; None -> the drafter's default
    spec_threshold: float | None = None  # draft models: stop after a token below this probability
    spec_tree: int | None = None  # dspark: candidate tokens per step in a tree (None, 0: one chain)
    threads: int | None = None  # torch intra-op threads; None -> torch's default
    compile: str = "background"  # torch.compile: off, background (serve eagerly until ready) or wait
    max_batch: int = 1  # requests decoded together (a continuous batch); 1: one at a time, as before
