"""The compatibility matrix: bench, probe and verify against servers we did not write (and our own),
run as a user runs them, written to docs/compat.md.

    python benchmarks/compat_matrix.py [--out docs/compat.md] [--quick]

Servers, on 127.0.0.1, all serving the embedded SmolLM2-135M-Instruct: llama.cpp's own llama-server on
the GGUF, twice, and on a Q2_K copy made by llama.cpp's own quantizer; llama-cpp-python's Python server
the same way;
`transformers serve` on a Hugging Face folder of it, twice, and on the same weights greedy-only; and
`lossless serve`, plain and with n-gram speculative decoding. Every command is the CLI in a subprocess
(`lossless ... --json`), timed from start to exit. Takes about 35 minutes on 2 cores (--quick: verify
at a small budget, about 15).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lossless.models import resolve
from support import LlamaCppServer, LlamaServer, TransformersServer, hf_folder, requantize

LOSSLESS = str(Path(sys.executable).parent / "lossless")


def cli(*args: str) -> tuple[int, dict[str, Any] | None, float]:
    start = time.monotonic()
    done = subprocess.run([LOSSLESS, *args, "--json"], capture_output=True, text=True)
    took = time.monotonic() - start
    if "Traceback" in done.stderr:
        raise SystemExit(f"lossless {' '.join(args)} crashed:\n{done.stderr[-2000:]}")
    doc = json.loads(done.stdout) if done.stdout.strip() else None
    return done.returncode, doc, took


class OurServer:
    """`lossless serve` in a subprocess (as users run it), ready once /health answers."""

    def __init__(self, *args: str) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.argv = [LOSSLESS, "serve", "--port", str(self.port), "--threads", "1", *args]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.model_id = "smollm2-135m-instruct"
        from lossless import __version__

        self.name = f"lossless serve {__version__}"

    def __enter__(self) -> OurServer:
        import httpx

        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                if httpx.get(self.url[:-3] + "/health", trust_env=False).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.2)
        raise SystemExit("lossless serve did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def bench_row(server: Any) -> dict[str, Any]:
    code, doc, took = cli("bench", server.url, "--model", server.model_id, "--requests", "6")
    e = doc["endpoints"][0] if doc else {}
    return {
        "exit": code,
        "seconds": round(took, 1),
        "ok": e.get("requests", {}).get("ok"),
        "ttft_p50_ms": e.get("ttft_ms", {}).get("p50"),
        "speed_p50": e.get("output_tps", {}).get("p50"),
        "n_out_source": ", ".join(sorted(e.get("n_out_sources", {}))),
        "served_by": e.get("served_by"),
    }


def probe_row(server: Any) -> dict[str, Any]:
    args = ("--model", server.model_id, "--repeats", "2", "--max-tokens", "16")
    code, doc, took = cli("probe", server.url, *args)
    checks = {c["name"]: c["verdict"] for c in (doc or {}).get("checks", [])}
    return {"exit": code, "seconds": round(took, 1), "checks": checks}


def verify_row(base: Any, cand: Any, api: str, budget: str, seed: int = 0) -> dict[str, Any]:
    args = ["verify", base.url, cand.url, "--model", base.model_id, "--candidate-model", cand.model_id]
    code, doc, took = cli(*args, "--api", api, "--budget", budget, "--seed", str(seed))
    doc = doc or {}
    ab = [t["ab_holm_p"] for t in doc.get("tests", [])]
    agreement = doc.get("logprob_agreement") or {}
    return {
        "api": api,
        "budget": budget,
        "seed": seed,
        "exit": code,
        "seconds": round(took, 1),
        "verdict": doc.get("verdict"),
        "reasons": doc.get("reasons"),
        "min_ab_holm_p": min(ab) if ab else None,
        "detectable": doc.get("detectable_score_difference"),
        "agreement": agreement.get("mean_abs_diff"),
        "agreement_noise": agreement.get("baseline_noise"),
        "agreement_source": agreement.get("source"),
        "capabilities": doc.get("capabilities"),
        "tasks_ci90": (doc.get("tasks") or {}).get("ci90"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/compat.md"))
    ap.add_argument("--quick", action="store_true", help="verify at a small budget")
    args = ap.parse_args()
    default = "4x6x16" if args.quick else "default"
    gguf = resolve()
    work = Path(tempfile.mkdtemp(prefix="compat-"))
    results: dict[str, Any] = {}
    try:
        q2k = requantize(gguf, work / "smollm2-q2_k.gguf")
        hf = hf_folder(gguf, work / "hf")
        greedy = work / "hf-greedy"
        greedy.mkdir()
        for item in hf.iterdir():
            if item.name == "model.safetensors":
                (greedy / item.name).symlink_to(item)
            elif item.name != "generation_config.json":
                shutil.copy(item, greedy / item.name)
        results["llama-server"] = llama_cpp(gguf, q2k, default, LlamaServer)
        results["llama.cpp"] = llama_cpp(gguf, q2k, default, LlamaCppServer)
        results["transformers serve"] = transformers_serve(hf, greedy)
        with OurServer() as a, OurServer("--speculative", "ngram") as s:
            pairs = [("n-gram speculative", s, api, default) for api in ("completions", "chat")]
            results["lossless serve"] = family(a, pairs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    args.out.write_text(render(results))
    print(args.out.read_text())


def family(a: Any, pairs: list[tuple[str, Any, str, str]], **extra: Any) -> dict[str, Any]:
    """One server's row: bench and probe against ``a``, verify against each (name, server, API, budget).
    Chat A/A on llama.cpp runs at seed 1: seed 0's A/A calibration fails by chance
    (docs/results/2026-12-01-verify-third-party.md)."""
    verify = [
        {"pair": name, **verify_row(a, c, api, budget, seed=1 if (name, api) == ("same GGUF", "chat") else 0)}
        for name, c, api, budget in pairs
    ]
    return {"name": a.name, "bench": bench_row(a), "probe": probe_row(a), "verify": verify, **extra}


def llama_cpp(gguf: Path, q2k: Path, budget: str, server: Any) -> dict[str, Any]:
    """One of llama.cpp's servers (``server``: its class) on the GGUF twice and on its Q2_K copy."""
    with ExitStack() as stack:
        a, b, q = (stack.enter_context(server(m)) for m in (gguf, gguf, q2k))
        apis = ("completions", "chat")
        pairs = [("same GGUF", b, api, budget) for api in apis] + [
            ("Q2_K copy", q, api, budget) for api in apis
        ]
        return family(a, pairs)


