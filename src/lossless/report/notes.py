"""What the tables leave out, in sentences: per endpoint and load, the speculative counters, goodput and
SLO attainment, prompt caching, token-exact lengths, conversations, cost, stalls and token counting, a
saturated server, probes, new connections' cost, and who answered. The terminal prints them under its
table; the HTML report lists them under its own."""

from __future__ import annotations

from collections.abc import Mapping

from lossless.analyze import METRIC, EndpointStats, GroupStats
from lossless.analyze.summary import LengthCheck, SessionStats


def endpoint_notes(e: EndpointStats) -> list[str]:
    notes, g = [], e.overall
    if sp := e.speculative:
        length = sp.mean_accepted_length
        tail = f", mean accepted length {length:.2f}" if length else ""
        notes.append(f"acceptance {sp.acceptance_rate:.1%}{tail}")
    if g.throughput.goodput_requests_per_s is not None:
        notes.append(f"goodput {g.throughput.goodput_requests_per_s:.2f} req/s")
    if met := g.slo_attainment:
        each = ", ".join(f"{k} {v:.0%}" for k, v in met.items() if k != "all")
        notes.append(f"SLO met by {met['all']:.0%} of requests ({each})")
    if c := g.prompt_cache:
        share = (
            f", {c.cached_tokens / c.prompt_tokens:.0%} of prompt tokens cached" if c.prompt_tokens else ""
        )
        hit, miss = (METRIC["ttft_ms"].fmt(d.p50, unit=True) for d in (c.ttft_hit, c.ttft_miss))
        notes.append(
            f"prompt cache: {c.hits}/{c.reporting} requests hit{share}; TTFT p50 {hit} on a hit, {miss} "
            "on a miss"
        )
    if n := g.lengths:
        notes.append(lengths_note(n))
    if s := g.sessions:
        notes.append(_sessions(s))
    if g.cost_per_ok_request_usd is not None:
        notes.append(f"${g.cost_per_ok_request_usd:.6f} per successful request")
    if g.stalls.count:
        notes.append(f"{g.stalls.count} stalls")
    if e.saturation is not None and e.saturation.saturated:
        notes.append(e.saturation.reason)
    if e.probes is not None:
        notes.append(e.probes.text)
    if said := server_metrics_note(e):
        notes.append(said)
    for header, d in g.server_ms.items():  # what the server (or a gateway before it) says it spent
        if d.p50 is not None:
            notes.append(
                f"server timing {header}: p50 {d.p50:.0f} ms, max {d.max or 0:.0f} ms ({d.n} answers)"
            )
    if chunks := g.n_out_sources.get("chunks", 0):
        notes.append(
            f"{chunks} requests counted in chunks, not tokens (no usage from the server and no tokenizer "
            "found: --tokenizer, or tokenizer = ... in the endpoint file, counts tokens), so their TPOT is "
            "time per chunk and their speed chunks/s"
        )
    if uncounted := g.n_out_sources.get("none", 0):
        notes.append(
            f"output tokens unknown for {uncounted} requests (no usage from the server; --tokenizer counts "
            "the text), so no TPOT or output speed for them"
        )
    if said := connections_note(g):  # last: the rarest thing people look for
        notes.append(said)
    return notes


def connections_note(g: GroupStats) -> str | None:
    """New connections' phases (p50) and TTFB on new against reused ones, when a new one was timed."""
    new, reused = g.metrics.get("ttfb_new_ms"), g.metrics.get("ttfb_reused_ms")
    if new is None or not new.n:
        return None
    phases = [
        f"{m.label} {m.fmt(d.p50)} ms"
        for m in (METRIC[k] for k in ("dns_ms", "connect_ms", "tls_ms"))
        if (d := g.metrics.get(m.key)) is not None and d.n and d.p50 is not None
    ]
    ttfb = METRIC["ttfb_new_ms"]
    said = f"connections: {new.n} new" + (f" ({', '.join(phases)}, p50)" if phases else "")
    if reused is not None and reused.n:
        return (
            said
            + f", {reused.n} reused; TTFB p50 {ttfb.fmt(new.p50)} ms new, {ttfb.fmt(reused.p50)} ms reused"
        )
    return said + f"; TTFB p50 {ttfb.fmt(new.p50)} ms"


def server_metrics_note(e: EndpointStats, most: int = 6) -> str | None:
    """The server's own latency histograms over the run (its /metrics), in seconds as exported."""
    if e.server_metrics is None or not e.server_metrics.means:
        return None
    means = [f"{name} {value:.4g}" for name, value in list(e.server_metrics.means.items())[:most]]
    more = len(e.server_metrics.means) - most
    return (
        "server /metrics, means over the run: " + ", ".join(means) + (f" (+{more} more)" if more > 0 else "")
    )


def _sessions(s: SessionStats) -> str:
    said = f"conversations: {s.completed}/{s.sessions} completed, {s.turns_ok} turns answered"
    if s.task_s.p50 is None or s.model_s.p50 is None:
        return said
    task, model = s.task_s, s.model_s
    return (
        f"{said}; task time p50 {task.p50:.2f} s, p95 {task.p95:.2f} s, of which waiting for answers "
        f"p50 {model.p50:.2f} s"
    )


def served_by_note(g: GroupStats) -> str | None:
    """ "served by: model M; system_fingerprint F; server S", with counts where there are several."""

    def values(counts: Mapping[str, int]) -> str:
        if len(counts) == 1:
            return next(iter(counts))
        return ", ".join(f"{v} ({n})" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))

    who = g.served_by
    found = [("model", who.model), ("system_fingerprint", who.system_fingerprint), *who.headers.items()]
    parts = [f"{key} {values(counts)}" for key, counts in found if counts]
    return "served by: " + "; ".join(parts) if parts else None


def lengths_note(n: LengthCheck) -> str:
    outputs = f"; {n.output_exact}/{n.output_asked} outputs at the asked length" if n.output_asked else ""
    if n.input_exact == 0 and n.input_off_most == 0:  # no request came back with a prompt count to compare
        counted = f"the server reported no prompt token counts (usage) for the {n.requests} requests"
        return f"token-exact: {counted}{outputs}"
    return (
        f"token-exact: {n.input_exact}/{n.requests} prompts counted as asked by the server "
        f"(largest difference {n.input_off_most}){outputs}"
    )
