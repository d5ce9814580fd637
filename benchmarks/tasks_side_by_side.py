"""Tasks side by side on local servers (issue #22's proof): the embedded model served plainly and
speculatively, and llama.cpp's server on the same GGUF, on the same tasks.

    python benchmarks/tasks_side_by_side.py [--bfcl-limit 100] [--out DIR]

Three runs of ``lossless tasks``, greedy, each a pair (baseline first):
    tools     the built-in ``tools`` set (lookup 0.2 s, calculator 0.1 s a call), ``--tool-choice
              required-first`` (SmolLM2 answers in text under ``auto``): ours plain -> ours speculative.
              Tools take time here, so the task-time ratio should lie nearer 1 than the output-speed ratio.
    bfcl      ``bfcl-simple`` (first N), ``--tool-choice required``, ours plain -> ours speculative:
              greedy speculative decoding keeps the plain output, so success should come out equivalent.
    copy      a task file written here: a ``fetch_article`` tool that answers after 2 s (a web search's
              latency) with a made-up paragraph, which the model is asked to quote; ``required-first``;
              ours plain -> ours with n-gram prompt lookup (``--speculative ngram``), which speeds up
              copying. Tools take time here, and speculation has something to speed up.
    llama     the ``tools`` set, ``--tool-choice auto`` (llama-cpp-python's ``chatml-function-calling``
              format calls tools under auto, answers ``required`` with a 500, and streams nothing at all when
              tools are given: a 200 with no event), not streamed, llama.cpp -> ours plain. llama-cpp-python's
              wrapper, not llama.cpp's own llama-server: with --jinja, llama-server reads tool calls only in
              the formats its template analysis knows, and SmolLM2's template has none (probe: "tools
              unsupported"), so it would answer every task in text.
    humaneval HumanEval's first N problems (``--humaneval-limit``, at most 384 tokens an answer), no tools:
              llama.cpp's own llama-server -> ours plain, the same GGUF; it is sent ``repeat_penalty:
              1.0`` (llama-cpp-python's default, 1.1, changed even a greedy answer).
Greedy, at most 160 output tokens per model call unless said. Each run's table goes to DIR/<run>.txt, its
result to DIR/<run>/tasks.json and its page to DIR/<run>.html; a summary is printed.
llama.cpp runs with one thread (with two on two shared cores its threads spin-wait:
docs/results/2026-12-02-inspect.md).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from lossless.models import resolve
from support import LOSSLESS, MODEL, LlamaCppServer, LlamaServer, serve_lossless

ARTICLES = {
    "lighthouse": "The Varnholm lighthouse was lit in 1871 and has never gone dark since. Its keeper, Ida "
    "Brandt, logged every ship that passed for forty years. The log fills twelve leather volumes.",
    "glacier": "The Selvik glacier loses about nine metres of ice each summer. Researchers mark its edge "
    "with orange stakes every June. The oldest stake now stands four hundred metres from the ice.",
    "bakery": "The Kessler bakery opens at four in the morning and sells out by nine. Its rye loaf uses a "
    "starter kept alive since 1952. Customers queue in the snow for it every winter.",
    "railway": "The Oberwald railway climbs eleven hundred metres in nineteen kilometres. Its trains use a "
    "toothed rack between the rails on the steepest parts. The line closes when snow covers the rack.",
    "orchard": "The Marlow orchard grows forty kinds of apple on six hectares. Half of the trees are older "
    "than a century. Each October the village presses their fruit into cider together.",
    "bridge": "The Tarnow bridge has carried traffic across the river since 1903. Its steel arches were "
    "riveted by hand in a single summer. The bridge is repainted green every twenty years.",
    "library": "The Hollis library lends tools as well as books. Its members borrow drills, ladders and "
    "sewing machines for a week at a time. The tool shelf is busiest in spring.",
    "harbour": "The Pellan harbour shelters forty fishing boats in winter storms. Its stone wall was "
    "raised by two metres after the flood of 1962. Seals rest on the wall at low tide.",
}


def copy_tasks(path: Path, latency_s: float = 2.0) -> Path:
    """The ``copy`` run's task file: fetch a paragraph (slowly), then quote it."""
    tool = {
        "type": "function",
        "function": {
            "name": "fetch_article",
            "description": "Fetch the short encyclopedia article about a topic.",
            "parameters": {
                "type": "object",
                "properties": {"topic": {"type": "string", "enum": sorted(ARTICLES)}},
                "required": ["topic"],
                "additionalProperties": False,
            },
        },
        "latency_s": latency_s,
        "results": [{"arguments": {"topic": t}, "result": text} for t, text in ARTICLES.items()],
        "default": "no such article",
    }
    lines = []
    for topic, text in ARTICLES.items():
        second = text.split(". ")[1].split()[-1]  # a word the quote must contain
        ask = f"Fetch the article about the {topic} and quote it word for word."
        lines.append(
            {
                "id": f"copy-{topic}",
                "messages": [{"role": "user", "content": ask}],
                "tools": [tool],
                "checker": {"kind": "regex", "pattern": re.escape(second), "ignore_case": True},
                "limits": {"max_steps": 3, "max_tokens": 512, "max_seconds": 300},
            }
        )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


