"""verify over real HTTP: our engine as baseline, lossless and deliberately lossy candidates as servers.

The tiny checkpoint is made talkative (printable-ASCII output, sharpened to ~1-2.5 nats/token like a
trained model; see lossy_engines.talkative_checkpoint) so that sampled text survives re-tokenization
and the distributions are peaked enough to be told apart. Fixed seeds: every verdict is reproducible.
benchmarks/verify_power.py repeats these over seeds to measure detection rates.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import lossy_engines as le
import pytest
from click.testing import CliRunner

from lossless.cli import main
from lossless.client.endpoints import Endpoint
from lossless.engine.engine import Engine
from lossless.report.verify import verify_section
from lossless.server.launch import start_embedded
from lossless.server.options import ServeOptions
from lossless.verify.budget import ALONE_PAIR, BUDGETS, SAMPLED_ALONE, describe_alone, parse_budget
from lossless.verify.result import VerifyConfig, VerifyResult
from lossless.verify.run import verify


@pytest.fixture(scope="module")
def talkative(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return le.talkative_checkpoint(tiny_checkpoint, tmp_path_factory.mktemp("verify") / "talkative")


@pytest.fixture(scope="module")
def baseline_url(talkative: Path) -> Iterator[str]:
    with start_embedded(ServeOptions(), loaded=le.loaded(Engine.load(talkative))) as url:
        yield url


def run(baseline_url: str, engine: Engine, seed: int = 0) -> VerifyResult:
    with start_embedded(ServeOptions(), loaded=le.loaded(engine)) as url:
        config = VerifyConfig(BUDGETS["default"], seed=seed)
        return asyncio.run(
            verify(Endpoint("baseline", baseline_url, "tiny"), Endpoint("candidate", url, "tiny"), config)
        )


CANDIDATES: dict[str, Callable[[Path], Engine]] = {
    "speculative": lambda p: le.Speculative.load(p),
    "temperature 0.8 for 1.0": lambda p: le.ServedTemperature.load(p),
    "hidden top_p 0.9": lambda p: le.HiddenTopP.load(p),
    "weights at 4 bits": lambda p: le.quantize_4bit(Engine.load(p)),
    "weights perturbed 5%": lambda p: le.perturb(Engine.load(p), 0.05),
    # a draft model accepted about half the time, its rejections resampled from p instead of the residual
    "speculative 4-bit draft, no residual": lambda p: le.drafted(
        le.SkipResidual, p, le.quantize_4bit(Engine.load(p))
    ),
}
LOSSY = [name for name in CANDIDATES if name != "speculative"]


@pytest.fixture(scope="module")
def verdicts(baseline_url: str, talkative: Path) -> Callable[[str], VerifyResult]:
    """Each candidate verified once per module, however many tests read its result."""
    found: dict[str, VerifyResult] = {}

    def of(name: str) -> VerifyResult:
        if name not in found:
            found[name] = run(baseline_url, CANDIDATES[name](talkative))
        return found[name]

    return of


def test_speculative_decoding_is_equivalent_to_plain(verdicts: Callable[[str], VerifyResult]) -> None:
    result = verdicts("speculative")
    assert result.verdict == "equivalent", result.decision.reasons
    d = result.decision
    assert d.bound is not None and d.sample_sd is not None
    assert d.bound < 0.6 * d.sample_sd  # TOST: the score difference is bounded within the tolerance
    assert d.detectable is not None and d.detectable < d.sample_sd
    procedure = result.as_dict()["procedure"]  # settled at the first look, and it says what it spent
    assert procedure["look"] == 1 and procedure["samples"] == 10 and procedure["looks"] == [10, 20, 30]
    assert procedure["error_rates"] == {"different": 0.01, "equivalent": 0.05, "inconclusive_aa": 0.01}
    assert procedure["requests"] > 3 * 8 * 10  # three sets of 8 prompts x 10 samples, and the rest
    assert {t.n_y for t in result.ab if t.name == "mean_score"} == {8 * 10}
    assert result.greedy["candidate_match"] == 1.0  # greedy speculative decoding is exact
    assert result.distance is not None and result.distance.value == 0.0


@pytest.mark.parametrize("name", LOSSY)
def test_lossy_candidates_are_different(name: str, verdicts: Callable[[str], VerifyResult]) -> None:
    result = verdicts(name)
    assert result.verdict == "different", result.decision.reasons


def test_sampling_alone_catches_a_lossy_sampler(verdicts: Callable[[str], VerifyResult]) -> None:
    """A temperature change leaves scoring untouched: the sampled texts must give it away."""
    result = verdicts("temperature 0.8 for 1.0")
    assert result.distance is not None and result.distance.value == 0.0
    tests = {t.name: t for t in result.ab}
    assert tests["mean_score"].effect > 0  # cooler sampling: likelier text under the baseline,
    assert tests["rank"].effect < 0 and tests["tail"].effect < 0  # its tokens nearer the top
    assert any(r.startswith(("mean_score", "rank", "tail")) for r in result.decision.reasons)


def test_no_residual_is_caught_by_the_contexts_test(verdicts: Callable[[str], VerifyResult]) -> None:
    """Every token stays about as likely under the baseline; only repeated draws at one context show
    that the draft's preferences leak into the output."""
    result = verdicts("speculative 4-bit draft, no residual")
    assert result.distance is not None and result.distance.value == 0.0  # the same weights
    assert [r.split(":")[0] for r in result.decision.reasons] == ["contexts"]
    found = {t.name: t for t in result.ab}["contexts"]
    assert found.effect > 0 and found.n_y > BUDGETS["default"].repeats // 2


