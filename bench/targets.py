"""Ratios of each served figure to the engine and to the peers, and the pass/miss targets (docs/performance.md).

The engine reference of a scenario (bench.engine): one caller with one text (d, e-embed, i) is compared with
one batch-1 run at a time, the lowest median time; small concurrent callers (a) with the engine at batch 32,
the batch a perfect batcher would form from 32 callers; client-side batches (b, c, h) with the engine at the
same shape; chunked documents (g) with the engine at 32 x the max length, as tokens the graph ran per second
(a document's windows overlap, so the graph runs more tokens than were sent). Each reference is the faster of
the service's configuration and one run on all cores.

Each scenario runs in passes, each with its own engine reference (bench.runner.run_passes). A ratio is of the
medians over the passes; its spread is the lowest and highest of the passes' own ratios, each pass's figure
over the engine's or the peer's in the same pass.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import fields, replace
from typing import Any

from bench import report
from bench.engine import EngineBench, EnginePoint
from bench.report import PEERS, Recorder

RSS_LIMIT_MB = 600
SMALL_CALLERS_BATCH = 32
LATENCY_SLACK_MS = 1.5
# Per scenario: service texts/s over the engine reference (wall), and the engine's CPU per text over the
# service's (CPU: 1 / 1.1 for small callers is "the server's CPU per text at most 1.1x the engine's").
GOALS = {"a": 0.80, "b": 0.95, "c": 0.95, "g": 0.95, "h": 0.95}
CPU_GOALS = {"a": 1 / 1.1, "b": 0.95, "c": 0.95, "g": 0.95, "h": 0.95}
PADDING_LIMIT = 1.2  # tokens run counting padding over real tokens, where inputs are long (c, g)
PEER_GOAL = 1.00  # every scenario a peer answers: the peer trails (service over peer, medians)
PEER_SCENARIOS = ("a", "b", "c", "d", "h", "i")  # "service ÷ <peer>" targets (e, g: attnserve's alone)
LATENCY_SCENARIOS = ("d", "i")  # one request at a time: p50 within LATENCY_SLACK_MS of a batch-1 engine run


def sequential(row: dict[str, Any]) -> bool:
    """One caller, one text per request: a latency scenario."""
    return bool(row["workers"] == 1 and row["texts"] == 1)


def engine_reference(engine: EngineBench, row: dict[str, Any]) -> EnginePoint | None:
    if row["scenario"] == "e":
        return None  # the attention graph: compared with e-embed instead
    if sequential(row):
        return engine.latency(row["length"])
    if chunked(row):
        return engine.reference(SMALL_CALLERS_BATCH, row["window"])
    batch = SMALL_CALLERS_BATCH if row["texts"] == 1 else row["texts"]
    return engine.reference(batch, row["length"])


def chunked(row: dict[str, Any]) -> bool:
    """A scenario of documents over the max length, cut into windows by the service."""
    return bool(row.get("chunking"))


def describe(point: EnginePoint, latency: bool, spread: str = "") -> str:
    """The reference's shape, configuration and figure (with the passes' `spread`, report.span)."""
    if latency:
        return f"1x{point.length} one at a time, {point.config}: {point.median_s * 1000:.1f} ms{spread}"
    return f"{point.batch}x{point.length} {point.config}: {point.texts_per_s:.1f}{spread}"


def add_ratios(rec: Recorder, variant: str) -> None:
    """One variant's ratios: each pass's row against the engine reference and the peers of the same pass; then
    per scenario and server one "median" row (report.summarise) whose ratios are of the medians."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rec.of("load", variant=variant):
        groups.setdefault((row["server"], row["scenario"]), []).append(row)
    for (_, scenario), rows in groups.items():
        for row in rows:
            index = row.get("pass_index")
            points = _engine_points(rec, variant, scenario, index)
            peers = {peer: _pass(groups.get((peer, scenario), []), index) for peer in PEERS}
            _ratios(row, points[0] if points else None, peers)
    medians = {key: report.summarise(rows) for key, rows in groups.items()}
    for (_, scenario), row in medians.items():
        points = _engine_points(rec, variant, scenario)
        peers = {peer: medians.get((peer, scenario)) for peer in PEERS}
        _ratios(row, _median_point(points), peers, _engine_spread(row, points))
        rec.add("median", **{k: v for k, v in row.items() if k not in ("run", "kind", "time")})


def _ratios(row: dict[str, Any], point: EnginePoint | None, peers: dict[str, dict[str, Any] | None],
            spread: str = "") -> None:
    """Set `row`'s ratios to the engine `point` and, for the service, to each peer's row that is there."""
    if point is not None:
        _compare(row, point, spread)
    for peer, other in peers.items() if row["server"] == "service" else ():
        if other:
            row[f"vs_{peer}"] = row["texts_per_s"] / max(other["texts_per_s"], 1e-9)


