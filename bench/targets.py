"""Ratios of each served figure to the engine and to naive, and the pass/miss targets (docs/performance.md).

The engine reference of a scenario (bench.engine): one caller with one text (d, e-embed) is compared with
one batch-1 run at a time, the lowest median time; small concurrent callers (a) with the engine at batch 32,
the batch a perfect batcher would form from 32 callers; client-side batches (b, c) with the engine at the
same shape; chunked documents (g) with the engine at 32 x the max length, as tokens the graph ran per second
(a document's windows overlap, so the graph runs more tokens than were sent). Each reference is the faster of
the service's configuration and one run on all cores.
"""

from __future__ import annotations

from typing import Any

from bench.engine import EngineBench, EnginePoint
from bench.report import Recorder

RSS_LIMIT_MB = 600
SMALL_CALLERS_BATCH = 32
LATENCY_SLACK_MS = 1.5
# Per scenario: service texts/s over the engine reference (wall), and the engine's CPU per text over the
# service's (CPU: 1 / 1.1 for small callers is "the server's CPU per text at most 1.1x the engine's").
GOALS = {"a": 0.80, "b": 0.95, "c": 0.95, "g": 0.95}
CPU_GOALS = {"a": 1 / 1.1, "b": 0.95, "c": 0.95, "g": 0.95}
PADDING_LIMIT = 1.2  # tokens run counting padding over real tokens, where inputs are long (c, g)
NAIVE_GOAL = 1.00  # every scenario: the naive server trails (service over naive)
PEERS = ("naive", "infinity")  # servers attnserve's texts/s is divided by, scenario by scenario ("vs_naive", ...)


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


def describe(point: EnginePoint, latency: bool) -> str:
    if latency:
        return f"1x{point.length} one at a time, {point.config}: {point.median_s * 1000:.1f} ms"
    return f"{point.batch}x{point.length} {point.config}: {point.texts_per_s:.1f}"


def add_ratios(rec: Recorder, engine: EngineBench) -> None:
    """Ratios for one variant's rows; engine points not cached yet are measured now, so a ratio's
    two figures come from minutes apart on a shared machine, not from opposite ends of the run."""
    for row in rec.of("load", variant=engine.variant):
        point = engine_reference(engine, row)
        if point is not None:
            _compare(row, point)
        for peer in PEERS if row["server"] == "service" else ():
            other = _one(rec, peer, row["variant"], row["scenario"])
            if other:
                row[f"vs_{peer}"] = row["texts_per_s"] / max(other["texts_per_s"], 1e-9)
        rec.add("compare", **{k: row.get(k) for k in ("server", "variant", "scenario", "engine_ref", "vs_engine",
                                                       "vs_engine_cpu", "over_engine_ms", "vs_naive",
                                                       "vs_infinity")})


def _compare(row: dict[str, Any], point: EnginePoint) -> None:
    row["engine_ref"] = describe(point, sequential(row))
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
    return next(iter(rec.of("load", server=server, variant=variant, scenario=scenario)), None)


def _target(rec: Recorder, name: str, measured: str, goal: str, passed: bool) -> None:
    rec.add("target", target=name, measured=measured, goal=goal, passed=bool(passed))


def evaluate(rec: Recorder, variants: list[str], fp32: EngineBench | None) -> None:
    for variant in variants:
        for scenario, goal in GOALS.items():
            _throughput(rec, variant, scenario, goal)
            _cpu(rec, variant, scenario, CPU_GOALS[scenario])
        for scenario in ("a", "b", "c", "d"):
            _vs_naive(rec, variant, scenario)
        _latency(rec, variant)
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
        _target(rec, f"({scenario}) {variant} service ÷ engine {shape}, {unit}", f"{row['vs_engine']:.2f}x",
                f">= {goal:.2f}x", row["vs_engine"] >= goal)


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
            unit, server = "CPU per text", f" ({row['cpu_ms_per_text']:.2f} ms/text, engine {engine_ms:.2f})"
        _target(rec, f"({scenario}) {variant} engine ÷ service {shape}, {unit}",
                f"{row['vs_engine_cpu']:.2f}x{server}", f">= {goal:.2f}x", row["vs_engine_cpu"] >= goal)


def _padding(rec: Recorder, variant: str, scenario: str) -> None:
    row = _one(rec, "service", variant, scenario)
    if row and row.get("padding_waste") is not None:
        _target(rec, f"({scenario}) {variant} padding waste, tokens run ÷ real tokens", f"{row['padding_waste']:.3f}",
                f"<= {PADDING_LIMIT:.1f}", row["padding_waste"] <= PADDING_LIMIT)


def _vs_naive(rec: Recorder, variant: str, scenario: str) -> None:
    row = _one(rec, "service", variant, scenario)
    if row and row.get("vs_naive") is not None:
        _target(rec, f"({scenario}) {variant} service ÷ naive, texts/s", f"{row['vs_naive']:.2f}x",
                f">= {NAIVE_GOAL:.2f}x", row["vs_naive"] >= NAIVE_GOAL)


def _latency(rec: Recorder, variant: str) -> None:
    row = _one(rec, "service", variant, "d")
    if row and row.get("over_engine_ms") is not None:
        engine_ms = row["p50_ms"] - row["over_engine_ms"]
        _target(rec, f"(d) {variant} one request at a time, p50", f"{row['p50_ms']:.1f} ms",
                f"<= engine {engine_ms:.1f} + {LATENCY_SLACK_MS:g} ms", row["over_engine_ms"] <= LATENCY_SLACK_MS)


def _attention(rec: Recorder, variant: str) -> None:
    attention, embed = _one(rec, "service", variant, "e"), _one(rec, "service", variant, "e-embed")
    if attention and embed:
        ratio = attention["p50_ms"] / embed["p50_ms"]
        graphs = next(iter(rec.of("served", variant=variant)), {}).get("graphs", {})
        att, fast = graphs.get("attention", "?"), graphs.get("fast", variant)
        like = "" if att == fast else f" (attention graph {att} vs embedding graph {fast}: not like with like)"
        _target(rec, f"(e) {variant} attention p50 ÷ embedding p50, same 128-token text{like}",
                f"{ratio:.2f}x ({attention['p50_ms']:.1f} / {embed['p50_ms']:.1f} ms)", "<= 2.00x", ratio <= 2.0)


def _int8(rec: Recorder, fp32: EngineBench | None) -> None:
    row = _one(rec, "service", "int8", "b")
    if row and fp32:
        ratio = row["texts_per_s"] / fp32.reference(32, row["length"]).texts_per_s
        _target(rec, "(f) int8 service (b) ÷ fp32 engine 32x128", f"{ratio:.2f}x", ">= 2.00x", ratio >= 2.0)


def _process(rec: Recorder) -> None:
    for row in rec.of("process", server="service"):
        _target(rec, f"(f) service RSS under load, {row['variant']}", f"{row['peak_rss_mb']:.0f} MB",
                f"<= {RSS_LIMIT_MB:.0f} MB", row["peak_rss_mb"] <= RSS_LIMIT_MB)
        _target(rec, f"(f) no libtorch mapped in the service, {row['variant']}",
                "torch mapped" if row["torch_mapped"] else "not mapped", "not mapped", not row["torch_mapped"])
