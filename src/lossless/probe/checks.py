"""Parameter-fidelity checks, by behaviour: each sends a few requests and judges what came back.

A verdict is one of
    honoured     the response changed the way the parameter asks
    ignored      accepted (HTTP 200) and nothing changed: the parameter was dropped silently
    rejected     the endpoint answered an error (the evidence keeps the status and message)
    unsupported  the behaviour cannot be observed here (e.g. a model that never reasons)
    inconclusive what came back shows nothing either way (an answer cut at max_tokens, asked again)
and the evidence keeps what it was decided on: counts, sizes, p-values.
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from scipy import stats

from lossless.client.wire import Reply, Wire, chat, post_all

Verdict = Literal["honoured", "ignored", "rejected", "unsupported", "inconclusive"]
ALPHA = 0.05  # one-sided level for on-versus-off comparisons

LONG = "Count from 1 to 200, separated by commas."  # an answer far longer than the limits below
SHORT = "Write one sentence about the sea."
REASON = "A farmer has 17 sheep and all but 9 run away. How many are left? Think step by step."


@dataclass(frozen=True)
class Check:
    name: str  # the parameter form, e.g. "enable_thinking=false"
    verdict: Verdict
    evidence: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # one line for people: why this verdict


@dataclass(frozen=True)
class Settings:
    repeats: int  # requests per arm where a comparison needs several (default: ProbeOptions')
    max_tokens: int  # for answers that must be long enough to show a difference
    limit: int = 5  # the max_tokens the max_tokens check asks for
    concurrency: int = 4  # requests in flight at once


def rejected(name: str, reply: Reply) -> Check:
    note = f"HTTP {reply.status}" if reply.status else "no answer (the connection failed or timed out)"
    return Check(name, "rejected", {"status": reply.status, "error": reply.error}, note)


def first_failure(replies: Sequence[Reply]) -> Reply | None:
    return next((r for r in replies if not r.ok), None)


# --- a canary and invalid values --------------------------------------------------------------------

CANARY = "lossless_canary_field"
INVALID = (
    ("temperature=-1", {"temperature": -1}),
    ("max_tokens=-1", {"max_tokens": -1}),
    ("top_p=5", {"top_p": 5}),
)


async def canary(w: Wire, s: Settings) -> list[Check]:
    reply = await w.post(chat(SHORT, max_tokens=8, **{CANARY: {"x": 1}}))
    if not reply.ok:
        return [rejected(f"unknown field {CANARY}", reply)]
    note = "accepted silently: any parameter may be dropped without a word"
    return [Check(f"unknown field {CANARY}", "ignored", {"status": reply.status}, note)]


async def invalid_values(w: Wire, s: Settings) -> list[Check]:
    replies = await post_all(w, [chat(SHORT, **{"max_tokens": 8, **v}) for _, v in INVALID], s.concurrency)
    out = []
    for (name, _), reply in zip(INVALID, replies, strict=True):
        if reply.ok:
            evidence = {"status": reply.status, "completion_tokens": reply.usage_int("completion_tokens")}
            out.append(Check(f"{name} (invalid)", "ignored", evidence, "an invalid value was accepted"))
        else:
            out.append(rejected(f"{name} (invalid)", reply))
    return out


# --- limits ------------------------------------------------------------------------------------------


async def max_tokens(w: Wire, s: Settings) -> list[Check]:
    name = f"max_tokens={s.limit}"
    limited, reference = await post_all(
        w,
        [chat(LONG, max_tokens=s.limit, temperature=0), chat(LONG, max_tokens=s.max_tokens, temperature=0)],
        2,
    )
    if not limited.ok:
        return [rejected(name, limited)]
    used = limited.usage_int("completion_tokens")
    chars = len(limited.text) + len(limited.reasoning)
    reference_chars = len(reference.text) + len(reference.reasoning) if reference.ok else None
    ev: dict[str, Any] = {
        "completion_tokens": used,
        "finish_reason": limited.choices[0].finish_reason if limited.choices else None,
        "chars": chars,
        "reference_chars": reference_chars,
    }
    # without usage, the text must at least be shorter than an answer allowed to run on
    shorter = reference_chars is not None and chars < reference_chars
    ok = used <= s.limit if used is not None else shorter
    if ok:
        return [Check(name, "honoured", ev)]
    return [Check(name, "ignored", ev, f"{used if used is not None else 'more'} tokens came back")]


def stop_string(text: str) -> str | None:
    """Two visible characters from about 40% into ``text``: present in the answer, not at its start."""
    for i in range(max(1, int(len(text) * 0.4)), len(text) - 1):
        pick = text[i : i + 2]
        if not any(c.isspace() or c == "\ufffd" for c in pick):
            return pick
    return None


async def stop(w: Wire, s: Settings) -> list[Check]:
    reference = await w.post(chat(LONG, max_tokens=s.max_tokens, temperature=0))
    if not reference.ok:
        return [rejected("stop", reference)]
    cut = stop_string(reference.text)
    if cut is None or len(reference.text) < 8:
        return [Check("stop", "unsupported", {"reference_chars": len(reference.text)}, "no text to cut")]
    reply = await w.post(chat(LONG, max_tokens=s.max_tokens, temperature=0, stop=[cut]))
    if not reply.ok:
        return [rejected("stop", reply)]
    ev = {"stop": cut, "chars": len(reply.text), "reference_chars": len(reference.text)}
    if cut in reply.text:
        return [Check("stop", "ignored", ev, "the stop string came back in the answer")]
    return [Check("stop", "honoured", ev)]


# --- determinism -------------------------------------------------------------------------------------


async def seed(w: Wire, s: Settings) -> list[Check]:
    """seed, and temperature itself: five answers at temperature 1 (three with one seed, two with
    others) must not all be the same; some servers decode greedily whatever the temperature
    (``transformers serve`` unless the checkpoint's generation_config says do_sample)."""
    bodies = [chat(SHORT, max_tokens=24, temperature=1, seed=s_) for s_ in (11, 11, 11, 12, 13)]
    replies = await post_all(w, bodies, s.concurrency)
    if bad := first_failure(replies):
        return [rejected("seed", bad), rejected("temperature=1 samples", bad)]
    same = {r.text for r in replies[:3]}
    others = {r.text for r in replies[3:]}
    ev = {"same_seed_distinct_answers": len(same), "other_seeds_differ": bool(others - same)}
    distinct = {"distinct_answers": len(same | others), "requests": len(replies)}
    if len(same | others) == 1:
        note = "five answers at temperature 1 were one text: it decodes greedily"
        return [
            Check("seed", "unsupported", ev, "every seed gave the same answer: nothing varies to fix"),
            Check("temperature=1 samples", "ignored", distinct, note),
        ]
    sampled = Check("temperature=1 samples", "honoured", distinct)
    if len(same) > 1:
        return [Check("seed", "ignored", ev, "one seed gave different answers"), sampled]
    return [Check("seed", "honoured", ev), sampled]


async def greedy_family(w: Wire, s: Settings) -> list[Check]:
    """temperature 0 repeatability, prompt_tokens stability, and stream == non-stream: one set of
    greedy requests answers all three."""
    body = chat(SHORT, max_tokens=s.max_tokens, temperature=0)
    replies = await post_all(w, [body] * s.repeats, s.concurrency)
    if bad := first_failure(replies):
        return [rejected("temperature=0 repeatable", bad)]
    streamed = await w.post({**body, "stream": True})
    texts = [r.text for r in replies]
    out = [_repeatable(texts), _prompt_tokens([r.usage_int("prompt_tokens") for r in replies])]
    if not streamed.ok:
        out.append(rejected("stream == non-stream (temperature 0)", streamed))
    else:
        ev = {"equal": streamed.text in texts, "chars": len(streamed.text), "non_stream_chars": len(texts[0])}
        verdict: Verdict = "honoured" if ev["equal"] else "ignored"
        out.append(Check("stream == non-stream (temperature 0)", verdict, ev))
    return out


def _repeatable(texts: list[str]) -> Check:
    distinct = len(set(texts))
    ev = {"requests": len(texts), "distinct_answers": distinct}
    if distinct == 1:
        return Check("temperature=0 repeatable", "honoured", ev)
    return Check(
        "temperature=0 repeatable", "ignored", ev, f"{distinct} different answers to one greedy request"
    )


def _prompt_tokens(counts: list[int | None]) -> Check:
    name = "usage.prompt_tokens stable"
    if any(c is None for c in counts):
        return Check(name, "unsupported", {"reported": sum(c is not None for c in counts)}, "no usage")
    values = sorted(set(counts), key=lambda c: c or 0)
    if len(values) == 1:
        return Check(name, "honoured", {"prompt_tokens": values[0]})
    return Check(name, "ignored", {"prompt_tokens": values}, "one input, several counts")


# --- extras ------------------------------------------------------------------------------------------


async def n_choices(w: Wire, s: Settings) -> list[Check]:
    reply = await w.post(chat(SHORT, max_tokens=8, temperature=1, n=3))
    if not reply.ok:
        return [rejected("n=3", reply)]
    ev = {"choices": len(reply.choices)}
    if len(reply.choices) == 3:
        return [Check("n=3", "honoured", ev)]
    return [Check("n=3", "ignored", ev, f"{len(reply.choices)} choice(s) came back")]


async def logprobs(w: Wire, s: Settings) -> list[Check]:
    reply = await w.post(chat(SHORT, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3))
    if not reply.ok:
        return [rejected("logprobs", reply), rejected("top_logprobs=3", reply)]
    lp = reply.choices[0].logprobs if reply.choices else None
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list) or not content:
        ev: dict[str, Any] = {"logprobs": lp is not None}
        return [Check("logprobs", "ignored", ev), Check("top_logprobs=3", "ignored", ev)]
    tops = [len(t.get("top_logprobs") or []) for t in content if isinstance(t, dict)]
    ev = {"tokens": len(content), "completion_tokens": reply.usage_int("completion_tokens")}
    top_ok = bool(tops) and all(n == 3 for n in tops)
    top_ev = {"alternatives_per_token": sorted(set(tops))}
    return [
        Check("logprobs", "honoured", ev),
        Check("top_logprobs=3", "honoured" if top_ok else "ignored", top_ev),
    ]