Endpoint = tuple[str, str, str]  # name, URL, model


def tasks(name: str, endpoints: list[Endpoint], out: Path, *flags: str, body: str = "") -> dict[str, Any]:
    """``lossless tasks`` on (name, URL, model) endpoints, the first the baseline (sent ``body``, a TOML
    inline table, if given)."""
    toml = out / f"{name}.toml"
    first = f"body = {body}\n" if body else ""
    toml.write_text(
        "".join(
            f'[[endpoint]]\nname = "{n}"\nbase_url = "{u}"\nmodel = "{m}"\n'
            + (first if i == 0 else "")
            + "\n"
            for i, (n, u, m) in enumerate(endpoints)
        )
    )
    argv = [
        *LOSSLESS,
        "tasks",
        "--endpoints",
        str(toml),
        "--temperature",
        "0",
        "--max-tokens",
        "160",
        "--json",
    ]
    argv += ["--out", str(out / name), "--html", str(out / f"{name}.html"), *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    (out / f"{name}.txt").write_text(done.stderr)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def summary(name: str, doc: dict[str, Any]) -> None:
    for e in doc["endpoints"]:
        s, parts = e["success_rate"], e["mean_parts_s"]
        print(
            f"{name}: {e['name']}: success {e['successes']}/{e['runs']} ({s}); mean time per success "
            f"{e['mean_time_per_success']}; output speed {e['output_speed']}; mean parts {parts}; "
            f"ends {e['ends']}"
        )
    for c in doc["comparisons"]:
        print(
            f"{name}: {c['candidate']} vs {c['baseline']}: {c['verdict']} (difference "
            f"{c['difference']:+.3f}, 90% CI {c['ci90']}, McNemar p {c['p_mcnemar']:.3g}, both "
            f"{c['both']}, only baseline {c['only_baseline']}, only candidate {c['only_candidate']}); "
            f"{c['line']}; task time ratio {c['task_time_ratio']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bfcl-limit", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("tasks-side-by-side"))
    parser.add_argument("--humaneval-limit", type=int, default=100)
    parser.add_argument("--runs", default="tools,bfcl,copy,llama,humaneval")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = args.runs.split(",")
    plain, plain_url = serve_lossless()
    spec, spec_url = serve_lossless("--speculative", "dspark")
    try:
        ours = [("plain", plain_url, MODEL), ("speculative", spec_url, MODEL)]
        if "tools" in runs:
            flags: tuple[str, ...] = ("--set", "tools", "--tool-choice", "required-first")
            summary("tools", tasks("tools", ours, args.out, *flags))
        if "bfcl" in runs:
            flags = ("--set", "bfcl-simple", "--limit", str(args.bfcl_limit), "--tool-choice", "required")
            summary("bfcl", tasks("bfcl", ours, args.out, *flags))
        if "copy" in runs:
            ngram, ngram_url = serve_lossless("--speculative", "ngram")
            try:
                pair = [("plain", plain_url, MODEL), ("ngram", ngram_url, MODEL)]
                flags = ("--set", str(copy_tasks(args.out / "copy.jsonl")), "--tool-choice", "required-first")
                summary("copy", tasks("copy", pair, args.out, *flags))
            finally:
                ngram.terminate()
                ngram.wait(timeout=30)
        if "llama" in runs:
            extra = ["--chat_format", "chatml-function-calling"]
            with LlamaCppServer(Path(resolve(None)), extra=extra) as llama:
                pair = [("llama.cpp", llama.url, "smol"), ("plain", plain_url, MODEL)]
                flags = ("--set", "tools", "--tool-choice", "auto", "--no-stream")
                summary("llama", tasks("llama", pair, args.out, *flags))
        if "humaneval" in runs:
            with LlamaServer(Path(resolve(None)), threads=1, metrics=False) as server:
                pair = [("llama-server", server.url, server.model_id), ("plain", plain_url, MODEL)]
                flags = ("--set", "humaneval", "--limit", str(args.humaneval_limit), "--max-tokens", "384")
                doc = tasks("humaneval", pair, args.out, *flags, body="{ repeat_penalty = 1.0 }")
                summary("humaneval", doc)
    finally:
        for p in (plain, spec):
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
