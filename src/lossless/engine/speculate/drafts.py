"""Model-free and draft-model drafters for `speculative.speculative_decode` (the trained head's is in
`head`; `engine.build_drafter` makes the one a `spec.DrafterSpec` names).

Adaptive draft lengths here are *non-anticipating*: the decision to draft position i+1 looks at
x_1..x_i, their probabilities and past steps only, never at a token not yet drafted. A rule that
peeks (draft x_{i+1}, keep it only if it looks good) changes which q the kept tokens were drawn
from and biases the output; tests/unit/engine/speculate/test_speculative_mc.py shows the chi-square
test catching it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from lossless.engine.model.sampling import SamplingParams, sample, warp
from lossless.engine.speculate.spec import DEFAULT_THRESHOLD
from lossless.engine.speculate.speculative import CausalLM, Draft, Rng
from lossless.errors import UsageError


def check_same_vocab(target: Sequence[str | bytes], draft: Sequence[str | bytes], where: str) -> None:
    """Refuse a draft whose token ids mean something else: its q would be over different tokens."""
    if list(target) == list(draft):
        return
    first = next((i for i, (a, b) in enumerate(zip(target, draft, strict=False)) if a != b), None)
    detail = f"token {first} is {draft[first]!r} there, {target[first]!r} here" if first is not None else ""
    raise UsageError(
        f"{where}: the draft model's vocabulary differs from the target's "
        f"({len(draft)} vs {len(target)} tokens{'; ' + detail if detail else ''}); "
        "a draft model must share the target's tokenizer"
    )


class NoDrafter:
    """Plain decoding through the speculative loop (k = 0): a baseline and a sanity check."""

    def begin(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: object, hidden: object
    ) -> Draft:
        return Draft([], None)

    def observe(self, drafted: int, accepted: int) -> None:
        pass


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the context's last n tokens (n from
    ``max_ngram`` down to ``min_ngram``) in the prompt and output so far, draft what followed it.

    The draft is a deterministic function of the context, so q is one-hot. Length adapts to past
    outcomes only (non-anticipating): a fully accepted draft doubles the next one (up to k), a
    rejection shortens it to one more than was accepted. Text that is not copying would still pay
    for a rejected token per step, so a draft rejected outright pauses drafting for 1, 2, 4 .. 16
    steps; while paused, the draft it would have made is checked against the token that came, and
    drafting resumes as soon as one would have been right (copying has started).
    """

    MAX_PAUSE = 16

    def __init__(self, k_max: int = 8, max_ngram: int = 3, min_ngram: int = 2) -> None:
        assert k_max >= 1 and max_ngram >= min_ngram >= 1
        self.k_max, self.max_ngram, self.min_ngram = k_max, max_ngram, min_ngram
        self.begin(())

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.k = self.k_max
        self.misses = 0  # drafts rejected outright in a row
        self.pause = 0  # steps left without drafting
        self.shadow: tuple[int, int] | None = None  # (position, token) a paused draft would have made

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: object, hidden: object
    ) -> Draft:
        if self.shadow is not None:  # only tokens already emitted are looked at
            pos, token = self.shadow
            if context[pos] == token:
                self.pause = 0  # misses stay: one more outright rejection pauses longer
            self.shadow = None
        draft = ngram_lookup(context, min(k, self.k), self.max_ngram, self.min_ngram)
        if self.pause > 0 and draft:
            self.pause -= 1
            self.shadow = (len(context), draft[0])
            return Draft([], None)
        return Draft(draft, None)

    def observe(self, drafted: int, accepted: int) -> None:
        if not drafted:
            return
        self.k = min(self.k_max, 2 * self.k) if accepted == drafted else max(1, accepted + 1)
        self.misses = self.misses + 1 if accepted == 0 else 0
        self.pause = min(self.MAX_PAUSE, 2 ** (self.misses - 1)) if self.misses else 0


def ngram_lookup(context: Sequence[int], k: int, max_ngram: int, min_ngram: int) -> list[int]:
    """The up-to-k tokens that followed the latest earlier occurrence of the context's tail."""
    if k <= 0:
        return []
    ctx = list(context)
    for n in range(min(max_ngram, len(ctx) - 1), min_ngram - 1, -1):
        tail = ctx[-n:]
        # latest match first: recent text predicts the next tokens better than the prompt's start
        for start in range(len(ctx) - n - 1, -1, -1):
            if ctx[start : start + n] == tail:
                return ctx[start + n : start + n + k]
    return []


class ModelDrafter:
    """A separate small causal LM sharing the target's tokenizer, with its own KV cache.

    It samples each x_i from q_i = warp(its logits) with the request's parameters and stops after a
    token whose probability is below ``threshold`` (for greedy requests, the unwarped softmax
    probability, since the warped q is one-hot): the rule looks at x_i, already drafted.
    """

    def __init__(self, model: CausalLM, threshold: float = DEFAULT_THRESHOLD["draft"]) -> None:
        self.model, self.threshold = model, threshold
        self.cached: list[int] = []  # tokens whose keys/values sit in the draft cache, by position

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.cached = []

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: Rng, hidden: object
    ) -> Draft:
        if k <= 0:
            return Draft([], None)
        # Reuse the cache up to the first difference; rejected drafts beyond it get overwritten.
        keep = common_prefix(self.cached, context, limit=len(context) - 1)
        logits = self._forward(list(context[keep:]), keep)  # [V] after context[-1]
        self.cached = list(context)
        tokens: list[int] = []
        qs: list[Tensor] = []
        for i in range(k):
            q = warp(logits, params.temperature, params.top_k, params.top_p)  # [V]
            x = int(q.argmax()) if params.greedy else sample(q, generator)
            tokens.append(x)
            qs.append(q)
            confidence = float(torch.softmax(logits, -1)[x] if params.greedy else q[x])
            # Non-anticipating stop: decided from x_i and its probability, before x_{i+1} exists.
            if i == k - 1 or confidence < self.threshold:
                break
            logits = self._forward([x], len(self.cached))
            self.cached.append(x)
        return Draft(tokens, torch.stack(qs))  # q: [len(tokens), V]

    def observe(self, drafted: int, accepted: int) -> None:
        pass

    def _forward(self, new: list[int], start: int) -> Tensor:
        # new: T tokens at positions start.. -> the logits after the last one: [V]
        with torch.inference_mode():
            pos = torch.arange(start, start + len(new))
            return self.model(torch.tensor([new]), pos, prompt=start == 0)[0, -1]


def common_prefix(a: Iterable[int], b: Iterable[int], limit: int) -> int:
    """How many first tokens ``a`` and ``b`` share, at most ``limit``."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if n == limit or x != y:
            break
        n += 1
    return n