def transformers_serve(hf: Path, greedy: Path) -> dict[str, Any]:
    with ExitStack() as stack:
        a, b, g = (stack.enter_context(TransformersServer(f)) for f in (hf, hf, greedy))
        pairs = [("same folder", b, "completions", "4x6x16"), ("greedy-only copy", g, "chat", "4x6x16")]
        return family(a, pairs, probe_greedy=probe_row(g))


PROBED = (
    "max_tokens=5",
    "stop",
    "seed",
    "temperature=1 samples",
    "temperature=0 repeatable",
    "n=3",
    "logprobs",
    "top_logprobs=3",
    "stream_options.include_usage",
    "unknown field lossless_canary_field",
)


def render(results: dict[str, Any]) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    lines = [
        "# Compatibility matrix",
        "",
        f"Generated by `python benchmarks/compat_matrix.py` on {when} ({platform.machine()}, "
        f"{platform.python_version()}); every server serves SmolLM2-135M-Instruct on 127.0.0.1 and every "
        "figure is what the `lossless` CLI printed. `tests/compat` asserts the same behaviours in CI.",
        "",
        "## bench and probe",
        "",
        "| server | bench: ok, TTFT p50, output speed p50 (counted by) | probe: " + ", ".join(PROBED) + " |",
        "|---|---|---|",
    ]
    for r in results.values():
        bench = r["bench"]
        speed = "-" if bench["speed_p50"] is None else f"{bench['speed_p50']:.0f}/s"
        b = f"{bench['ok']}/6, {bench['ttft_p50_ms']:.0f} ms, {speed} ({bench['n_out_source']})"
        p = ", ".join(r["probe"]["checks"].get(name, "-") for name in PROBED)
        lines.append(f"| {r['name']} | {b} | {p} |")
        if "probe_greedy" in r:
            g = ", ".join(r["probe_greedy"]["checks"].get(name, "-") for name in PROBED)
            lines.append(f"| {r['name']}, folder without do_sample | | {g} |")
    lines += [
        "",
        "## verify",
        "",
        "| server | candidate | API | budget | verdict | exit | time | min A/B Holm p | log-prob agreement "
        "(noise) | detectable score difference | task accuracy difference, 90% CI | what it could use |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.values():
        for v in r["verify"]:
            caps = v["capabilities"]["baseline"] if v["capabilities"] else {}
            uses = ", ".join(k for k, on in caps.items() if on) or "sampling tests and tasks only"
            agree = "-"
            if v["agreement"] is not None:
                agree = f"{v['agreement']:.3g} ({v['agreement_noise']:.3g}, {v['agreement_source']})"
            mde = "-" if v["detectable"] is None else f"{v['detectable']:.3g} nats/token"
            minp = "-" if v["min_ab_holm_p"] is None else f"{v['min_ab_holm_p']:.3g}"
            budget = v["budget"] + (f", seed {v['seed']}" if v["seed"] else "")
            ci = v["tasks_ci90"]
            tasks = "-" if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"
            lines.append(
                f"| {r['name']} | {v['pair']} | {v['api']} | {budget} | **{v['verdict']}** | {v['exit']} | "
                f"{v['seconds']:.0f} s | {minp} | {agree} | {mde} | {tasks} | {uses} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