def test_a_look_that_cannot_bound_the_difference_draws_more_samples(baseline_url: str) -> None:
    """Two prompts, at most 12 samples in three looks: 4 samples cannot bound the score difference within
    0.6 sd, so verify draws more, and the result says at which look it stopped."""
    config = VerifyConfig(parse_budget("2x12x8"), seed=3)
    b, c = Endpoint("baseline", baseline_url, "tiny"), Endpoint("candidate", baseline_url, "tiny")
    result = asyncio.run(verify(b, c, config))
    procedure = result.as_dict()["procedure"]
    assert procedure["looks"] == [4, 8, 12] and procedure["look"] > 1, result.decision.reasons
    score = {t.name: t for t in result.ab}["mean_score"]
    assert score.n_x == 2 * 2 * procedure["samples"] and score.n_y == 2 * procedure["samples"]
    assert result.verdict != "different"


def test_next_token_is_the_baselines_distribution_after_that_token(
    baseline_url: str, talkative: Path
) -> None:
    """What the contexts test reads over HTTP is the engine's own distribution at that context."""
    from lossless.client.wire import Wire
    from lossless.verify.collect import PROMPTS, Caller

    engine = Engine.load(talkative)

    def after(ids: list[int]) -> list[tuple[str, float]]:  # the engine's top 20 after ids
        last = engine.score([*ids, 0], top_logprobs=20)[-1]
        assert last is not None
        return [(text, lp) for _, text, lp in last.top]

    ids = engine.encode(PROMPTS[0])
    first_id, first, _ = engine.score([*ids, 0], top_logprobs=1)[-1].top[0]  # type: ignore[union-attr]
    assert engine.encode(PROMPTS[0] + first) == [*ids, first_id]  # the context survives tokenizing

    async def ask() -> tuple[tuple[str, float], ...] | None:
        async with Wire(Endpoint("baseline", baseline_url, "tiny")) as wire:
            return await Caller(wire, "completions", asyncio.Semaphore(1)).next_token(PROMPTS[0], first)

    got, want = asyncio.run(ask()), after([*ids, first_id])
    assert got is not None and [t for t, _ in got] == [t for t, _ in want]
    assert [v for _, v in got] == pytest.approx([v for _, v in want], abs=1e-4)


def test_cli_gates_with_exit_codes_and_json(baseline_url: str, talkative: Path) -> None:
    with start_embedded(ServeOptions(), loaded=le.loaded(le.HiddenTopP.load(talkative))) as url:
        result = CliRunner().invoke(main, ["verify", baseline_url, url, "--model", "tiny", "--json"])
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "different"
    names = {t["name"] for t in doc["tests"]}
    assert names == {"mmd_hamming", "first_token", "lengths", "mean_score", "rank", "tail", "contexts"}
    assert "different" in result.stderr  # the table and verdict for people


