"""``serve --compile off|background|wait``: when the forward passes start running through torch.compile.

- ``off``: eager, always.
- ``wait``: compile before serving (minutes the first time; ~40 s once the cache holds the code).
- ``background`` (the default): serve eagerly at once. Where the engine's cache folder
  (`compile_cache`) holds no complete compile, a child process at the lowest CPU priority fills it
  first (its own interpreter: tracing there does not hold up this one's); then `compile_cache.compile_aside`
  makes this process's graphs from that cache and swaps them in between two generations. A failed or
  killed child leaves the server serving eagerly, says so, and leaves no marker of completion. The
  child runs in a process group of its own, which the server ends whole when it stops (Ctrl-C or
  SIGTERM); a server killed outright takes the child with it (`precompile`: the parent-death signal).

The swap changes the served identity: ``system_fingerprint`` gains ``-compiled``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from lossless.engine.compile_cache import CompileCache, compile_aside, compile_cache
from lossless.engine.engine import Engine
from lossless.models import home
from lossless.server.http.app import system_fingerprint
from lossless.server.options import ServeOptions


def engine_cache(engine: Engine) -> CompileCache:
    import torch

    return compile_cache(engine, home(), torch.get_num_threads())


def compile_now(engine: Engine, cache: CompileCache | None = None) -> float:
    """``--compile wait``: compile through the engine's cache folder (or ``cache``) and mark it complete.
    Seconds."""
    cache = cache or engine_cache(engine)
    cache.use()
    seconds = engine.compile()
    cache.mark_complete(seconds)
    return seconds


class BackgroundCompile:
    """``--compile background`` for one engine, in a daemon thread; `stop` ends the child, if any."""

    def __init__(self, engine: Engine, config: ServeOptions, say: Callable[[str], None]) -> None:
        self.engine, self.config, self.say = engine, config, say
        self.cache = engine_cache(engine)
        self.child: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="lossless-compile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the child and every process it started (its process group: inductor's compile workers)."""
        self._stopping = True
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended just now
                os.killpg(self.child.pid, signal.SIGKILL)
            self.child.wait()

    def _run(self) -> None:
        start = time.perf_counter()
        try:
            self.cache.use()
            if self.cache.complete() is None and not self._fill_cache():
                return
            if self._stopping:
                return
            compile_aside(self.engine)
            self.say(
                f"lossless: compiled forward passes in use, {time.perf_counter() - start:.0f} s after "
                f"start (system_fingerprint {system_fingerprint(self.engine)})"
            )
        except Exception as exc:  # whatever failed, the eager path goes on serving
            self.say(f"lossless: background compile failed ({type(exc).__name__}: {exc}); serving eagerly")

    def _fill_cache(self) -> bool:
        """Run the child that compiles into the cache folder; True when it marked the folder complete."""
        log = self.cache.folder / "compile.log"
        # the folder goes with the options: a key computed again there could differ (an edited source)
        order = {"options": asdict(self.config), "folder": str(self.cache.folder), "parent": os.getpid()}
        argv = [sys.executable, "-m", "lossless.server.precompile", json.dumps(order)]
        with log.open("wb") as out:  # a group of its own, which `stop` ends whole
            self.child = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, process_group=0
            )
        self.say(
            f"lossless: compiling the forward passes in the background (pid {self.child.pid}, "
            f"into {self.cache.folder}); serving eagerly until they are ready"
        )
        code = self.child.wait()
        if self._stopping:
            return False
        if code != 0 or self.cache.complete() is None:
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}: {_last_line(log)}"
            self.say(f"lossless: background compile failed ({how}); serving eagerly")
            return False
        return True


def child_config(config: ServeOptions, engine: Engine) -> ServeOptions:
    """What the child compiles: ``config`` made explicit (the checkpoint's path, the thread count), so
    that its engine, and so its cache folder, are this server's (``engine``, loaded from a file)."""
    import torch

    assert engine.source is not None
    return replace(config, model=str(engine.source), threads=torch.get_num_threads())


def _last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1][:200] if lines else "no output"
