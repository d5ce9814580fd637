"""``lossless verify``: gather from both endpoints, judge -> ``VerifyResult``; render elsewhere."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lossless.endpoints import Endpoint, public_url
from lossless.errors import UsageError
from lossless.verify.evidence import gather
from lossless.verify.judge import judge
from lossless.verify.result import BUDGETS, Budget, VerifyConfig, VerifyResult, parse_budget
from lossless.verify.stats import EFFECTS

__all__ = [
    "BUDGETS",
    "EXIT_CODES",
    "Budget",
    "VerifyConfig",
    "VerifyResult",
    "parse_budget",
    "run_verify",
    "verify",
]

EXIT_CODES = {"equivalent": 0, "different": 1, "inconclusive": 3}


async def verify(baseline: Endpoint, candidate: Endpoint, config: VerifyConfig) -> VerifyResult:
    evidence = await gather(baseline, candidate, config)
    return judge(baseline, candidate, config, evidence)


def run_verify(config: VerifyConfig) -> VerifyResult:
    if config.endpoints is not None:
        return asyncio.run(verify(*config.endpoints, config))
    from lossless.config import ServeConfig
    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model

    plain = ServeConfig(port=0, model=config.embedded_model, speculative="none")
    loaded = load_model(plain)  # once: both servers serve this one engine
    with (
        start_embedded(plain, loaded=loaded) as u1,
        start_embedded(replace(plain, speculative="ngram"), loaded=loaded) as u2,
    ):
        # One engine (one KV cache) behind two servers: never more than one request at a time.
        serial = replace(config, concurrency=1)
        return asyncio.run(
            verify(Endpoint("plain", u1, loaded.name), Endpoint("speculative", u2, loaded.name), serial)
        )


def verify_config(baseline: str | None, candidate: str | None, opts: dict[str, Any]) -> VerifyConfig:
    """The CLI's options -> a VerifyConfig; mistakes are UsageErrors before any traffic."""
    from lossless import endpoints as ep

    budget = parse_budget(opts["budget"])
    common = {"budget": budget, "api": opts["api"], "seed": opts["seed"], "timeout": opts["timeout"]}
    if opts.get("endpoints_file") is not None:
        if baseline is not None or candidate is not None:
            raise UsageError("give BASELINE and CANDIDATE URLs or --endpoints FILE, not both")
        pair = ep.load_pair(opts["endpoints_file"])
    elif (baseline is None) != (candidate is None):
        raise UsageError("give both BASELINE and CANDIDATE URLs, or neither (the embedded engine)")
    elif baseline is None or candidate is None:
        return VerifyConfig(None, embedded_model=opts["model"], **common)
    else:
        base = ep.from_urls((baseline,), opts["model"], opts["api_key_env"])[0]
        cand = ep.from_urls(
            (candidate,),
            opts["candidate_model"] or opts["model"],
            opts["candidate_api_key_env"] or opts["api_key_env"],
        )[0]
        pair = (replace(base, name="baseline"), replace(cand, name="candidate"))
    for endpoint in pair:
        ep.api_key(endpoint)  # fail now, naming the variable, if a key is missing
    return VerifyConfig(pair, **common)


def to_json(result: VerifyResult) -> str:
    from lossless.report.files import strict_json

    return strict_json(result.as_dict())


def write(result: VerifyResult, out_dir: Path) -> Path:
    from lossless.report.files import write_atomic

    return write_atomic(out_dir / "verify.json", to_json(result) + "\n")


def render(result: VerifyResult, console: Console) -> None:
    cand, base = result.candidate, result.baseline
    title = (
        f"verify: {cand.name} ({public_url(cand.base_url)}) against {base.name} ({public_url(base.base_url)})"
    )
    table = Table(title=title, title_justify="left")
    for col in ("test", "A/A p (Holm)", "A/B p (Holm)", "A/B effect", "A/A effect", "effect is"):
        table.add_column(col)
    d = result.decision
    for a, b, pa, pb in zip(result.aa, result.ab, d.aa_adjusted, d.ab_adjusted, strict=False):
        table.add_row(
            b.name, f"{pa:.3g}", f"{pb:.3g}", f"{b.effect:+.4g}", f"{a.effect:+.4g}", EFFECTS[b.name]
        )
    if result.tasks is not None:
        t = result.tasks
        table.add_row(
            "task accuracy",
            "",
            f"{d.ab_adjusted[-1]:.3g}",
            f"{t.difference:+.3g}",
            "",
            f"accuracy difference, {t.n} tasks (TOST +-{t.margin:g})",
        )
    console.print(table)
    g = result.greedy
    console.print(
        f"greedy (diagnostic): candidate matches baseline on {g['candidate_match']:.0%} of prompts, "
        f"baseline matches itself on {g['baseline_self_match']:.0%}"
    )
    if (agree := result.agreement) is not None:
        what = f"{agree.n} texts" if agree.source == "teacher-forced" else f"{agree.n} greedy tokens"
        console.print(
            f"log-prob agreement on {what}: {agree.mean_abs_diff:.3g} "
            f"nats/token (baseline vs itself {agree.baseline_noise:.3g})"
        )
    style = {"equivalent": "green", "different": "red", "inconclusive": "yellow"}[result.verdict]
    console.print(f"[bold {style}]{result.verdict}[/bold {style}]")
    for reason in d.reasons:
        console.print(f"  - {reason}")
    for note in result.notes:
        console.print(f"  note: {note}")
