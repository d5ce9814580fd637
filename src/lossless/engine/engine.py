"""The engine's face to the server: load a checkpoint, turn requests into streams of text deltas.

Data flows down: this module drives `generate` and `speculative` (which make the ``Delta`` stream;
``Delta`` and ``TokenLogprob`` are re-exported here for the server) and builds the drafter a
`speculate.spec.DrafterSpec` names from `speculate.drafts` and `speculate.head`; none of them imports
this module. Importing it loads torch; the checkpoint loaders are imported when a checkpoint is loaded.

One Engine is one model state (the KV cache): a generation or a scoring holds ``ModelLock`` for its
whole life, so callers on several threads (two servers on one engine, see `with_drafter`) wait their
turn instead of interleaving. A `decode_batch` has KV caches of its own and shares only the weights.
Threads for torch are the caller's business (``torch.set_num_threads``).
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lossless.engine.batch.decode import DecodeBatch
from lossless.engine.model.generate import Delta, TokenLogprob, generate_text, plain_tokens, score_tokens
from lossless.engine.model.sampling import SamplingParams, make_generator
from lossless.engine.speculate.drafts import ModelDrafter, NgramDrafter, check_same_vocab
from lossless.engine.speculate.spec import DEFAULT_THRESHOLD, DSPARK_THRESHOLD, DSPARK_TREE, DrafterSpec
from lossless.engine.speculate.speculative import Drafter, speculative_decode
from lossless.engine.speculate.stats import SpecStats
from lossless.engine.weights.build import build_model
from lossless.engine.weights.packed import PackedLinear
from lossless.engine.weights.quant import Q8Linear, kernel
from lossless.errors import CheckpointError, UsageError

if TYPE_CHECKING:
    from lossless.engine.model.tokenizer import Tokenizer
    from lossless.engine.weights.hf import Checkpoint

__all__ = ["Delta", "Engine", "ModelLock", "TokenLogprob", "build_drafter"]

T = TypeVar("T")
_WAIT_S = 0.05  # a generation waiting for the model looks at its cancel event this often


class ModelLock:
    """The right to use one model's state, held by one generation or scoring at a time.

    Not reentrant: a thread that asks again while it holds it (a second generation started before the
    first was closed) would wait for itself forever, so it gets a RuntimeError instead. Released by
    whoever ends the generation (a generator closed by the garbage collector may run on another thread:
    a plain Lock allows that).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None  # the holder's thread ident; a thread can only see its own here

    def acquire(self, cancel: threading.Event | None = None) -> bool:
        """Wait for the model; False if ``cancel`` is set while waiting."""
        if self._owner == threading.get_ident():
            raise RuntimeError("this thread is already using the engine: close its other generation first")
        while not self._lock.acquire(timeout=_WAIT_S):
            if cancel is not None and cancel.is_set():
                return False
        self._owner = threading.get_ident()
        return True

    def release(self) -> None:
        self._owner = None
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