async def stream_usage(w: Wire, s: Settings) -> list[Check]:
    name = "stream_options.include_usage"
    reply = await w.post(chat(SHORT, max_tokens=8, stream=True, stream_options={"include_usage": True}))
    if not reply.ok:
        return [rejected(name, reply)]
    ev = {"events": reply.chunks, "completion_tokens": reply.usage_int("completion_tokens")}
    if ev["completion_tokens"] is None:
        return [Check(name, "ignored", ev, "no usage in the stream")]
    return [Check(name, "honoured", ev)]


# --- reasoning switches ------------------------------------------------------------------------------

# (name, on, off): the name is the form that should switch reasoning *off*.
SWITCHES: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...] = (
    ("reasoning_effort=none", {"reasoning_effort": "high"}, {"reasoning_effort": "none"}),
    (
        "thinking.type=disabled",
        {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"thinking": {"type": "disabled"}},
    ),
    ("enable_thinking=false", {"enable_thinking": True}, {"enable_thinking": False}),
    (
        "chat_template_kwargs.enable_thinking=false",
        {"chat_template_kwargs": {"enable_thinking": True}},
        {"chat_template_kwargs": {"enable_thinking": False}},
    ),
    ("reasoning.enabled=false", {"reasoning": {"enabled": True}}, {"reasoning": {"enabled": False}}),
)