def _pass(rows: list[dict[str, Any]], index: int | None) -> dict[str, Any] | None:
    return next((r for r in rows if r.get("pass_index") == index), None)


def _engine_points(rec: Recorder, variant: str, scenario: str, index: int | None = None) -> list[EnginePoint]:
    """The engine references measured for the scenario (bench.runner), of one pass or of all."""
    match = {} if index is None else {"pass_index": index}
    names = [f.name for f in fields(EnginePoint)]
    return [EnginePoint(**{n: r[n] for n in names})
            for r in rec.of("engine_ref", variant=variant, scenario=scenario, **match)]


def _median_point(points: list[EnginePoint]) -> EnginePoint | None:
    """The passes' references as one point: each figure's median, under the configuration fastest most often."""
    if not points:
        return None
    config = Counter(p.config for p in points).most_common(1)[0][0]
    figures = ("median_s", "texts_per_s", "tokens_per_s", "cpu_ms_per_text")
    medians = {name: statistics.median(getattr(p, name) for p in points) for name in figures}
    return replace(points[0], config=config, runs=sum(p.runs for p in points), **medians)


def _engine_spread(row: dict[str, Any], points: list[EnginePoint]) -> str:
    """The passes' references, lowest to highest: ms per batch-1 run for a latency scenario, else texts/s."""
    return report.span([p.median_s * 1000 if sequential(row) else p.texts_per_s for p in points])


def _compare(row: dict[str, Any], point: EnginePoint, spread: str = "") -> None:
    row["engine_ref"] = describe(point, sequential(row), spread)
    if chunked(row):  # per token the graph ran: the windows are the shape the engine is measured at
        if row.get("graph_tokens_per_s"):
            row["engine_ref"] += f" ({point.tokens_per_s:,.0f} tokens/s)"
            row["vs_engine"] = row["graph_tokens_per_s"] / point.tokens_per_s
            if row.get("cpu_ms_per_text"):
                server_ms_per_token = row["cpu_ms_per_text"] * row["texts_per_s"] / row["graph_tokens_per_s"]
                row["vs_engine_cpu"] = point.cpu_ms_per_text * point.texts_per_s / point.tokens_per_s \
                    / server_ms_per_token
        return
    row["vs_engine"] = row["texts_per_s"] / point.texts_per_s
    if row.get("cpu_ms_per_text"):
        row["vs_engine_cpu"] = point.cpu_ms_per_text / row["cpu_ms_per_text"]
    if sequential(row):
        row["over_engine_ms"] = row["p50_ms"] - point.median_s * 1000


def _one(rec: Recorder, server: str, variant: str, scenario: str) -> dict[str, Any] | None:
    """The scenario's figures over its passes: add_ratios' row of medians, or the load rows summarised where no
    ratios were added to them."""
    found = rec.of("median", server=server, variant=variant, scenario=scenario)
    rows = rec.of("load", server=server, variant=variant, scenario=scenario)
    return found[0] if found else report.summarise(rows) if rows else None


def _target(rec: Recorder, name: str, measured: str, goal: str, passed: bool) -> None:
    rec.add("target", target=name, measured=measured, goal=goal, passed=bool(passed))


def evaluate(rec: Recorder, variants: list[str], fp32: EngineBench | None) -> None:
    for variant in variants:
        for scenario, goal in GOALS.items():
            _throughput(rec, variant, scenario, goal)
            _cpu(rec, variant, scenario, CPU_GOALS[scenario])
        for scenario in PEER_SCENARIOS:
            for peer in PEERS:
                _vs_peer(rec, variant, scenario, peer)
        for scenario in LATENCY_SCENARIOS:
            _latency(rec, variant, scenario)
        _attention(rec, variant)
        for scenario in ("c", "g"):
            _padding(rec, variant, scenario)
    _int8(rec, fp32)
    _process(rec)


def _throughput(rec: Recorder, variant: str, scenario: str, goal: float) -> None:
    row = _one(rec, "service", variant, scenario)
    if row and row.get("vs_engine") is not None:
        shape = row["engine_ref"].split(":")[0]
        unit = "graph tokens/s" if chunked(row) else "texts/s"
        _target(rec, f"({scenario}) {variant} service ÷ engine {shape}, {unit}",
                report.spread(row, "vs_engine", 2, "x"), f">= {goal:.2f}x", row["vs_engine"] >= goal)