def test_cli_small_budget_is_inconclusive_not_equivalent(baseline_url: str, talkative: Path) -> None:
    with start_embedded(ServeOptions(), loaded=le.loaded(Engine.load(talkative))) as url:
        result = CliRunner().invoke(
            main, ["verify", baseline_url, url, "--model", "tiny", "--budget", "2x3x8"]
        )
    assert result.exit_code == 3, result.stderr
    assert "would settle it" in result.stdout
    assert "note: --budget 2x3x8 cannot confirm equivalence (3 samples bound" in result.stderr  # said first
    # a long command says what it is doing, a line per phase (stderr is no terminal here)
    said = result.stderr
    assert "verify: what each endpoint supports" in said and "verify: greedy answers" in said


def test_cli_without_logprobs_lets_the_texts_decide_and_says_their_measured_power(
    baseline_url: str, talkative: Path
) -> None:
    """--no-logprobs: no distance and no scores, so nothing bounds the difference; the card, the JSON and
    the page say what the sampled texts alone detected at this budget in the calibration."""
    with start_embedded(ServeOptions(), loaded=le.loaded(Engine.load(talkative))) as url:
        args = ["verify", baseline_url, url, "--model", "tiny", "--budget", "small", "--no-logprobs"]
        result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 3, result.stderr  # the same model, but 12 tasks cannot confirm equivalence
    doc = json.loads(result.stdout)
    assert doc["logprob_distance"] is None
    assert "log-probabilities not asked for (--no-logprobs): the sampled texts alone decide" in doc["notes"]
    procedure = doc["procedure"]
    k, n = SAMPLED_ALONE["small"]
    assert procedure["sampled_alone"] == {"pair": ALONE_PAIR, "different": k, "runs": n}
    assert (
        procedure["power"] == describe_alone((k, n))
        and f"in {k} of {n} calibration runs" in procedure["power"]
    )
    assert f"power: {procedure['power']}" in result.stderr  # the card
    assert f"<li>power: {procedure['power']}</li>" in verify_section(doc)  # the page


def test_cli_errors_are_one_line_exit_2(baseline_url: str) -> None:
    result = CliRunner().invoke(main, ["verify", baseline_url, "--model", "tiny"])
    assert result.exit_code == 2 and "both" in result.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        result = CliRunner().invoke(
            main, ["verify", baseline_url, dead, "--model", "tiny", "--budget", "2x2x4"]
        )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: endpoint 'candidate'") and dead in result.stderr
    assert result.stderr.count("\n") == 1


def test_budget_syntax_is_checked() -> None:
    result = CliRunner().invoke(main, ["verify", "--budget", "lots"])
    assert result.exit_code == 2 and "--budget" in result.stderr


def test_endpoints_file_gives_each_side_its_own_request_fields(
    baseline_url: str, talkative: Path, tmp_path: Path
) -> None:
    """One endpoint against itself with one body field changed (as reasoning on against off would be):
    the candidate's temperature 0.8 overrides what verify asks for, and is found."""
    toml = tmp_path / "pair.toml"
    toml.write_text(
        f'[baseline]\nbase_url = "{baseline_url}"\nmodel = "tiny"\n\n'
        f'[candidate]\nbase_url = "{baseline_url}"\nmodel = "tiny"\nbody = {{ temperature = 0.8 }}\n'
    )
    result = CliRunner().invoke(main, ["verify", "--endpoints", str(toml), "--json"])
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "different" and doc["candidate"]["name"] == "candidate"
    toml.write_text(f'[baseline]\nbase_url = "{baseline_url}"\nmodel = "tiny"\n')
    result = CliRunner().invoke(main, ["verify", "--endpoints", str(toml)])
    assert result.exit_code == 2 and "[candidate]" in result.stderr and result.stderr.count("\n") == 1


def test_failed_requests_are_data_and_too_many_make_it_inconclusive(baseline_url: str) -> None:
    """A candidate behind a proxy that answers two of every three requests with a 500, once detection
    has passed: the run ends with a verdict that says why, not with an error."""
    from flaky_proxy import flaky_proxy

    with flaky_proxy(baseline_url, healthy=6, fail_every=3) as url:
        config = VerifyConfig(BUDGETS["small"])
        result = asyncio.run(
            verify(Endpoint("baseline", baseline_url, "tiny"), Endpoint("candidate", url, "tiny"), config)
        )
    assert result.verdict == "inconclusive"
    (reason,) = [r for r in result.decision.reasons if "requests failed" in r]
    assert reason.startswith("candidate: ") and "http_500" in reason
