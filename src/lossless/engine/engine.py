"""The engine's face to the server: load a checkpoint, turn requests into streams of text deltas.

torch and the loaders are imported inside the methods: importing this module (the server does, for
the dataclasses) stays cheap. Threads are the caller's business (``torch.set_num_threads``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lossless.engine.sampling import SamplingParams
from lossless.errors import CheckpointError, UsageError

if TYPE_CHECKING:
    from lossless.engine.drafts import DrafterSpec
    from lossless.engine.hf import Checkpoint
    from lossless.engine.model import Transformer
    from lossless.engine.speculative import Drafter
    from lossless.engine.tokenizer import Tokenizer

FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    token: str  # the token's own text (decoded alone)
    logprob: float  # natural log under the *unwarped* model distribution (temperature 1, no top-k/p)
    top: tuple[tuple[int, str, float], ...] = ()  # (token_id, text, logprob) of the most likely tokens


@dataclass(frozen=True)
class Delta:
    text: str  # new text since the previous delta; stop sequences are cut, partial UTF-8 held back
    token_ids: tuple[int, ...] = ()  # the generated tokens this delta accounts for (may be several)
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token in token_ids when params.logprobs
    finish_reason: FinishReason | None = None  # set on the last delta only
    stats: Mapping[str, Any] = field(default_factory=dict)  # last delta: e.g. speculative figures


class Engine:
    """One loaded model. Not thread-safe: the server calls it from a single worker thread."""

    name: str  # model name reported by /v1/models
    max_context: int  # prompt + generated tokens at most

    def __init__(
        self, checkpoint: Checkpoint, *, name: str | None = None, max_context: int | None = None
    ) -> None:
        self.model = build_model(checkpoint, max_context)
        self.tokenizer: Tokenizer = checkpoint.tokenizer
        self.args = checkpoint.args
        self.name = name or checkpoint.name
        self.max_context = self.model.max_seq_len
        self.dtype = str(self.model.output.weight.dtype).removeprefix("torch.")
        self.spec: DrafterSpec | None = None  # speculative decoding when a drafter is set
        self.drafter: Drafter | None = None

    def use_drafter(self, spec: DrafterSpec) -> None:
        """Decode speculatively from now on (kind "none": plainly); draft:PATH loads that checkpoint."""
        from lossless.engine.drafts import build_drafter

        self.spec, self.drafter = spec, build_drafter(spec, self)

    @classmethod
    def load(cls, path: Path, *, dtype: str = "float32", max_context: int | None = None) -> Engine:
        """A ``*.gguf`` file or a Hugging Face directory -> Engine; a bad checkpoint -> CheckpointError."""
        import torch

        from lossless.models import EMBEDDED

        path = Path(path)
        torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}.get(
            dtype
        )
        if torch_dtype is None:
            raise UsageError(f"dtype {dtype!r} unsupported, choose float32, bfloat16 or float64")
        if path.is_dir():
            from lossless.engine.hf import load_hf

            checkpoint = load_hf(path, torch_dtype)
        elif path.suffix == ".gguf":
            from lossless.engine.gguf import load_gguf

            checkpoint = load_gguf(path, torch_dtype)
        elif not path.exists():
            raise CheckpointError(f"{path.name}: no such file or directory")
        else:
            raise CheckpointError(f"{path.name}: expected a .gguf file or a Hugging Face model directory")
        embedded = {m.filename: m.name for m in EMBEDDED.values()}
        return cls(checkpoint, name=embedded.get(path.name), max_context=max_context)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """Apply the checkpoint's chat template (with the generation prompt) and tokenize."""
        # the template writes its own special tokens: the tokenizer must not add a BOS on top
        return self.tokenizer.encode(self.tokenizer.apply_chat_template(messages), add_special=False)

    def generate(
        self, prompt_ids: list[int], params: SamplingParams, cancel: threading.Event | None = None
    ) -> Iterator[Delta]:
        """Yield deltas as tokens are accepted; the last one carries finish_reason. Checks ``cancel``
        between tokens and stops with finish_reason "cancelled" when it is set."""
        from lossless.engine.generate import generate_text, plain_tokens
        from lossless.engine.sampling import make_generator
        from lossless.engine.speculative import SpecStats, speculative_decode

        self._check_prompt(prompt_ids)
        budget = min(params.max_tokens, self.max_context - len(prompt_ids))
        generator = make_generator(params.seed)
        if self.drafter is None or self.spec is None:
            source = plain_tokens(self.model, prompt_ids, params, generator)
            yield from generate_text(source, self.tokenizer, params, budget=budget, cancel=cancel)
            return
        stats = SpecStats(self.spec.k)
        source = speculative_decode(
            self.model, self.drafter, prompt_ids, params, max_new_tokens=budget, k_max=self.spec.k,
            generator=generator, stats=stats,
        )  # fmt: skip
        for delta in generate_text(source, self.tokenizer, params, budget=budget, cancel=cancel):
            if delta.finish_reason is not None:  # the source is closed by now: the figures are final
                delta = replace(delta, stats={**delta.stats, **stats.as_dict()})
            yield delta

    def score(self, prompt_ids: list[int], top_logprobs: int = 0) -> list[TokenLogprob | None]:
        """Teacher-forced log-probabilities of each prompt token given its prefix (None for the first)."""
        from lossless.engine.generate import score_tokens

        self._check_prompt(prompt_ids)
        return score_tokens(self.model, prompt_ids, top_logprobs, self.tokenizer)

    def _check_prompt(self, prompt_ids: list[int]) -> None:
        if not prompt_ids:
            raise UsageError("the prompt is empty: at least one token is needed")
        if len(prompt_ids) > self.max_context:
            raise UsageError(f"the prompt has {len(prompt_ids)} tokens, the context holds {self.max_context}")
        bad = [i for i in prompt_ids if not 0 <= i < self.args.vocab_size]
        if bad:
            raise UsageError(f"token id {bad[0]} outside the vocabulary (0..{self.args.vocab_size - 1})")


def build_model(checkpoint: Checkpoint, max_context: int | None = None) -> Transformer:
    """Our Transformer holding the checkpoint's weights, with its KV cache for ``max_context`` positions."""
    import torch

    from lossless.engine.model import Transformer

    with torch.device("meta"):
        model = Transformer(checkpoint.args)  # no memory, no random init: the weights come next
    weights = dict(checkpoint.weights)
    if checkpoint.args.tie_embeddings:
        weights["output.weight"] = weights["tok_embeddings.weight"]
    model.load_state_dict(weights, strict=True, assign=True)
    if checkpoint.args.tie_embeddings:
        model.output.weight = model.tok_embeddings.weight  # assign=True made two parameters: tie again
    model.setup_cache(max_context)
    return model.eval()
