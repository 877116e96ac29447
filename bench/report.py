"""Results: one JSON line per point appended to a .jsonl file, and Markdown tables on stdout.

A scenario runs in passes (bench.runner.run_passes); its figures are printed as the median over the passes
with the lowest and highest beside it: `52.2 (49.8-53.9)` (summarise, spread).
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

PEERS = ("naive", "infinity", "infinity-user")  # servers attnserve's texts/s is divided by ("vs_naive", ...)


def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    flags = Path("/proc/cpuinfo").read_text()
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8") if f" {f}" in flags]
    return {"cpu": model, "cores": os.cpu_count(), "isa": isa, "python": platform.python_version()}


@dataclass
class Recorder:
    out: Path
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%dT%H%M%S"))
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, kind: str, **fields: Any) -> dict[str, Any]:
        row = {"run": self.run_id, "kind": kind, "time": time.time(), "loadavg_1m": os.getloadavg()[0], **fields}
        self.rows.append(row)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        with self.out.open("ab") as fh:
            fh.write(orjson.dumps(row, default=_default, option=orjson.OPT_NON_STR_KEYS) + b"\n")
        return row

    def of(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())]


PASS_ONLY = ("run", "kind", "time", "pass_index", "histogram_means", "statuses")  # a pass's own, not summarised
COUNTS = ("requests", "errors")  # summed over the passes
PEAKS = ("rss_mb",)  # the highest over the passes


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for a scenario's passes on one server: each figure that differs between passes as its median,
    with `spread` {figure: [lowest, highest]}; requests and errors summed; `passes`, how many."""
    row = {k: v for k, v in rows[0].items() if k not in PASS_ONLY}
    spread = {}
    for key in row:
        values = [r[key] for r in rows if isinstance(r.get(key), int | float) and not isinstance(r[key], bool)]
        if len(values) < len(rows) or len(set(values)) == 1:
            continue
        if key in COUNTS or key in PEAKS:
            row[key] = sum(values) if key in COUNTS else max(values)
        else:
            row[key], spread[key] = statistics.median(values), [min(values), max(values)]
    return {**row, "passes": len(rows), "spread": spread}


def span(values: list[float], digits: int = 1, signed: bool = False) -> str:
    """" (lowest-highest)" of the passes' values, or "" where they do not differ at `digits`."""
    if not values:
        return ""
    low, high = (f"{v:+.{digits}f}" if signed else fmt(float(v), digits) for v in (min(values), max(values)))
    if low == high:
        return ""
    return f" ({low} to {high})" if signed else f" ({low}-{high})"


def spread(row: dict[str, Any], key: str, digits: int = 1, unit: str = "", signed: bool = False) -> str:
    """A summarised figure with its spread: `52.2 (49.8-53.9)`, `0.97x (0.93-1.01)`; "-" where it is missing."""
    value = row.get(key)
    if value is None:
        return "-"
    text = f"{value:+.{digits}f}" if signed else fmt(float(value), digits)
    return text + unit + span(row.get("spread", {}).get(key, []), digits, signed)


def _default(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    raise TypeError(type(value))


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in row) + " |" for row in rows]
    return "\n".join(lines)


def engine_table(rec: Recorder) -> str:
    rows = []
    for raw in rec.of("engine", tokenize=False):
        tok = next(iter(rec.of("engine", variant=raw["variant"], batch=raw["batch"], length=raw["length"],
                               config=raw["config"], tokenize=True)), None)
        overhead = (raw["texts_per_s"] / tok["texts_per_s"] - 1) * 100 if tok else None
        rows.append([raw["variant"], raw["config"], raw["batch"], raw["length"], raw["texts_per_s"],
                     raw["tokens_per_s"], tok and tok["texts_per_s"], overhead, raw["median_s"] * 1000,
                     raw["cpu_ms_per_text"], raw["runs"], raw["loadavg_1m"]])
    return table(["variant", "runs x threads", "batch", "tokens/text", "texts/s", "tokens/s", "texts/s incl. tokenise",
                  "tokenise cost %", "ms/run", "CPU ms/text", "runs", "load 1m"], rows)


def load_table(rec: Recorder) -> str:
    """One row per scenario and server: medians over the passes with their spreads (bench.targets.add_ratios)."""
    rows = []
    for r in rec.of("median"):
        waste = r.get("padding_waste")
        rows.append([r["variant"], r["scenario"], r["server"], r["shape"], r["passes"], spread(r, "texts_per_s"),
                     spread(r, "graph_tokens_per_s", 0), waste and spread(r, "padding_waste", 3),
                     spread(r, "p50_ms"), spread(r, "p99_ms"), f"{r['errors']}/{r['requests']}",
                     spread(r, "cpu_ms_per_text", 2), r.get("engine_ref", "-"), spread(r, "vs_engine", 2, "x"),
                     spread(r, "vs_engine_cpu", 2, "x"), spread(r, "over_engine_ms", 1, " ms", signed=True),
                     *(spread(r, f"vs_{peer}", 2, "x") for peer in PEERS), r.get("batch_mean"), r["wall_s"],
                     r.get("rss_mb"), spread(r, "loadavg_1m", 2)])
    return table(["variant", "scen.", "server", "callers x texts x tokens", "passes", "texts/s", "graph tokens/s",
                  "padding waste", "p50 ms", "p99 ms", "errors", "CPU ms/text", "engine ref", "÷ engine",
                  "÷ engine, CPU", "p50 - engine", *(f"÷ {peer}" for peer in PEERS), "mean batch", "wall s per pass",
                  "peak RSS MB", "load 1m"], rows)


def agreement_table(rec: Recorder) -> str:
    """A peer's vectors against attnserve's for the same texts (bench.infinity.agreement)."""
    rows = [[r["server"], r["variant"], r["texts"], f"{r['min_cosine']:.7f}", fmt(r.get("min_cosine_within"), 7),
             f"{r['max_abs_diff']:.2e}"] for r in rec.of("agreement")]
    return table(["server", "variant", "texts", "lowest cosine to attnserve", "lowest, texts within the max length",
                  "largest |difference|"], rows)


def invariance_table(rec: Recorder) -> str:
    rows = [[r["variant"], f"{r['max_abs_diff']:.2e}", "-" if r["exported"] is None else f"{r['exported']:.2e}",
             r["texts"]] for r in rec.of("invariance")]
    return table(["variant", "largest |alone - batched|, served session", "export's figure (manifest)", "texts"],
                 rows)


def targets_table(rec: Recorder) -> str:
    rows = [[r["target"], r["measured"], r["goal"], "pass" if r["passed"] else "MISS"] for r in rec.of("target")]
    return table(["target", "measured", "goal", "result"], rows)