async def reasoning(w: Wire, s: Settings) -> list[Check]:
    out = []
    for name, on, off in SWITCHES:
        bodies = [
            chat(REASON, max_tokens=s.max_tokens, **fields) for fields in (on, off) for _ in range(s.repeats)
        ]
        replies = await post_all(w, bodies, s.concurrency)
        out.append(judge_switch(name, replies[: s.repeats], replies[s.repeats :]))
    return out


def judge_switch(name: str, on: Sequence[Reply], off: Sequence[Reply]) -> Check:
    """Reasoning with the switch on versus off: honoured when off reasons significantly less."""
    if bad := first_failure([*off, *on]):
        return rejected(name, bad)
    by_tokens = all(r.reasoning_tokens() is not None for r in [*on, *off])
    measure: Callable[[Reply], float] = (
        (lambda r: float(r.reasoning_tokens() or 0)) if by_tokens else (lambda r: float(len(r.reasoning)))
    )
    a, b = [measure(r) for r in on], [measure(r) for r in off]
    ev: dict[str, Any] = {
        "measure": "usage reasoning_tokens" if by_tokens else "reasoning chars",
        "on_median": statistics.median(a),
        "off_median": statistics.median(b),
        "on_completion_tokens": statistics.median([r.usage_int("completion_tokens") or 0 for r in on]),
        "off_completion_tokens": statistics.median([r.usage_int("completion_tokens") or 0 for r in off]),
        "on_latency_s": round(statistics.median([r.elapsed_s for r in on]), 4),
        "off_latency_s": round(statistics.median([r.elapsed_s for r in off]), 4),
    }
    if max(a + b) == 0:
        return Check(name, "unsupported", ev, "no reasoning either way")
    p = float(stats.mannwhitneyu(a, b, alternative="greater").pvalue) if a != b else 1.0
    ev["p_value"] = round(p, 4)
    if p < ALPHA and ev["off_median"] <= 0.5 * ev["on_median"]:
        return Check(name, "honoured", ev)
    return Check(name, "ignored", ev, "reasoning did not drop when switched off")


CHECKS: tuple[Callable[[Wire, Settings], Awaitable[list[Check]]], ...] = (
    canary,
    reasoning,
    max_tokens,
    stop,
    seed,
    greedy_family,
    n_choices,
    logprobs,
    stream_usage,
    invalid_values,
)
