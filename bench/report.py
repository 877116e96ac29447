"""Results: one JSON line per point appended to a .jsonl file, and Markdown tables on stdout."""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson


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
    rows = []
    for r in rec.of("load"):
        waste = r.get("padding_waste")
        rows.append([r["variant"], r["scenario"], r["server"], r["shape"], r["texts_per_s"],
                     r.get("graph_tokens_per_s"), waste and f"{waste:.3f}", r["p50_ms"], r["p99_ms"],
                     f"{r['errors']}/{r['requests']}", r.get("cpu_ms_per_text"), r.get("engine_ref", "-"),
                     _ratio(r.get("vs_engine")), _ratio(r.get("vs_engine_cpu")), _ms(r.get("over_engine_ms")),
                     _ratio(r.get("vs_naive")), _ratio(r.get("vs_infinity")), r.get("batch_mean"), r["wall_s"],
                     r.get("rss_mb"), r["loadavg_1m"]])
    return table(["variant", "scen.", "server", "callers x texts x tokens", "texts/s", "graph tokens/s",
                  "padding waste", "p50 ms", "p99 ms", "errors",
                  "CPU ms/text", "engine ref", "÷ engine", "÷ engine, CPU", "p50 - engine", "÷ naive", "÷ infinity",
                  "mean batch", "wall s", "peak RSS MB", "load 1m"], rows)


def agreement_table(rec: Recorder) -> str:
    """A peer's vectors against attnserve's for the same texts (bench.infinity.agreement)."""
    rows = [[r["server"], r["variant"], r["texts"], f"{r['min_cosine']:.7f}", f"{r['max_abs_diff']:.2e}"]
            for r in rec.of("agreement")]
    return table(["server", "variant", "texts", "lowest cosine to attnserve", "largest |difference|"], rows)


def invariance_table(rec: Recorder) -> str:
    rows = [[r["variant"], f"{r['max_abs_diff']:.2e}", "-" if r["exported"] is None else f"{r['exported']:.2e}",
             r["texts"]] for r in rec.of("invariance")]
    return table(["variant", "largest |alone - batched|, served session", "export's figure (manifest)", "texts"],
                 rows)


def targets_table(rec: Recorder) -> str:
    rows = [[r["target"], r["measured"], r["goal"], "pass" if r["passed"] else "MISS"] for r in rec.of("target")]
    return table(["target", "measured", "goal", "result"], rows)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} ms"
