"""`lossless inspect` while other clients load the server (issue #23's "background load of 4 streams").

    python benchmarks/inspect_under_load.py [--configs none,ngram,dspark,llama] [--out DIR]

For each configuration a fresh server starts on 127.0.0.1: `lossless serve` plainly, with
``--speculative ngram`` or ``dspark``, and llama.cpp's server (llama-cpp-python, one thread). A
``lossless bench`` with 4 concurrent streams (short story prompts, 32 output tokens each) runs against it
for the whole card, and ``lossless inspect --no-precision`` measures it meanwhile; then the load stops.
Prints each card's speculation verdict, drafter, rounds, why the rounds stopped, and wall time. Both our
server and llama-cpp-python generate one request at a time, so the load queues ahead of the card's
requests rather than sharing steps with them; what it tests is that queueing (waits before the first
token, bursts of other streams) does not read as speculation, and what it costs in time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

from lossless.models import resolve
from support import LOSSLESS, MODEL, LlamaCppServer, serve_lossless


def card(url: str, model: str, out: Path, name: str, budget: float) -> dict[str, object]:
    load = subprocess.Popen(
        [
            *LOSSLESS,
            "bench",
            url,
            "--model",
            model,
            "--concurrency",
            "4",
            "--duration",
            str(budget + 300),
            "--max-tokens",
            "32",
            "--out",
            str(out / f"{name}-load"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(5)  # the load is running before the card starts
        start = time.monotonic()
        argv = [
            *LOSSLESS,
            "inspect",
            url,
            "--model",
            model,
            "--no-precision",
            "--budget",
            str(budget),
            "--json",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=budget + 600)
        wall = time.monotonic() - start
    finally:
        load.terminate()
        load.wait(timeout=60)
    if done.returncode != 0:
        return {"name": name, "error": done.stderr.strip()[-400:]}
    (out / f"{name}.json").write_text(done.stdout)
    c = json.loads(done.stdout)["cards"][0]
    spec = c["speculative_decoding"]
    return {
        "name": name,
        "verdict": spec["verdict"],
        "drafter": spec.get("drafter"),
        "rounds": c["budget"]["rounds"],
        "stopped": c["budget"]["stopped"],
        "wall_s": round(wall, 1),
        "note": spec.get("note"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="none,ngram,dspark,llama,llama-queued")
    parser.add_argument("--budget", type=float, default=600.0, help="inspect --budget per card")
    parser.add_argument("--out", type=Path, default=Path("inspect-under-load"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.configs.split(","):
        with ExitStack() as stack:
            if name.startswith("llama"):
                # llama-cpp-python cuts a running stream short when another request arrives, unless
                # told not to: "llama" keeps its default, "llama-queued" queues them
                extra = ["--interrupt_requests", "false"] if name == "llama-queued" else []
                server = stack.enter_context(LlamaCppServer(Path(resolve(None)), extra=extra))
                url, model = server.url, "smol"
            else:
                proc, url = serve_lossless("--speculative", name)
                stack.callback(proc.wait, 30)
                stack.callback(proc.terminate)
                model = MODEL
            print(json.dumps(card(url, model, args.out, name, args.budget)), flush=True)


if __name__ == "__main__":
    main()