class Engine:
    """One loaded model. Any thread may call it: generations and scorings take turns (``lock``)."""

    name: str  # model name reported by /v1/models
    max_context: int  # prompt + generated tokens at most

    def __init__(
        self,
        checkpoint: Checkpoint,
        *,
        name: str | None = None,
        max_context: int | None = None,
        float32_prompts: bool | None = None,
        int4_kernel: str | None = None,
    ) -> None:
        self.model, prompts = build_model(checkpoint, max_context, float32_prompts, int4_kernel)
        self.tokenizer: Tokenizer = checkpoint.tokenizer
        self.args = checkpoint.args
        self.name = name or checkpoint.name
        self.max_context = self.model.max_seq_len
        # the served numerics: the weights' dtype, or int4 (the file's 4-bit blocks) with the kernel that
        # multiplies them, and the dtype prompts are processed in (float32 where bfloat16 would be slow)
        self.dtype = "int4" if checkpoint.int4 else str(self.model.output.weight.dtype).removeprefix("torch.")
        self.int4_kernel = kernel(int4_kernel) if checkpoint.int4 else None  # (name, why): `quant.kernel`
        self.prompt_dtype = "float32" if self.model.prompt_model is not None else self.dtype
        self.prompt_choice = prompts  # what processes prompts and why (None for float32 weights)
        # the output layer's kernel: the file's Q8_0 blocks on ours, oneDNN's packed bfloat16, or torch's
        self.output_layer = {Q8Linear: "q8", PackedLinear: "packed"}.get(type(self.model.output))
        self.spec: DrafterSpec | None = None  # speculative decoding when a drafter is set
        self.drafter: Drafter | None = None
        self.lock = ModelLock()  # guards the model's KV cache; shared with every `with_drafter` copy
        self.compiled = False  # the forward passes run through torch.compile (`compile`)
        self.source: Path | None = None  # the checkpoint loaded (`load`); None when built from memory

    def use_drafter(self, spec: DrafterSpec) -> None:
        """Decode speculatively from now on (kind "none": plainly); draft:PATH loads that checkpoint. On
        a compiled engine the drafter's forward is compiled too."""
        self.spec, self.drafter = spec, build_drafter(spec, self)
        if self.compiled:
            self._compile_drafter()

    def with_drafter(self, spec: DrafterSpec) -> Engine:
        """This engine decoding as ``spec`` says: another Engine on the same weights, KV cache and lock
        (one copy in memory). Their generations take turns; they never interleave."""
        other = copy.copy(self)  # shallow: model, tokenizer and lock are shared, the drafter is not
        other.use_drafter(spec)
        return other

    def twin(self) -> Engine:
        """This engine on the same weights (shared, not copied) with a KV cache, drafter and lock of its
        own, eager: `compile_cache.compile_aside` makes compiled graphs with it while this one serves."""
        other = copy.copy(self)
        other.model, other.lock, other.compiled = self.model.twin(), ModelLock(), False
        other.spec, other.drafter = None, None
        if self.spec is not None:
            other.use_drafter(self.spec)
        return other

    @classmethod
    def load(
        cls,
        path: Path,
        *,
        dtype: str = "float32",
        max_context: int | None = None,
        float32_prompts: bool | None = None,
        int4_kernel: str | None = None,
    ) -> Engine:
        """A ``*.gguf`` file or a Hugging Face directory -> Engine; a bad checkpoint -> CheckpointError.
        ``float32_prompts``: process prompts of bfloat16 or int4 weights in float32 (None: where this CPU
        has no bfloat16 instructions, or where measured faster at load, `prompts.choose_prompt_model`).
        ``int4_kernel``: auto, q8 or torch (`quant.kernel`; None reads ``LOSSLESS_INT4_KERNEL``)."""
        import torch

        from lossless.models import EMBEDDED

        path = Path(path)
        # int4 computes in bfloat16 between its layers: torch's int4 kernel is fast only with bfloat16
        # activations (ours rounds them to int8 per block, `quant.kernel`)
        compute = "bfloat16" if dtype == "int4" else dtype
        torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}.get(
            compute
        )
        if torch_dtype is None:
            raise UsageError(f"dtype {dtype!r} unsupported, choose int4, float32, bfloat16 or float64")
        if dtype == "int4" and path.suffix != ".gguf":
            raise UsageError(f"{path.name}: int4 weights come from a GGUF file's Q4_0 / Q4_1 blocks")
        if path.is_dir():
            from lossless.engine.weights.hf import load_hf

            checkpoint = load_hf(path, torch_dtype)
        elif path.suffix == ".gguf":
            from lossless.engine.weights.gguf import load_gguf

            checkpoint = load_gguf(path, torch_dtype, int4=dtype == "int4")
            if dtype == "int4" and not checkpoint.int4:
                raise UsageError(f"{path.name}: int4 asked, but no linear layer is stored as Q4_0 or Q4_1")
        elif not path.exists():
            raise CheckpointError(f"{path.name}: no such file or directory")
        else:
            raise CheckpointError(f"{path.name}: expected a .gguf file or a Hugging Face model directory")
        embedded = {m.filename: m.name for m in EMBEDDED.values()}
        name = embedded.get(path.name)
        engine = cls(
            checkpoint,
            name=name,
            max_context=max_context,
            float32_prompts=float32_prompts,
            int4_kernel=int4_kernel,
        )
        engine.source = path
        return engine

    def compile(self) -> float:
        """Compile the model's forward passes (and its draft model's or draft head's) and make the
        graphs this engine decodes with now, so that no request pays for them: one token, several
        tokens (prefill, a chain of drafts), a tree. The seconds it took (inductor caches the code on
        disk: far less the next time in this environment)."""
        import time

        start = time.perf_counter()
        self.model.compile_forward()
        self._compile_drafter()
        warm = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
        prompt = self.encode("one two three four one two three four one two three four one two")
        for params in (warm, replace(warm, temperature=1.0, seed=0)):  # greedy and sampled trees differ
            for _ in self.generate(prompt, params):
                pass
        self.compiled = True
        return time.perf_counter() - start

    def use_compiled(self) -> None:
        """Decode through compiled graphs from the next generation on (`compile_cache.compile_aside` made
        them): waits for the running generation, so that none runs half eager, half compiled."""
        self.lock.acquire()
        try:
            self.model.compile_forward()
            self._compile_drafter()
            self.compiled = True
        finally:
            self.lock.release()

    def _compile_drafter(self) -> None:
        """A draft model's forward passes (compiled at their first use) or a draft head's pass (now)."""
        from lossless.engine.speculate.head_drafter import HeadDrafter

        draft = getattr(self.drafter, "model", None)
        if draft is not None and draft is not self.model:
            draft.compile_forward()
        elif isinstance(self.drafter, HeadDrafter):
            self.drafter.compile()

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
        between tokens and stops with finish_reason "cancelled" when it is set.

        Holds the model from the first ``next`` until the stream ends, raises or is closed: a caller
        that stops early must close it (``for`` over it to the end, or ``close()``), or another
        generation waits until the abandoned stream is garbage-collected."""
        self.check_prompt(prompt_ids)
        if not self.lock.acquire(cancel):  # cancelled while another generation held the model
            yield Delta("", finish_reason="cancelled", stats={"completion_tokens": 0, "decode_s": 0.0})
            return
        try:
            yield from self._generate(prompt_ids, params, cancel)
        finally:
            self.lock.release()

    def _generate(
        self, prompt_ids: list[int], params: SamplingParams, cancel: threading.Event | None
    ) -> Iterator[Delta]:
        budget = min(params.max_tokens, self.max_context - len(prompt_ids))
        generator = make_generator(params.seed)
        constraint = None
        if params.grammar is not None:
            from lossless.engine.model.constrain import Constraint

            constraint = Constraint(params.grammar, self.tokenizer, self.args.vocab_size)
        if self.drafter is None or self.spec is None:
            source = plain_tokens(self.model, prompt_ids, params, generator, constraint)
            yield from generate_text(source, self.tokenizer, params, budget=budget, cancel=cancel)
            return
        stats = SpecStats(self.spec.k)
        source = speculative_decode(
            self.model,
            self.drafter,
            prompt_ids,
            params,
            max_new_tokens=budget,
            k_max=self.spec.k,
            generator=generator,
            stats=stats,
            constraint=constraint,
        )
        for delta in generate_text(source, self.tokenizer, params, budget=budget, cancel=cancel):
            if delta.finish_reason is not None:  # the source is closed by now: the figures are final
                delta = replace(delta, stats={**delta.stats, **stats.as_dict()})
            yield delta

    def decode_batch(self, slots: int) -> DecodeBatch[Any]:
        """A continuous batch of up to ``slots`` generations on this engine's weights, each in a KV cache
        slot of its own (`batch.decode`): nothing of the engine's own state is touched, so it holds no
        lock; one thread steps it. Each sequence speculates with a drafter of its own (`batch_drafter`)."""
        make = self.batch_drafter()
        k = self.spec.k if self.spec is not None and make is not None else 0
        return DecodeBatch(self.model, self.tokenizer, self.args.vocab_size, slots, make, k)

    def batch_drafter(self) -> Callable[[], Drafter] | None:
        """A new drafter for each sequence of a batch, as this engine's drafts: n-gram lookup, or the draft
        head (shared, its state per sequence); None for plain decoding and for a draft model, whose KV
        cache holds one sequence."""
        from lossless.engine.speculate.head_drafter import HeadDrafter

        if isinstance(self.drafter, NgramDrafter):
            return functools.partial(NgramDrafter, self.drafter.k_max)
        if isinstance(self.drafter, HeadDrafter):
            return self.drafter.fork
        return None

    def score(self, prompt_ids: list[int], top_logprobs: int = 0) -> list[TokenLogprob | None]:
        """Teacher-forced log-probabilities of each prompt token given its prefix (None for the first)."""
        self.check_prompt(prompt_ids)
        self.lock.acquire()
        try:
            return score_tokens(self.model, prompt_ids, top_logprobs, self.tokenizer)
        finally:
            self.lock.release()

    def check_prompt(self, prompt_ids: list[int]) -> None:
        if not prompt_ids:
            raise UsageError("the prompt is empty: at least one token is needed")
        if len(prompt_ids) > self.max_context:
            raise UsageError(f"the prompt has {len(prompt_ids)} tokens, the context holds {self.max_context}")
        bad = [i for i in prompt_ids if not 0 <= i < self.args.vocab_size]
        if bad:
            raise UsageError(f"token id {bad[0]} outside the vocabulary (0..{self.args.vocab_size - 1})")


def _for_dtype(defaults: dict[str, T], dtype: str) -> T:
    """A per-dtype default (`spec.DSPARK_THRESHOLD`, `DSPARK_TREE`); float32's for another dtype."""
    return defaults.get(dtype, defaults["float32"])


