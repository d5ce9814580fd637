"""Candidates for verify: real engines served over real HTTP, lossless or deliberately lossy.

Each is an ``Engine`` subclass (loaded with ``Cls.load(path)``) that changes one thing; served with
``start_embedded(ServeOptions(), loaded=LoadedModel(engine, name, aliases))``. The speculative ones run
``speculative_decode`` directly, so that a candidate can swap in a broken acceptance rule or its own
draft model (benchmarks/verify_power.py drafts with a 4-bit copy of the target, accepted about half the
time, as a real draft model is; n-grams draft on only ~5% of the talkative model's positions).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from lossless.engine.engine import Delta, Engine
from lossless.engine.model.generate import generate_text
from lossless.engine.model.sampling import SamplingParams, make_generator, sample
from lossless.engine.speculate.drafts import ModelDrafter, NgramDrafter
from lossless.engine.speculate.speculative import Drafter, accept_draft, speculative_decode
from lossless.server.main import LoadedModel


class Speculative(Engine):
    """Lossless: n-gram drafts (or a draft model's) verified by exact rejection sampling."""

    draft_model: Engine | None = None  # set -> draft with this model instead of n-grams

    def new_drafter(self) -> Drafter:
        return NgramDrafter(8) if self.draft_model is None else ModelDrafter(self.draft_model.model, 0.0)

    def generate(
        self, prompt_ids: list[int], params: SamplingParams, cancel: threading.Event | None = None
    ) -> Iterator[Delta]:
        self.check_prompt(prompt_ids)
        budget = min(params.max_tokens, self.max_context - len(prompt_ids))
        source = speculative_decode(
            self.model,
            self.new_drafter(),
            prompt_ids,
            params,
            max_new_tokens=budget,
            k_max=4,
            generator=make_generator(params.seed),
            accept=self.accept,
        )
        yield from generate_text(source, self.tokenizer, params, budget=budget, cancel=cancel)

    accept = staticmethod(accept_draft)  # the rule under test; SkipResidual swaps in a broken one


def accept_without_residual(
    p: torch.Tensor, q: torch.Tensor, draft: Sequence[int], generator: torch.Generator | None, greedy: bool
) -> tuple[int, int]:
    """The classic bug: after a rejection, sample from p instead of norm(max(0, p - q))."""
    if greedy:
        return accept_draft(p, q, draft, generator, greedy)
    for i, x in enumerate(draft):
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if u * float(q[i, x]) < float(p[i, x]):
            continue
        return i, sample(p[i], generator)
    return len(draft), sample(p[len(draft)], generator)


class SkipResidual(Speculative):
    accept = staticmethod(accept_without_residual)


def drafted(cls: type[Speculative], path: Path, draft: Engine) -> Engine:
    """``cls`` over the checkpoint at ``path``, drafting with ``draft`` instead of n-grams."""
    engine = cls.load(path)
    assert isinstance(engine, Speculative)
    engine.draft_model = draft
    return engine


class ServedTemperature(Engine):
    """Serves temperature x ``factor`` for the temperature asked (0.8 for 1.0)."""

    factor = 0.8

    def generate(
        self, prompt_ids: list[int], params: SamplingParams, cancel: threading.Event | None = None
    ) -> Iterator[Delta]:
        return super().generate(
            prompt_ids, replace(params, temperature=params.temperature * self.factor), cancel
        )


class HiddenTopP(Engine):
    """Applies top_p 0.9 whatever the request says."""

    top_p = 0.9

    def generate(
        self, prompt_ids: list[int], params: SamplingParams, cancel: threading.Event | None = None
    ) -> Iterator[Delta]:
        return super().generate(prompt_ids, replace(params, top_p=min(params.top_p, self.top_p)), cancel)


@torch.no_grad()
def quantize_4bit(engine: Engine, group: int = 32) -> Engine:
    """Round every matrix to 4 bits (symmetric, absmax per group of ``group`` inputs), in place."""
    for _, w in engine.model.named_parameters():
        if w.dim() != 2 or w.shape[1] % group:
            continue
        g = w.view(w.shape[0], -1, group)
        scale = g.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 7
        g.copy_((g / scale).round().clamp(-8, 7) * scale)
    return engine


@torch.no_grad()
def perturb(engine: Engine, relative: float, seed: int = 0) -> Engine:
    """Add Gaussian noise of ``relative`` x each matrix's std, in place."""
    gen = torch.Generator().manual_seed(seed)
    for _, w in engine.model.named_parameters():
        if w.dim() == 2:
            w.add_(torch.randn(w.shape, generator=gen) * w.std() * relative)
    return engine


def loaded(engine: Engine, name: str = "tiny") -> LoadedModel:
    """One name for every candidate, so the same request body works on all of them."""
    return LoadedModel(engine, name, frozenset())


def load(cls: type[Engine], path: Path) -> Engine:
    return cls.load(path)


def talkative_checkpoint(tiny: Path, folder: Path, sharpen: float = 2.5) -> Path:
    """The shared tiny checkpoint made to talk like a trained model: only printable-ASCII tokens keep
    an output row (sampled text then survives re-tokenization, so scoring it scores what was drawn),
    scaled by ``sharpen`` (entropy ~1-2.5 nats/token instead of ~4.5: peaked, as real LMs are)."""
    import shutil

    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer

    shutil.copytree(tiny, folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    weights = load_file(folder / "model.safetensors")
    texts = [tok.decode([i]) for i in range(tok.get_vocab_size())]
    keep = torch.tensor([bool(t) and all(32 <= ord(c) < 127 or c == "\n" for c in t) for t in texts])
    keep[:3] = False  # the special tokens decode to nothing; never end early either
    weights["lm_head.weight"][~keep] = 0.0
    weights["lm_head.weight"][keep] *= sharpen
    save_file(weights, str(folder / "model.safetensors"))
    return folder
