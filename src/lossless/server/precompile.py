"""The child process of ``serve --compile background``: load the engine exactly as the server did (its
options, made explicit, and its cache folder, as JSON in argv[1]), compile it into that folder, mark the
folder complete, exit. At the lowest CPU priority: the server it works for comes first; and it ends when
that server does, however the server ended (Linux's parent-death signal: a server killed with SIGKILL
never gets to stop it)."""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

from lossless.engine.torch_thread import in_fresh_thread
from lossless.server.compiling import compile_now, engine_cache
from lossless.server.main import load_model
from lossless.server.options import ServeOptions


def main(argv: list[str]) -> int:
    os.nice(19)
    order = json.loads(argv[1])
    _end_with(order.get("parent"))
    loaded = load_model(replace(ServeOptions(**order["options"]), compile="off"))
    engine = loaded.engine
    cache = replace(engine_cache(engine), folder=Path(order["folder"]))
    seconds = in_fresh_thread(lambda: compile_now(engine, cache), name="lossless-compile")
    print(f"compiled in {seconds:.0f} s", flush=True)
    return 0


def _end_with(parent: int | None) -> None:
    """Be killed when the thread that started this process ends (it waits for this one until then)."""
    if parent is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the server had gone before the signal was asked for
        sys.exit(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
