"""What ``lossless demo`` was asked to do: frozen options; every default defined here once."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from lossless.provision.embedded import Embedded
from lossless.verify.budget import Budget, parse_budget

# --quick (CI): the smallest run that still exercises every step and gives the statistics two samples
QUICK_BUDGET = Budget(prompts=3, samples=4, max_tokens=12, tasks=8, permutations=500)
# The demo's: "small" said "inconclusive, about 2x the samples and 1.4x the tasks would settle it" against
# the embedded model on 2 cores (float32, n-gram). In bfloat16 with the DSpark head, 5 x 12 said
# "inconclusive, about 1.1x the samples"; this is 1.4x that, and the whole demo takes ~3 minutes there.
DEMO_BUDGET = Budget(prompts=6, samples=14, max_tokens=16, tasks=18)


@dataclass(frozen=True)
class DemoOptions:
    out_dir: Path = Path("lossless-demo")  # bench files, verify.json and report.html
    requests: int = 6  # measured requests per suite (short, long, grounded) and endpoint
    max_tokens: int = 64  # per benchmark request
    budget: Budget = DEMO_BUDGET  # the verification's
    warmup: int = 1  # unmeasured requests per endpoint first (the first forward pass is slow)
    # benchmark requests' temperature: 0 (greedy) by default, so both modes write the same answers (in
    # bfloat16 they part on some prompts: a forward over several tokens rounds differently from one over
    # one) and are timed on equal work; verification samples at its own temperatures either way
    temperature: float = 0.0
    # the model, its dtype and the speculative server's drafter: provision.Embedded's defaults
    embedded: Embedded = field(default_factory=Embedded)
    seed: int = 0

    @property
    def drafter(self) -> str:
        return self.embedded.speculative


QUICK_DEMO = DemoOptions(requests=4, max_tokens=24, budget=QUICK_BUDGET)


def demo_options(
    out_dir: Path,
    quick: bool = False,
    *,
    requests: int | None = None,
    max_tokens: int | None = None,
    verify_budget: str | None = None,
    model: str | None = None,
    speculative: str | None = None,
    dtype: str = Embedded.dtype,
    seed: int = 0,
    temperature: float = 0.0,
) -> DemoOptions:
    """The CLI's flags -> DemoOptions: ``--quick`` lowers the defaults; explicit flags win. A budget given
    as PxSxT changes those three of the demo's own budget, not of verify's."""
    base = QUICK_DEMO if quick else DemoOptions()
    budget = base.budget
    if verify_budget is not None:
        budget = parse_budget(verify_budget, base.budget, "--verify-budget")
    return replace(
        base,
        out_dir=out_dir,
        requests=requests or base.requests,
        max_tokens=max_tokens or base.max_tokens,
        budget=budget,
        embedded=Embedded(model=model, dtype=dtype, drafter=speculative),
        seed=seed,
        temperature=temperature,
    )
