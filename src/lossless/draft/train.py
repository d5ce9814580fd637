"""``lossless draft train``: self-distil a DSpark-style head from the target's own answers, on the CPU.

    write     the target writes ``written`` prompts of its own (Magpie-style, `data.written_prompts`)
    collect   the target answers every bundled prompt twice (greedy, and sampled at temperature 1) and
              every written prompt once (alternately greedy and sampled)
    vocab     the draft vocabulary: the target's most likely output tokens (+ its end tokens)
    train     anchors = every answer position; loss per drafted position k, weighted decay^(k-1):
                  0.1 CE(actual next token) + 0.9 TV(p_k, q_k) + BCE(conf_k, 1 - TV(p_k, q_k))
              (p_k: the target at temperature 1, kept sparse as its top tokens; TV is bounded above
              by 1 - sum over those of min(p, q), which is what is minimised)
    calibrate Platt-scale the confidence head on held-out prompts' anchors
    evaluate  held-out acceptance by position (1 - TV at temperature 1; argmax agreement at greedy)

Everything is seeded. The output folder gets head.safetensors + head.json (the head), recipe.json,
train_log.jsonl (one line per logged step, then the calibration and evaluation), and data.pt (the
collected answers, reused by a rerun with the same collection settings).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lossless.atomic import atomic_path, write_atomic
from lossless.draft.data import WINDOW, AnsweredPrompt, bundled_prompts, target_answers, written_prompts
from lossless.draft.recipe import Recipe
from lossless.engine.cpu import native_bfloat16
from lossless.engine.speculate.head import DSparkHead, HeadConfig, save_head

Log = Callable[[dict[str, Any]], None]


def train_head(
    out: Path, model: str | None, threads: int | None, changes: dict[str, Any], say: Callable[[str], None]
) -> dict[str, Any]:
    """``lossless draft train``: load the target as the recipe says, run the recipe (with ``changes``
    to some of its numbers) into ``out``."""
    from lossless import models
    from lossless.engine.engine import Engine

    recipe = replace(Recipe(), **changes)
    if threads:
        torch.set_num_threads(threads)
    engine = Engine.load(models.resolve(model), dtype=recipe.gen_dtype, max_context=1024)
    return run_recipe(engine, out, recipe, say)


def run_recipe(engine: Any, out: Path, recipe: Recipe, say: Callable[[str], None]) -> dict[str, Any]:
    """The whole recipe; returns the held-out evaluation. Threads: one is fastest on a shared 2-core
    machine (the small ops of a 4M-parameter head wait on a second thread more than they gain)."""
    torch.manual_seed(recipe.seed)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "recipe.json", json.dumps(asdict(recipe), indent=2) + "\n")
    with (out / "train_log.jsonl").open("w") as log_file:

        def log(entry: dict[str, Any]) -> None:
            log_file.write(json.dumps(entry) + "\n")
            log_file.flush()

        return _run(engine, out, recipe, log, say)


def _run(engine: Any, out: Path, recipe: Recipe, log: Log, say: Callable[[str], None]) -> dict[str, Any]:
    seqs = _collected(engine, out / "data.pt", recipe, say)
    embed = engine.model.tok_embeddings.weight.detach().float()
    vocab = draft_vocab(seqs, recipe.vocab, engine.tokenizer.eos_ids)
    # Held-out prompts (two answers each) choose the kept state, calibrate the confidence head and give
    # the figures below, which are therefore a little optimistic; benchmarks use prompts of their own.
    # A trial run with under 20 answers evaluates on two it also trained on.
    n_held = 2 * min(recipe.holdout // 2, len(seqs) // 10)
    held, train_seqs = seqs[:n_held] or seqs[:2], seqs[n_held:]
    config = HeadConfig(
        dim=embed.shape[1],
        vocab_size=embed.shape[0],
        window=WINDOW,
        block=recipe.block,
        ffn=recipe.ffn,
        rank=recipe.rank,
    )
    head = DSparkHead(config, embed, vocab)
    train_set, held_set = Anchors(train_seqs, config, vocab), Anchors(held, config, vocab)
    log(
        {
            "event": "data",
            "sequences": len(seqs),
            "train_anchors": len(train_set),
            "heldout_anchors": len(held_set),
            "vocab": len(vocab),
            "answer_tokens_in_vocab": train_set.coverage(),
        }
    )
    say(f"{len(train_set)} training anchors, vocabulary covers {train_set.coverage():.1%} of answer tokens")
    train(head, train_set, held_set, recipe, log, say)
    log({"event": "calibration", **calibrate_confidence(head, held_set)})
    evaluation = evaluate_head(head, held_set)
    log({"event": "heldout", **evaluation})
    log({"event": "saved", "sha256": save_head(head, out)})
    return evaluation


def _collected(engine: Any, path: Path, recipe: Recipe, say: Callable[[str], None]) -> list[AnsweredPrompt]:
    key = {k: getattr(recipe, k) for k in ("seed", "gen_dtype", "max_new", "prompts", "written", "gen_batch")}
    if path.exists():
        saved = torch.load(path, weights_only=False)
        if saved["key"] == key:
            say(f"reusing {len(saved['seqs'])} collected answers from {path}")
            return list(saved["seqs"])
    start = time.perf_counter()

    def progress(what: str) -> Callable[[int, int], None]:
        return lambda done, total: say(f"{what} {done}/{total} ({time.perf_counter() - start:.0f} s)")

    prompts = [p["prompt"] for p in bundled_prompts()][: recipe.prompts or None]
    written = (
        written_prompts(
            engine,
            recipe.written,
            batch=recipe.gen_batch,
            seed=recipe.seed + 1,
            log=progress("prompts written"),
        )
        if recipe.written
        else []
    )
    twice = [p for p in prompts for _ in range(2)]  # even index: greedy, odd: sampled
    seqs = target_answers(
        engine,
        twice + written,
        max_new=recipe.max_new,
        batch=recipe.gen_batch,
        seed=recipe.seed,
        log=progress("answers"),
    )
    # held-out prompts (bundled ones, both answers each) first, chosen by the seed; then the written ones
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(recipe.seed)).tolist()
    ordered = [seqs[2 * i + j] for i in order for j in (0, 1)] + seqs[len(twice) :]
    with atomic_path(path) as tmp:
        torch.save({"key": key, "seqs": ordered, "written": written}, tmp)
    return ordered


def draft_vocab(seqs: list[AnsweredPrompt], size: int, eos: frozenset[int]) -> Tensor:
    """The ``size`` tokens the target outputs most often, end-of-turn tokens always in.

    "Most often" is estimated from the target's distributions rather than its sampled tokens: the
    probability mass each token gets summed over every answer position (top tokens kept), which ranks
    the long tail better than counting a hundred thousand samples (ties: lower id)."""
    mass = torch.zeros(max(int(s.top_ids.max()) for s in seqs) + 1, dtype=torch.float64)
    for s in seqs:
        mass.index_add_(0, s.top_ids.flatten(), s.top_p.flatten().double())
    ranked = sorted(range(len(mass)), key=lambda t: (-float(mass[t]), t))
    chosen = set(ranked[: size - len(eos)]) | set(eos)
    return torch.tensor(sorted(chosen), dtype=torch.long)


class Anchors:
    """Every answer position n (the pending token c_n) of some sequences, as gather indices."""

    def __init__(self, seqs: list[AnsweredPrompt], config: HeadConfig, vocab: Tensor) -> None:
        assert config.window <= WINDOW, "the collected data holds WINDOW states before each answer"
        self.w, self.k = config.window, config.block
        self.hidden = torch.cat([s.hidden for s in seqs])  # [N_h, d] float16
        self.tokens = torch.cat([s.tokens for s in seqs])
        self.top_ids = torch.cat([s.top_ids for s in seqs])
        self.top_p = torch.cat([s.top_p for s in seqs])
        to_draft = torch.full((config.vocab_size,), -1, dtype=torch.long)
        to_draft[vocab] = torch.arange(len(vocab))
        self.to_draft = to_draft
        rows: list[Tensor] = []
        h_off = t_off = p_off = 0
        for s in seqs:
            # anchor n in [P, P+m-2]: hidden rows for positions n-w .. n-1 (row 0 is position P-WINDOW),
            # tokens n-w+1 .. n, targets from n+1
            p_len, m = s.prompt_len, len(s.tokens) - s.prompt_len
            n = torch.arange(p_len, p_len + m - 1)
            last = torch.full_like(n, t_off + p_len + m - 1)  # the answer's last token
            first_row = h_off + n - p_len + WINDOW - self.w
            rows.append(torch.stack([first_row, t_off + n, p_off + n - p_len + 1, last], 1))
            h_off, t_off, p_off = h_off + len(s.hidden), t_off + len(s.tokens), p_off + len(s.top_ids)
        self.rows = torch.cat(rows) if rows else torch.zeros(0, 4, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.rows)

    def coverage(self) -> float:
        targets = self.tokens[self.rows[:, 1] + 1]
        return float((self.to_draft[targets] >= 0).float().mean()) if len(self) else 0.0

    def batch(self, idx: Tensor) -> dict[str, Tensor]:
        """Anchors idx -> the head's inputs and its targets for positions 1..K."""
        r = self.rows[idx]
        w, k = self.w, self.k
        hidden = self.hidden[r[:, 0:1] + torch.arange(w)].float()  # [B, W, d]
        tokens = self.tokens[r[:, 1:2] - w + 1 + torch.arange(w)]  # [B, W]: c_{n-W+1} .. c_n
        at = r[:, 1:2] + torch.arange(1, k + 1)  # [B, K] token positions n+1 .. n+K
        valid = at <= r[:, 3:4]
        at = torch.minimum(at, r[:, 3:4])
        top = r[:, 2:3] + (at - r[:, 1:2]) - 1  # p rows for positions at-1: n .. n+K-1
        return {
            "hidden": hidden,
            "tokens": tokens,
            "prev": self.tokens[at - 1],  # [B, K]: x_{k-1}, teacher-forced (c_n for k = 1)
            "target": self.to_draft[self.tokens[at]],  # [B, K] draft-vocab index, -1 outside
            "top_ids": self.to_draft[self.top_ids[top]],  # [B, K, TOP] draft-vocab index, -1 outside
            "top_p": self.top_p[top].float(),  # [B, K, TOP]
            "valid": valid,  # [B, K]
        }


