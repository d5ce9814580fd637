"""What an endpoint supports, learned once before verify collects anything, and said in its result.

Servers read the same request differently (llama.cpp takes ``max_tokens: 0`` for "no limit", returns
no chat logprobs without ``top_logprobs``, and reports echoed prompt tokens' log-probabilities one
position late; ``transformers serve`` refuses unknown fields and ignores ``echo``), so nothing here is
assumed: each capability is tried with a small request and checked by what comes back.

    reachable    a plain greedy completion answers 200 (else the run stops: exit 2, one line)
    sampler      NEUTRAL's fields are accepted: the model's own distribution is sampled, not llama.cpp's
                 default top_k 40 / min_p 0.05 / repeat penalty 1.1
    tokens       sampled answers come with token log-probabilities (token boundaries; greedy agreement)
    scoring      echo + logprobs scores a text token by token, and the scores sit at the right tokens:
                 greedy's token must be the likeliest at its own position when its text is scored
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lossless.client.endpoints import public_url
from lossless.client.wire import Reply
from lossless.errors import EndpointError
from lossless.verify.collect import SCORING, Caller, logprobs_of

# The model's own distribution: no truncation, no penalty. Standard top_p, and the extensions that
# llama.cpp (top_k, min_p, repeat_penalty) and vLLM (top_k, min_p) read; 0 turns top_k off in both.
NEUTRAL: dict[str, Any] = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
PROBE = "The capital of France is"


@dataclass(frozen=True)
class Capabilities:
    sampler: bool  # NEUTRAL accepted
    tokens: bool  # token log-probabilities on sampled answers
    scoring: int | None  # index into collect.SCORING, None: no teacher-forced scores
    said: tuple[str, ...]  # one line per capability, for the result's notes
    # index into SCORING where echo scores come back one token off (llama-cpp-python): each echoed
    # position's alternatives are another position's, but the generated token's are right
    late: int | None = None

    def as_dict(self) -> dict[str, Any]:
        top = None if self.scoring is None else SCORING[self.scoring]
        return {"neutral_sampler": self.sampler, "token_logprobs": self.tokens, "scoring_top": top}


async def detect(c: Caller) -> Capabilities:
    name = f"{c.wire.endpoint.name!r} ({public_url(c.wire.endpoint.base_url)})"
    path = (
        "/completions" if c.api == "completions" else "/chat/completions"
    )  # Wire puts the rest in their API
    body: dict[str, Any] = {"max_tokens": 2, "temperature": 0}
    if c.api != "completions":
        body["messages"] = [{"role": "user", "content": PROBE}]
    else:
        body["prompt"] = PROBE
    plain = await c.wire.post(body, path)  # unreachable: EndpointError, the run stops here
    if not plain.ok:
        raise EndpointError(f"endpoint {name} refused a plain request to {path}: {_why(plain)}")
    said = []
    sampler = (await c.wire.post({**body, **NEUTRAL}, path)).ok
    if not sampler:
        said.append("top_k/min_p/repeat_penalty refused: its own sampling defaults apply")
    extra = NEUTRAL if sampler else {}
    asked = {"logprobs": 1} if c.api == "completions" else {"logprobs": True, "top_logprobs": 1}
    with_lp = await c.wire.post({**body, **extra, **asked}, path)
    tokens = with_lp.ok and logprobs_of(with_lp) is not None
    if not tokens:
        why = _why(with_lp) if not with_lp.ok else "none came back"
        said.append(f"no token log-probabilities ({why}): comparing characters")
    scoring, why_not, late = await _scoring(c, extra)
    if why_not:
        said.append(f"cannot score text ({why_not}): no teacher-forced tests")
    named = tuple(f"{c.wire.endpoint.name}: {s}" for s in said)
    return Capabilities(sampler, tokens, scoring, named, late)


async def _scoring(c: Caller, extra: dict[str, Any]) -> tuple[int | None, str, int | None]:
    """The first SCORING entry the endpoint takes and scores right with, or why none (and the entry
    whose echo scores sit one token off, where that is why)."""
    why = "no echo with logprobs on /completions"
    for i, top in enumerate(SCORING):
        first = await _echo(c, PROBE, top, extra)
        lp = _legacy(first)
        if lp is None:
            why = f"echo with logprobs: {_why(first)}" if not first.ok else why
            continue
        if not first.text.startswith(PROBE):
            return None, "echo ignored", None
        aligned = await _aligned(c, first.text[len(PROBE) :], top, extra)
        if aligned is False:
            return None, "echoed log-probabilities sit one token off", i
        return i, "", None
    return None, why, None


async def _aligned(c: Caller, greedy: str, top: int, extra: dict[str, Any]) -> bool | None:
    """Score PROBE + its greedy continuation: that token must be the likeliest where it stands (a
    server that reports each echoed token's score one position late fails this). None when it cannot
    be told (no continuation, or it does not come back as one token of its own)."""
    if not greedy:
        return None
    lp = _legacy(await _echo(c, PROBE + greedy, top, extra))
    if lp is None:
        return None
    rows = zip(
        lp["tokens"], lp["text_offset"], lp["token_logprobs"], lp.get("top_logprobs") or [], strict=False
    )
    for token, at, value, alts in rows:
        if at == len(PROBE) and token == greedy and isinstance(value, int | float) and isinstance(alts, dict):
            # a nat of slack: a bfloat16 server scores a text in one forward and decodes it one token at
            # a time, which round differently; a misplaced score is off by far more (-11 against -1.6)
            return value >= max(alts.values(), default=value) - 1.0
    return None


async def _echo(c: Caller, prompt: str, top: int, extra: dict[str, Any]) -> Reply:
    body = {"prompt": prompt, "echo": True, "logprobs": top, "max_tokens": 1, "temperature": 0, **extra}
    return await c.wire.post(body, "/completions")


def _legacy(reply: Reply) -> dict[str, Any] | None:
    """A completion's logprobs object when it lists tokens, offsets and scores."""
    lp = reply.choices[0].logprobs if reply.ok and reply.choices else None
    keys = ("tokens", "text_offset", "token_logprobs")
    if isinstance(lp, dict) and all(isinstance(lp.get(k), list) and lp[k] for k in keys):
        return lp
    return None


def _why(reply: Reply) -> str:
    return f"HTTP {reply.status} {reply.error or ''}".strip()
