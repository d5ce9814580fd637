"""The child process of ``serve --compile background``: load the engine exactly as the server did (its
options, made explicit, and its cache folder, as JSON in argv[1]), compile it into that folder, mark the
folder complete, exit. At the lowest CPU priority: the server it works for comes first."""

from __future__ import annotations

import json
import os
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
    loaded = load_model(replace(ServeOptions(**order["options"]), compile="off"))
    engine = loaded.engine
    cache = replace(engine_cache(engine), folder=Path(order["folder"]))
    seconds = in_fresh_thread(lambda: compile_now(engine, cache), name="lossless-compile")
    print(f"compiled in {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
