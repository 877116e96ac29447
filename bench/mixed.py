"""`python -m bench` on mixed traffic (issue 22's figures) with the bench's bundle: bench.traffic's loads
against `attnserve serve` with a keys file, recorded as rows and targets like the other figures.

- priorities: an interactive caller alone, 8 bulk callers (64 texts x 128 tokens) alone, then together, in
  rounds: interactive p99 together / alone (target <= 2x), bulk texts/s together / alone (>= 0.8x); then the
  same with six bulk callers, with the keys file's classes and on a server without keys (one class, first
  come first served: what every caller got before there were classes);
- fair shares: two bulk callers with 6 and 2 requests in flight (each 0.4-0.6 of the tokens);
- the answer cache: a corpus with 37% repeated rows through a server with the cache and one without (best of
  two runs each; target >= 1.5x), then each distinct row alone (fully cached: server time p50 <= 1 ms).

The servers run with the service's own settings (bench.engine.service_config), each on its own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from bench import procs, traffic
from bench.report import Recorder, table

CORPUS_ROWS, RUNS = 400, 2  # 400 rows of 128 tokens: about a minute a run on two cores for MiniLM
SIX = 6  # bulk callers in the comparison with and without classes (the load the issue measured before them)


def _server(name: str, bundle: Path, variant: str, log_dir: Path, *flags: str) -> procs.Server:
    return procs.start(name, procs.service_argv(bundle, *flags), {"ATTNSERVE_VARIANT": variant}, log_dir)


def measure(bundle: Path, variant: str, tokenizer: Tokenizer, duration_s: float, log_dir: Path,
            rec: Recorder) -> None:
    keys = traffic.write_keys(log_dir / "keys.toml", [traffic.SEARCH, *traffic.BULK])
    server = _server(f"traffic-{variant}", bundle, variant, log_dir, "--api-keys-file", str(keys), "--cache-bytes", "0")
    try:
        found = asyncio.run(traffic.priorities(server.url, tokenizer, 3 * duration_s))
        six = asyncio.run(traffic.priorities(server.url, tokenizer, 3 * duration_s, bulk_callers=SIX))
        shares = asyncio.run(traffic.fair_shares(server.url, tokenizer, 3 * duration_s))
    finally:
        procs.terminate(server)
    server = _server(f"traffic-{variant}-one-class", bundle, variant, log_dir, "--cache-bytes", "0")
    try:
        six_one_class = asyncio.run(traffic.priorities(server.url, tokenizer, 3 * duration_s, bulk_callers=SIX))
    finally:
        procs.terminate(server)
    _priorities(rec, variant, found, "keys file", len(traffic.BULK), targets=True)
    _priorities(rec, variant, six, "keys file", SIX)
    _priorities(rec, variant, six_one_class, "none (one class)", SIX)
    _shares(rec, variant, shares)
    _cache(rec, bundle, variant, tokenizer, log_dir)


def _priorities(rec: Recorder, variant: str, found: traffic.Priorities, classes: str, bulk_callers: int,
                targets: bool = False) -> None:
    alone, together = found.interactive_alone, found.together[traffic.SEARCH.name]
    bulk_alone, bulk_together = found.bulk_texts_per_s(found.bulk_alone), found.bulk_texts_per_s(found.together)
    row = rec.add("priorities", variant=variant, classes=classes, bulk_callers=bulk_callers,
                  interactive_p99_alone_ms=alone.p99_ms(), interactive_p99_together_ms=together.p99_ms(),
                  bulk_alone=bulk_alone, bulk_together=bulk_together)
    if not targets:
        return
    _target(rec, f"(p) {variant} interactive p99 under {bulk_callers} bulk callers / alone",
            row["interactive_p99_together_ms"] / row["interactive_p99_alone_ms"], "<= 2.00x", lambda r: r <= 2)
    _target(rec, f"(p) {variant} bulk texts/s with the interactive caller / alone", bulk_together / bulk_alone,
            ">= 0.80x", lambda r: r >= 0.8)


def _shares(rec: Recorder, variant: str, shares: dict[str, traffic.Served]) -> None:
    total = sum(s.tokens for s in shares.values()) or 1
    for (name, served), requests in zip(shares.items(), (6, 2), strict=True):
        share = served.tokens / total
        rec.add("shares", variant=variant, caller=name, requests=requests, share=share)
        _target(rec, f"(q) {variant} {name}, {requests} requests in flight: share of bulk tokens", share,
                "0.40-0.60", lambda s: 0.4 <= s <= 0.6)


def _cache(rec: Recorder, bundle: Path, variant: str, tokenizer: Tokenizer, log_dir: Path) -> None:
    corpus = traffic.repeated_corpus(tokenizer, CORPUS_ROWS, 0.37, 128)
    seconds: dict[str, list[float]] = {"cache": [], "no cache": []}
    p50 = under = float("nan")
    for run in range(RUNS):
        for mode, flags in (("cache", ()), ("no cache", ("--cache-bytes", "0"))):
            server = _server(f"cache-{variant}-{run}-{mode.replace(' ', '-')}", bundle, variant, log_dir, *flags)
            try:
                seconds[mode].append(asyncio.run(traffic.embed_corpus(server.url, corpus, 16, 2))[0])
                if mode == "cache" and run == 0:
                    p50, under = traffic.fully_cached(server.url, sorted(set(corpus)))
            finally:
                procs.terminate(server)
    speedup = min(seconds["no cache"]) / min(seconds["cache"])
    rec.add("cache", variant=variant, rows=len(corpus), seconds=seconds, speedup=speedup, cached_p50_ms=p50 * 1000,
            cached_under_1ms=under)
    _target(rec, f"(r) {variant} 37%-repeated corpus, without / with the cache", speedup, ">= 1.50x",
            lambda s: s >= 1.5)
    _target(rec, f"(r) {variant} a fully cached request, server time p50 (ms)", p50 * 1000, "<= 1.0 ms",
            lambda ms: ms <= 1.0)


def _target(rec: Recorder, name: str, value: float, goal: str, passed: Any) -> None:
    rec.add("target", target=name, measured=f"{value:.2f}", goal=goal, passed=bool(passed(value)))


def tables(rec: Recorder) -> str:
    rows = [[r["variant"], r["classes"], r["bulk_callers"], r["interactive_p99_alone_ms"],
             r["interactive_p99_together_ms"], r["interactive_p99_together_ms"] / r["interactive_p99_alone_ms"],
             r["bulk_alone"], r["bulk_together"]] for r in rec.of("priorities")]
    out = table(["variant", "classes", "bulk callers", "interactive p99 alone (ms)", "under bulk (ms)", "ratio",
                 "bulk texts/s alone", "with interactive"], rows)
    caches = [[r["variant"], r["rows"], min(r["seconds"]["no cache"]), min(r["seconds"]["cache"]), r["speedup"],
               r["cached_p50_ms"]] for r in rec.of("cache")]
    return out + "\n\n" + table(["variant", "rows", "s without cache", "s with", "speed-up", "cached p50 (ms)"],
                                caches)
