"""One request's work for the engine thread, and the events it hands back: what the worker
(``http/worker.py``) and the writers of every API's answer (``openai/replies.py``, ``dialects/``) share.

The event loop never waits on the engine: each ``EngineJob`` carries its loop and an ``asyncio.Queue``,
and the worker hands every event over with ``loop.call_soon_threadsafe``. Every job's events end with
exactly one ``Finished`` or ``Failed``, even a job cancelled while it was still queued, so a handler
waiting on its queue always wakes up.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lossless.engine.engine import Delta, TokenLogprob
from lossless.engine.model.sampling import SamplingParams


@dataclass(frozen=True)
class Started:
    queue_s: float  # admission -> the worker picked the job up


@dataclass(frozen=True)
class Scored:
    logprobs: list[TokenLogprob | None]  # the prompt's, for echo


@dataclass(frozen=True)
class Finished:
    finish_reason: str
    completion_tokens: int
    prefill_s: float | None  # generation start -> first delta; None when nothing was generated
    decode_s: float  # generation start -> last delta
    stats: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    message: str
    status: int = 500  # what a client that has no response yet is answered with


Event = Started | Scored | Delta | Finished | Failed


@dataclass(eq=False)  # identity: withdraw() finds a job in the queue by it
class EngineJob:
    prompt_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    score_top: int | None = None  # score the prompt first (echo with logprobs) with this many alternatives
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    admitted: float = field(default_factory=time.perf_counter)

    def emit(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the loop is closed: the server is going down, nobody is listening
            self.cancel.set()
