"""Self-distillation data for the draft head: the target's own answers to the bundled prompts and to
prompts it writes itself.

One batched pass per group of prompts (left-padded, `Transformer.forward(pad=...)`) generates the
answers and keeps, for every position the drafter learns from, what the target knew there:

- ``hidden`` [n, dim]: the final (post-norm) hidden state at each position, from ``WINDOW`` positions
  before the answer to the one that predicted its last token;
- ``top_ids`` / ``top_p`` [m, TOP]: the target's most likely next tokens and their probabilities at
  temperature 1, at each position that predicted an answer token (m = answer length).

Half of the prompts are answered greedily, half sampled at temperature 1: the drafter meets both at
serve time. Everything is seeded: the same seed, prompts and checkpoint give the same data.

A few hundred hand-written prompts are too few (the head memorises them); `written_prompts` adds as
many more as wanted the way Magpie does (Xu et al., 2024): the chat template up to where a user's
message begins, continued by the target itself at temperature 1, is a user's message from the
distribution the target was tuned on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from lossless.engine.engine import Engine
    from lossless.engine.model.transformer import Transformer

WRITTEN_MAX = 64  # tokens of a prompt the target writes; one not ended by then is dropped
WINDOW = 8  # hidden states before the answer's first token that the first draft looks at
TOP = 32  # target probabilities kept per position (the rest is their complement's mass)


@dataclass(frozen=True)
class AnsweredPrompt:
    """One prompt and the target's answer, with what the target computed along it."""

    tokens: Tensor  # [P + m] int64: templated prompt, then the answer
    prompt_len: int  # P
    hidden: Tensor  # [WINDOW + m - 1, dim] float16: positions P - WINDOW .. P + m - 2
    top_ids: Tensor  # [m, TOP] int64: at positions P - 1 .. P + m - 2
    top_p: Tensor  # [m, TOP] float16
    greedy: bool


def bundled_prompts() -> list[dict[str, str]]:
    """The bundled prompt set: ``{"id", "kind", "prompt"}`` per line of draft/prompts.jsonl."""
    text = resources.files("lossless.draft").joinpath("prompts.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@torch.inference_mode()
def target_answers(
    engine: Engine,
    prompts: list[str],
    *,
    max_new: int,
    batch: int,
    seed: int,
    log: Callable[[int, int], None] | None = None,
) -> list[AnsweredPrompt]:
    """Answer ``prompts`` with ``engine``'s model, ``batch`` at a time; even indices greedily, odd ones
    sampled. Returns the sequences in the prompts' order."""
    model, eos = engine.model, engine.tokenizer.eos_ids
    encoded = [engine.chat_prompt([{"role": "user", "content": p}]) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))  # similar lengths pad least
    generator = torch.Generator().manual_seed(seed)
    out: dict[int, AnsweredPrompt] = {}
    try:
        for start in range(0, len(order), batch):
            rows = order[start : start + batch]
            answers = _answer(
                model, [encoded[i] for i in rows], [i % 2 == 0 for i in rows], eos, max_new, generator
            )
            out.update(zip(rows, answers, strict=True))
            if log is not None:
                log(len(out), len(order))
    finally:
        model.setup_cache(engine.max_context)  # back to the engine's own batch-1 cache
    return [out[i] for i in range(len(prompts))]


@torch.inference_mode()
def written_prompts(
    engine: Engine,
    n: int,
    *,
    batch: int,
    seed: int,
    log: Callable[[int, int], None] | None = None,
) -> list[str]:
    """``n`` distinct user messages written by ``engine``'s model (fewer only if 3n tries do not give
    them): each the continuation, sampled at temperature 1, of the chat template cut where the user's
    message begins, ended by an end-of-turn token within ``WRITTEN_MAX`` tokens."""
    model, tokenizer = engine.model, engine.tokenizer
    marker = "\x00MESSAGE\x00"
    template = tokenizer.apply_chat_template([{"role": "user", "content": marker}])
    prefix = tokenizer.encode(template.split(marker)[0], add_special=False)
    generator = torch.Generator().manual_seed(seed)
    written: dict[str, None] = {}  # insertion-ordered set
    try:
        for tried in range(0, 3 * n, batch):
            size = min(batch, 3 * n - tried)  # a trial's 4 messages: 12 tries, not a whole batch of 64
            rows = _answer(model, [prefix] * size, [False] * size, tokenizer.eos_ids, WRITTEN_MAX, generator)
            for row in rows:
                ids = row.tokens[row.prompt_len :].tolist()
                text = tokenizer.decode(ids[:-1]).strip() if ids[-1] in tokenizer.eos_ids else ""
                if text:
                    written.setdefault(text)
            if log is not None:
                log(min(len(written), n), n)
            if len(written) >= n:
                break
    finally:
        model.setup_cache(engine.max_context)
    return list(written)[:n]


def _answer(
    model: Transformer,
    prompts: list[list[int]],
    greedy: list[bool],
    eos: frozenset[int],
    max_new: int,
    generator: torch.Generator,
) -> list[AnsweredPrompt]:
    b, width = len(prompts), max(len(p) for p in prompts)
    model.setup_cache(width + max_new, batch=b)
    pad = torch.tensor([width - len(p) for p in prompts])
    tokens = torch.zeros(b, width, dtype=torch.long)
    for r, p in enumerate(prompts):
        tokens[r, width - len(p) :] = torch.tensor(p)
    hidden = model(tokens, torch.arange(width), return_hidden=True, pad=pad)  # [B, W, dim]
    hiddens = [hidden[:, -WINDOW:].to(torch.float16)]  # [B, WINDOW, dim] each step appends [B, 1, dim]
    last = hidden[:, -1]  # [B, dim]
    answer, tops, tops_p = [], [], []
    done = torch.zeros(b, dtype=torch.bool)
    lengths = torch.full((b,), max_new)
    is_greedy = torch.tensor(greedy)
    for step in range(max_new):
        probs = torch.softmax(model.output(last).float(), dim=-1)  # [B, V] at temperature 1
        top = probs.topk(TOP, dim=-1)
        sampled = torch.multinomial(probs, 1, generator=generator)[:, 0]
        nxt = torch.where(is_greedy, probs.argmax(-1), sampled)
        answer.append(nxt)
        tops.append(top.indices)
        tops_p.append(top.values.to(torch.float16))
        ended = ~done & torch.tensor([int(t) in eos for t in nxt])
        lengths[ended] = step + 1
        done |= ended
        if bool(done.all()) or step == max_new - 1:
            break
        last = model(nxt[:, None], torch.tensor([width + step]), return_hidden=True, pad=pad)[:, -1]
        hiddens.append(last[:, None].to(torch.float16))
    ids = torch.stack(answer, 1)  # [B, steps]
    h_all = torch.cat(hiddens, 1)  # [B, WINDOW + steps - 1, dim]
    top_ids, top_p = torch.stack(tops, 1), torch.stack(tops_p, 1)  # [B, steps, TOP]
    return [
        AnsweredPrompt(
            tokens=torch.cat([torch.tensor(p), ids[r, : int(lengths[r])]]),
            prompt_len=len(p),
            hidden=h_all[r, : WINDOW + int(lengths[r]) - 1].clone(),
            top_ids=top_ids[r, : int(lengths[r])].clone(),
            top_p=top_p[r, : int(lengths[r])].clone(),
            greedy=greedy[r],
        )
        for r, p in enumerate(prompts)
    ]