def build_drafter(spec: DrafterSpec, target: Engine) -> Drafter | None:
    """The drafter a spec names, for ``target``; None for plain decoding. A draft checkpoint is
    loaded like the target (same dtype, context and prompt dtype) and refused unless it shares the
    tokenizer."""
    if spec.kind == "none":
        return None
    if spec.kind == "ngram":
        return NgramDrafter(spec.k)
    if spec.kind == "dspark":
        from lossless.engine.speculate.head import SHIPPED, load_head
        from lossless.engine.speculate.head_drafter import HeadDrafter

        head = load_head(spec.path or SHIPPED, target.model.tok_embeddings.weight)
        if target.int4_kernel is not None:
            head.use_int4(target.int4_kernel[0])
        threshold = _for_dtype(DSPARK_THRESHOLD, target.dtype) if spec.threshold is None else spec.threshold
        tree = _for_dtype(DSPARK_TREE, target.dtype) if spec.tree is None else spec.tree
        return HeadDrafter(head, threshold, lookup=NgramDrafter(spec.k), tree=tree)
    assert spec.path is not None
    wide = target.model.prompt_model is not None
    kernel_name = target.int4_kernel[0] if target.int4_kernel is not None else None
    try:
        draft = Engine.load(
            spec.path,
            dtype=target.dtype,
            max_context=target.max_context,
            float32_prompts=wide,
            int4_kernel=kernel_name,
        )
    except UsageError:  # an int4 target's draft without Q4 blocks: the same activations, dense weights
        if target.dtype != "int4":
            raise
        draft = Engine.load(spec.path, dtype="bfloat16", max_context=target.max_context, float32_prompts=wide)
    vocab = [
        [tok.token_bytes(i) for i in range(tok.vocab_size)] for tok in (target.tokenizer, draft.tokenizer)
    ]
    check_same_vocab(vocab[0], vocab[1], f"draft:{spec.path}")
    if draft.args.vocab_size != target.args.vocab_size or draft.max_context < target.max_context:
        raise UsageError(
            f"draft:{spec.path}: {draft.args.vocab_size} logits over a {draft.max_context}-token context, "
            f"the target has {target.args.vocab_size} over {target.max_context}; they must match"
        )
    return ModelDrafter(draft.model, DEFAULT_THRESHOLD["draft"] if spec.threshold is None else spec.threshold)
