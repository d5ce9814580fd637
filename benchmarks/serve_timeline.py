"""What a user meets from launch: `lossless serve` started, the same request sent once a second, each
answer's speed and system_fingerprint printed with its time since launch (eager, the compile's twin at
work, compiled graphs in use). A second run on the same LOSSLESS_HOME shows a warm start.

    LOSSLESS_HOME=DIR python benchmarks/serve_timeline.py [--seconds 45] [-- serve flags]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import httpx

BODY = {
    "model": "smollm2-135m-instruct",
    "messages": [{"role": "user", "content": "Write a short story about a lighthouse keeper."}],
    "max_tokens": 64,
    "temperature": 0,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--port", type=int, default=8201)
    ap.add_argument("serve", nargs="*", help="more `lossless serve` flags")
    opts = ap.parse_args()
    cmd = [sys.executable, "-m", "lossless.cli", "serve", "--port", str(opts.port), *opts.serve]
    launched = time.monotonic()
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{opts.port}"
    try:
        with httpx.Client(trust_env=False, timeout=120) as http:
            while True:
                try:
                    http.get(url + "/health").raise_for_status()
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            print(f"{time.monotonic() - launched:6.1f} s  ready (/health)", flush=True)
            while (sent := time.monotonic()) - launched < opts.seconds:
                answer = http.post(url + "/v1/chat/completions", json=BODY).json()
                took = time.monotonic() - sent
                speed = answer["usage"]["completion_tokens"] / took
                print(
                    f"{sent - launched:6.1f} s  {speed:6.1f} tok/s  {answer['system_fingerprint']}",
                    flush=True,
                )
                time.sleep(max(0.0, 1.0 - took))
    finally:
        server.terminate()
        _, said = server.communicate(timeout=60)
        print(
            "".join(f"  {line}\n" for line in said.splitlines() if "compiled forward passes" in line), end=""
        )


if __name__ == "__main__":
    main()
