"""Tasks side by side on local servers (issue #22's proof): the embedded model served plainly and
speculatively, and llama.cpp's server on the same GGUF, on the same tasks.

    python benchmarks/tasks_side_by_side.py [--bfcl-limit 100] [--out DIR]

Three runs of ``lossless tasks``, greedy, each a pair (baseline first):
    tools     the built-in ``tools`` set (lookup 0.2 s, calculator 0.1 s a call), ``--tool-choice
              required-first`` (SmolLM2 answers in text under ``auto``): ours plain -> ours speculative.
              Tools take time here, so the task-time ratio should lie nearer 1 than the output-speed ratio.
    bfcl      ``bfcl-simple`` (first N), ``--tool-choice required``, ours plain -> ours speculative:
              greedy speculative decoding keeps the plain output, so success should come out equivalent.
    llama     the ``tools`` set, ``--tool-choice auto`` (llama-cpp-python's ``chatml-function-calling``
              format calls tools under auto, and answers ``required`` with a 500), llama.cpp -> ours plain.
Each run's table goes to DIR/<run>.txt and its result to DIR/<run>/tasks.json; a summary is printed.
llama.cpp runs with one thread (with two on two shared cores its threads spin-wait: README, inspect).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "support"))
from third_party import LlamaCppServer

from lossless.models import resolve

LOSSLESS = [sys.executable, "-m", "lossless.cli"]


def serve(*extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """``lossless serve`` on a free port; its URL once /v1/models answers."""
    import socket
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*LOSSLESS, "serve", "--port", str(port), *extra], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"lossless serve {' '.join(extra)} did not answer in 300 s")


def tasks(name: str, urls: list[str], out: Path, *flags: str) -> dict[str, Any]:
    argv = [*LOSSLESS, "tasks", *urls, "--model", "smol", "--temperature", "0", "--json"]
    argv += ["--out", str(out / name), *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    (out / f"{name}.txt").write_text(done.stderr)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def summary(name: str, doc: dict[str, Any]) -> None:
    for e in doc["endpoints"]:
        s, parts = e["success_rate"], e["mean_parts_s"]
        print(f"{name}: {e['name']}: success {e['successes']}/{e['runs']} ({s}); mean time per success "
              f"{e['mean_time_per_success']}; output speed {e['output_speed']}; mean parts {parts}; "
              f"ends {e['ends']}")  # fmt: skip
    for c in doc["comparisons"]:
        print(f"{name}: {c['candidate']} vs {c['baseline']}: {c['verdict']} (difference "
              f"{c['difference']:+.3f}, 90% CI {c['ci90']}, McNemar p {c['p_mcnemar']:.3g}, both "
              f"{c['both']}, only baseline {c['only_baseline']}, only candidate {c['only_candidate']}); "
              f"{c['line']}; task time ratio {c['task_time_ratio']}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bfcl-limit", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("tasks-side-by-side"))
    parser.add_argument("--runs", default="tools,bfcl,llama")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = args.runs.split(",")
    plain, plain_url = serve()
    spec, spec_url = serve("--speculative", "dspark")
    try:
        if "tools" in runs:
            summary("tools", tasks("tools", [plain_url, spec_url], args.out, "--set", "tools",
                                   "--tool-choice", "required-first"))  # fmt: skip
        if "bfcl" in runs:
            summary("bfcl", tasks("bfcl", [plain_url, spec_url], args.out, "--set", "bfcl-simple",
                                  "--limit", str(args.bfcl_limit), "--tool-choice", "required"))  # fmt: skip
        if "llama" in runs:
            extra = ["--chat_format", "chatml-function-calling"]
            with LlamaCppServer(Path(resolve(None)), extra=extra) as llama:
                summary("llama", tasks("llama", [llama.url, plain_url], args.out, "--set", "tools",
                                       "--tool-choice", "auto"))  # fmt: skip
    finally:
        for p in (plain, spec):
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