def _cpu(rec: Recorder, variant: str, scenario: str, goal: float) -> None:
    """The engine's CPU per text over the server's whole process CPU per text (event loop, tokenising,
    HTTP and graph runs): 1.00x would be a server that costs nothing beside its graph runs."""
    row = _one(rec, "service", variant, scenario)
    if row and row.get("vs_engine_cpu") is not None:
        shape = row["engine_ref"].split(":")[0]
        if chunked(row):
            unit, server = "CPU per graph token", ""
        else:
            engine_ms = row["cpu_ms_per_text"] * row["vs_engine_cpu"]
            unit, server = "CPU per text", f"; {row['cpu_ms_per_text']:.2f} ms/text, engine {engine_ms:.2f}"
        _target(rec, f"({scenario}) {variant} engine ÷ service {shape}, {unit}",
                report.spread(row, "vs_engine_cpu", 2, "x") + server, f">= {goal:.2f}x", row["vs_engine_cpu"] >= goal)


def _padding(rec: Recorder, variant: str, scenario: str) -> None:
    row = _one(rec, "service", variant, scenario)
    if row and row.get("padding_waste") is not None:
        _target(rec, f"({scenario}) {variant} padding waste, tokens run ÷ real tokens",
                report.spread(row, "padding_waste", 3), f"<= {PADDING_LIMIT:.1f}",
                row["padding_waste"] <= PADDING_LIMIT)


def _vs_peer(rec: Recorder, variant: str, scenario: str, peer: str) -> None:
    """Ahead of a peer: the service's median texts/s over the peer's."""
    row = _one(rec, "service", variant, scenario)
    if row and row.get(f"vs_{peer}") is not None:
        _target(rec, f"({scenario}) {variant} service ÷ {peer}, texts/s", report.spread(row, f"vs_{peer}", 2, "x"),
                f">= {PEER_GOAL:.2f}x", row[f"vs_{peer}"] >= PEER_GOAL)


def _latency(rec: Recorder, variant: str, scenario: str) -> None:
    row = _one(rec, "service", variant, scenario)
    if row and row.get("over_engine_ms") is not None:
        engine_ms = row["p50_ms"] - row["over_engine_ms"]
        _target(rec, f"({scenario}) {variant} one request at a time, 1 x {row['length']} tokens, p50",
                report.spread(row, "p50_ms", 1, " ms"), f"<= engine {engine_ms:.1f} + {LATENCY_SLACK_MS:g} ms",
                row["over_engine_ms"] <= LATENCY_SLACK_MS)


def _attention(rec: Recorder, variant: str) -> None:
    attention, embed = _one(rec, "service", variant, "e"), _one(rec, "service", variant, "e-embed")
    if attention and embed:
        ratio = attention["p50_ms"] / embed["p50_ms"]
        passes = zip(rec.of("load", server="service", variant=variant, scenario="e"),
                     rec.of("load", server="service", variant=variant, scenario="e-embed"), strict=False)
        each = report.span([a["p50_ms"] / b["p50_ms"] for a, b in passes], 2)
        graphs = next(iter(rec.of("served", variant=variant)), {}).get("graphs", {})
        att, fast = graphs.get("attention", "?"), graphs.get("fast", variant)
        like = "" if att == fast else f" (attention graph {att} vs embedding graph {fast}: not like with like)"
        _target(rec, f"(e) {variant} attention p50 ÷ embedding p50, same 128-token text{like}",
                f"{ratio:.2f}x{each}; {attention['p50_ms']:.1f} / {embed['p50_ms']:.1f} ms", "<= 2.00x", ratio <= 2.0)


def _int8(rec: Recorder, fp32: EngineBench | None) -> None:
    row = _one(rec, "service", "int8", "b")
    if row and fp32:
        engine = fp32.reference(32, row["length"]).texts_per_s
        ratio = row["texts_per_s"] / engine
        each = report.span([v / engine for v in row["spread"].get("texts_per_s", [])], 2)
        _target(rec, "(f) int8 service (b) ÷ fp32 engine 32x128", f"{ratio:.2f}x{each}", ">= 2.00x", ratio >= 2.0)


def _process(rec: Recorder) -> None:
    for row in rec.of("process", server="service"):
        _target(rec, f"(f) service RSS under load, {row['variant']}", f"{row['peak_rss_mb']:.0f} MB",
                f"<= {RSS_LIMIT_MB:.0f} MB", row["peak_rss_mb"] <= RSS_LIMIT_MB)
        for naive in rec.of("process", server="naive", variant=row["variant"]):  # the same sessions, opened plainly
            ratio = row["peak_rss_mb"] / naive["peak_rss_mb"]
            _target(rec, f"(f) service peak RSS ÷ the naive server's, {row['variant']}",
                    f"{ratio:.2f}x ({row['peak_rss_mb']:.0f} / {naive['peak_rss_mb']:.0f} MB)", "<= 1.00x",
                    ratio <= 1.0)
        _target(rec, f"(f) no libtorch mapped in the service, {row['variant']}",
                "torch mapped" if row["torch_mapped"] else "not mapped", "not mapped", not row["torch_mapped"])
