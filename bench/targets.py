"""Ratios of each served figure to the engine and to naive, and the pass/miss targets (docs/performance.md)."""

from __future__ import annotations

from typing import Any

from bench.engine import EngineBench
from bench.report import Recorder

RSS_LIMIT_MB = 1.5 * 1024


def engine_shape(row: dict[str, Any], batch_mean: float | None) -> tuple[int, int] | None:
    """Engine (batch, length) a scenario is compared with; (a) uses the batch the batcher formed."""
    if row["scenario"] == "e":
        return None
    if row["scenario"] == "a":
        return max(1, round(batch_mean or 1)), row["length"]
    return row["texts"], row["length"]


def add_ratios(rec: Recorder, engine: EngineBench) -> None:
    """Ratios for one variant's rows; engine points not cached yet are measured now, so a ratio's
    two figures come from minutes apart on a shared machine, not from opposite ends of the run."""
    for row in rec.of("load", variant=engine.variant):
        service = _one(rec, "service", row["variant"], row["scenario"])
        naive = _one(rec, "naive", row["variant"], row["scenario"])
        shape = engine_shape(row, service and service.get("batch_mean"))
        if shape:
            point = engine.point(*shape)
            row["engine_ref"] = f"{shape[0]}x{shape[1]}: {point.texts_per_s:.1f}"
            row["vs_engine"] = row["texts_per_s"] / point.texts_per_s
        if row["server"] == "service" and naive:
            row["vs_naive"] = row["texts_per_s"] / max(naive["texts_per_s"], 1e-9)
        rec.add("compare", **{k: row.get(k) for k in ("server", "variant", "scenario", "engine_ref", "vs_engine",
                                                       "vs_naive")})


def _one(rec: Recorder, server: str, variant: str, scenario: str) -> dict[str, Any] | None:
    return next(iter(rec.of("load", server=server, variant=variant, scenario=scenario)), None)


def _target(rec: Recorder, name: str, measured: str, goal: str, passed: bool) -> None:
    rec.add("target", target=name, measured=measured, goal=goal, passed=bool(passed))


def evaluate(rec: Recorder, variants: list[str], fp32: EngineBench | None) -> None:
    for variant in variants:
        _throughput(rec, variant, "b", 0.90)
        _throughput(rec, variant, "a", 0.80)
        _throughput(rec, variant, "c", 0.90)
        _vs_naive(rec, variant)
        _latency(rec, variant)
        _attention(rec, variant)
    _int8(rec, fp32)
    _process(rec)


def _throughput(rec: Recorder, variant: str, scenario: str, goal: float) -> None:
    row = _one(rec, "service", variant, scenario)
    if row and row.get("vs_engine") is not None:
        _target(rec, f"({scenario}) {variant} service ÷ engine {row['engine_ref'].split(':')[0]}",
                f"{row['vs_engine']:.2f}x", f">= {goal:.2f}x", row["vs_engine"] >= goal)


def _vs_naive(rec: Recorder, variant: str) -> None:
    row = _one(rec, "service", variant, "a")
    if row and row.get("vs_naive") is not None:
        _target(rec, f"(a) {variant} service ÷ naive", f"{row['vs_naive']:.2f}x", ">= 1.50x", row["vs_naive"] >= 1.5)


def _latency(rec: Recorder, variant: str) -> None:
    service, naive = _one(rec, "service", variant, "d"), _one(rec, "naive", variant, "d")
    if service and naive:
        _target(rec, f"(d) {variant} single-request p50", f"{service['p50_ms']:.1f} ms",
                f"<= naive {naive['p50_ms']:.1f} + 2 ms", service["p50_ms"] <= naive["p50_ms"] + 2.0)


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
        ratio = row["texts_per_s"] / fp32.point(32, row["length"]).texts_per_s
        _target(rec, "(f) int8 service (b) ÷ fp32 engine 32x128", f"{ratio:.2f}x", ">= 2.00x", ratio >= 2.0)


def _process(rec: Recorder) -> None:
    for row in rec.of("process", server="service"):
        _target(rec, f"(f) service RSS under load, {row['variant']}", f"{row['peak_rss_mb']:.0f} MB",
                f"<= {RSS_LIMIT_MB:.0f} MB", row["peak_rss_mb"] <= RSS_LIMIT_MB)
        _target(rec, f"(f) no libtorch mapped in the service, {row['variant']}",
                "torch mapped" if row["torch_mapped"] else "not mapped", "not mapped", not row["torch_mapped"])