def losses(head: DSparkHead, b: dict[str, Tensor]) -> dict[str, Tensor]:
    """Per-position CE, TV bound, confidence BCE and greedy agreement: each [B, K]."""
    s = head.states(b["hidden"], b["tokens"])  # [B, K, d]
    logits = head.block_logits(s) + head.markov(b["prev"])  # [B, K, V']
    logq = torch.log_softmax(logits, -1)
    q = logq.exp()
    inside = b["top_ids"] >= 0
    q_top = q.gather(-1, b["top_ids"].clamp_min(0)) * inside  # [B, K, TOP]
    tv = 1.0 - torch.minimum(b["top_p"], q_top).sum(-1)  # >= the true TV(p, q)
    ce = -logq.gather(-1, b["target"].clamp_min(0)[..., None])[..., 0] * (b["target"] >= 0)
    conf = head.confidence_logit(s, b["prev"])
    bce = F.binary_cross_entropy_with_logits(conf, (1.0 - tv).detach().clamp(0, 1), reduction="none")
    agree = (logits.argmax(-1) == b["top_ids"][..., 0]) & (b["top_ids"][..., 0] >= 0)
    return {"ce": ce, "tv": tv, "bce": bce, "conf": torch.sigmoid(conf), "agree": agree.float()}


def train(
    head: DSparkHead, data: Anchors, held: Anchors, recipe: Recipe, log: Log, say: Callable[[str], None]
) -> None:
    """AdamW with warm-up and cosine decay; every ``eval_every`` steps the held-out anchors are scored
    and the best state so far (expected tokens per pass, T=1 and greedy averaged) is kept: with a few
    hundred prompts the head starts memorising them long before the training loss stops falling."""
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=recipe.weight_decay, betas=(0.9, 0.95))
    weights = recipe.position_decay ** torch.arange(recipe.block, dtype=torch.float32)
    generator = torch.Generator().manual_seed(recipe.seed)
    head.dropout = recipe.dropout
    best: tuple[float, int, dict[str, Tensor]] = (0.0, 0, {})
    # bfloat16 autocast is ~2x faster where the CPU computes bfloat16 natively, and ~17x slower where it
    # does not (AVX2: 42 s a step of 256 anchors against 2.5 s in float32): there the head trains in float32
    autocast = bool(native_bfloat16())
    start = time.perf_counter()
    for step in range(1, recipe.steps + 1):
        head.train()
        lr = recipe.lr * min(1.0, step / 100) * 0.5 * (1 + math.cos(math.pi * step / recipe.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        b = data.batch(torch.randint(len(data), (recipe.batch,), generator=generator))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            parts = losses(head, b)
            w = weights * b["valid"]  # [B, K]
            per_pos = recipe.ce_weight * parts["ce"] + recipe.tv_weight * parts["tv"] + parts["bce"]
            loss = (per_pos.float() * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % recipe.log_every == 0 or step == recipe.steps:
            entry = {
                "step": step,
                "loss": round(float(loss.detach()), 4),
                "lr": lr,
                "acceptance_t1_by_position": _by_position(1.0 - parts["tv"].detach(), b["valid"]),
                "greedy_agreement_by_position": _by_position(parts["agree"], b["valid"]),
                "seconds": round(time.perf_counter() - start, 1),
            }
            log(entry)
        if step % recipe.eval_every == 0 or step == recipe.steps:
            head.eval()
            scores = evaluate_head(head, held, calibration=False)
            score = (scores["expected_length_t1"] + scores["expected_length_greedy"]) / 2
            if score > best[0]:
                best = (score, step, {k: v.clone() for k, v in head.state_dict().items()})
            log({"step": step, "heldout": scores})
            say(
                f"step {step}: loss {float(loss.detach()):.3f}; held-out acceptance at T=1 by position "
                f"{scores['acceptance_t1_by_position']}, tokens per pass {score:.3f}"
            )
    head.load_state_dict(best[2])
    head.dropout = 0.0
    head.eval()
    log({"event": "kept", "step": best[1], "heldout_tokens_per_pass": round(best[0], 4)})


def _by_position(values: Tensor, valid: Tensor) -> list[float]:
    """[B, K] values -> their mean per position over the valid entries."""
    v = valid.float()
    return [round(float(x), 4) for x in (values * v).sum(0) / v.sum(0).clamp_min(1)]


@torch.no_grad()
def _all(head: DSparkHead, data: Anchors, chunk: int = 1024) -> dict[str, Tensor]:
    parts: dict[str, list[Tensor]] = {}
    for i in range(0, len(data), chunk):
        b = data.batch(torch.arange(i, min(i + chunk, len(data))))
        for k, v in {**losses(head, b), "valid": b["valid"]}.items():
            parts.setdefault(k, []).append(v)
    return {k: torch.cat(v) for k, v in parts.items()}


@torch.no_grad()
def calibrate_confidence(head: DSparkHead, data: Anchors) -> dict[str, Any]:
    """Platt scaling of the confidence logit on held-out anchors, folded into the head's last layer."""
    out = _all(head, data)
    valid = out["valid"]
    logit = torch.logit(out["conf"][valid].clamp(1e-6, 1 - 1e-6))
    label = (1.0 - out["tv"][valid]).clamp(0, 1)
    a, b = torch.ones((), requires_grad=True), torch.zeros((), requires_grad=True)
    with torch.enable_grad():
        opt = torch.optim.LBFGS([a, b], max_iter=100)

        def closure() -> Tensor:
            opt.zero_grad()
            loss = F.binary_cross_entropy_with_logits(a * logit + b, label)
            loss.backward()
            return loss

        opt.step(closure)
    head.conf.weight.mul_(a.detach())
    head.conf.bias.mul_(a.detach()).add_(b.detach())
    return {"platt_scale": round(float(a), 4), "platt_shift": round(float(b), 4)}


@torch.no_grad()
def evaluate_head(head: DSparkHead, data: Anchors, calibration: bool = True) -> dict[str, Any]:
    """Held-out figures: acceptance by position (conditional on the earlier ones), the expected tokens
    per target pass with all K drafted, and the confidence head's calibration in ten bins."""
    out = _all(head, data)
    accept_t1 = _by_position(1.0 - out["tv"], out["valid"])
    agree = _by_position(out["agree"], out["valid"])
    conf, actual = out["conf"][out["valid"]], (1.0 - out["tv"])[out["valid"]]
    bins = []
    for lo in [i / 10 for i in range(10)] if calibration else []:
        inside = (conf >= lo) & (conf < lo + 0.1 + (lo == 0.9))
        n = int(inside.sum())
        if n:
            predicted, observed = float(conf[inside].mean()), float(actual[inside].mean())
            bins.append({"predicted": round(predicted, 3), "observed": round(observed, 3), "n": n})
    return {
        "anchors": len(data),
        "acceptance_t1_by_position": accept_t1,
        "greedy_agreement_by_position": agree,
        "expected_length_t1": round(_expected_length(accept_t1), 3),
        "expected_length_greedy": round(_expected_length(agree), 3),
        "confidence_calibration": bins,
    }


def _expected_length(conditional: list[float]) -> float:
    """Tokens per target pass with every position drafted: 1 + sum_k prod_{i<=k} a_i (bonus included)."""
    total, survive = 1.0, 1.0
    for a in conditional:
        survive *= a
        total += survive
    return total
