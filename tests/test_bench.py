"""The bench's own arithmetic (no timing is asserted): which engine point a scenario is compared with, the
ratios, and the batch-invariance figure against a graph known to be invariant and a session known not to be."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import invariance, scenarios, targets, texts
from bench.engine import Config, EnginePoint
from bench.report import Recorder
from bench.texts import load_tokenizer
from bundle.manifest import Manifest
from bundle.session import open_session


def point(batch: int, length: int, config: str, texts_per_s: float, median_s: float, cpu: float) -> EnginePoint:
    return EnginePoint("fp32", batch, length, False, config, 5, median_s, texts_per_s, texts_per_s * length, cpu)


class Engine:
    """Answers reference() and latency() from fixed points, recording what was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, int]] = []

    def reference(self, batch: int, length: int) -> EnginePoint:
        self.asked.append(("reference", batch, length))
        return point(batch, length, "2x1t", 400.0, 0.16, 4.0)

    def latency(self, length: int) -> EnginePoint:
        self.asked.append(("latency", 1, length))
        return point(1, length, "1x2t", 125.0, 0.006, 8.0)


def row(scenario: str, workers: int, texts: int, length: int, **fields: Any) -> dict[str, Any]:
    return {"scenario": scenario, "workers": workers, "texts": texts, "length": length, **fields}


@pytest.mark.parametrize(("scenario", "shape", "asked"), [
    ("a", (32, 1, 16), ("reference", 32, 16)),  # small callers: the engine at batch 32, not the batch formed
    ("b", (4, 32, 128), ("reference", 32, 128)),  # client-side batches: the same shape
    ("c", (4, 8, 256), ("reference", 8, 256)),
    ("d", (1, 1, 16), ("latency", 1, 16)),  # one request at a time: one batch-1 run at a time
    ("e-embed", (1, 1, 128), ("latency", 1, 128)),
])
def test_each_scenario_is_compared_with_the_engine_point_the_targets_name(scenario, shape, asked):
    engine = Engine()
    assert targets.engine_reference(engine, row(scenario, *shape)) is not None  # type: ignore[arg-type]
    assert engine.asked == [asked]
    assert targets.engine_reference(engine, row("e", 1, 1, 128)) is None  # type: ignore[arg-type]


def test_ratios_to_the_engine_in_wall_and_cpu_time_and_the_latency_margin():
    small = row("a", 32, 1, 16, texts_per_s=320.0, cpu_ms_per_text=5.0, p50_ms=100.0)
    targets._compare(small, point(32, 16, "2x1t", 400.0, 0.16, 4.0))
    assert small["vs_engine"] == pytest.approx(0.8) and small["vs_engine_cpu"] == pytest.approx(0.8)
    assert "over_engine_ms" not in small and small["engine_ref"].startswith("32x16 2x1t")
    one = row("d", 1, 1, 16, texts_per_s=100.0, cpu_ms_per_text=10.0, p50_ms=7.5)
    targets._compare(one, point(1, 16, "1x2t", 125.0, 0.006, 8.0))
    assert one["over_engine_ms"] == pytest.approx(1.5) and one["vs_engine"] == pytest.approx(0.8)


def test_chunked_documents_are_compared_per_token_the_graph_ran_at_windows_of_the_max_length(tmp_path):
    engine = Engine()
    docs = row("g", 4, 1, 5000, chunking="mean", window=256, texts_per_s=2.0, cpu_ms_per_text=500.0,
               graph_tokens_per_s=12_800.0, padding_waste=1.05)
    found = targets.engine_reference(engine, docs)  # type: ignore[arg-type]
    assert engine.asked == [("reference", 32, 256)] and found is not None
    targets._compare(docs, found)  # the engine: 400 texts/s x 256 tokens = 102,400 tokens/s at 4.0 CPU ms/text
    assert docs["vs_engine"] == pytest.approx(12_800 / 102_400)
    # the server: 500 ms x 2 documents/s over 12,800 tokens/s; the engine: 4.0 ms / 256 tokens
    assert docs["vs_engine_cpu"] == pytest.approx((4.0 / 256) / (1000.0 / 12_800))
    rec = Recorder(tmp_path / "r.jsonl")
    rec.add("load", server="service", variant="fp32", **docs)
    targets.evaluate(rec, ["fp32"], None)
    verdicts = {t["target"]: t["passed"] for t in rec.of("target")}
    assert verdicts["(g) fp32 padding waste, tokens run ÷ real tokens"] is True
    assert verdicts["(g) fp32 service ÷ engine 32x256 2x1t, graph tokens/s"] is False


def test_documents_run_past_the_max_length_and_are_counted_whole(tiny_bundle):
    tokenizer = load_tokenizer(tiny_bundle)
    document = texts.make_documents(tokenizer, 1000, 1)[0]
    assert len(tokenizer.encode(document).ids) == Manifest.read(tiny_bundle).max_length  # the served cut
    assert 980 <= texts.token_counts(tokenizer, [document])[0] <= 1040


def test_graph_tokens_and_padding_from_the_histograms():
    before = scenarios.histograms("attnserve_batch_tokens_sum 100\nattnserve_batch_tokens_count 2\n"
                                  "attnserve_batch_padded_tokens_sum 120\nattnserve_batch_padded_tokens_count 2\n")
    after = scenarios.histograms('attnserve_batch_tokens_sum{model="m",caller=""} 1100\n'
                                 'attnserve_batch_tokens_count{model="m",caller=""} 6\n'
                                 'attnserve_batch_padded_tokens_sum{model="m",caller=""} 1220\n'
                                 'attnserve_batch_padded_tokens_count{model="m",caller=""} 6\n')
    deltas = scenarios.histogram_deltas(before, after)
    assert scenarios.graph_tokens(deltas) == (1000.0, 1100.0)
    assert scenarios.histogram_means(deltas)["attnserve_batch_tokens"] == 250.0
    assert scenarios.graph_tokens({}) is None


def test_small_callers_pass_on_cpu_within_ten_percent_of_the_engine_and_the_naive_server_must_trail(tmp_path):
    def verdicts(service_cpu: float, naive_texts_per_s: float) -> dict[str, bool]:
        rec = Recorder(tmp_path / "r.jsonl")
        for server, texts_per_s in (("service", 330.0), ("naive", naive_texts_per_s)):
            load = rec.add("load", server=server, variant="fp32",
                           **row("a", 32, 1, 16, texts_per_s=texts_per_s, cpu_ms_per_text=service_cpu, p50_ms=90.0))
            targets._compare(load, point(32, 16, "2x1t", 400.0, 0.16, 4.0))
        service = rec.of("load", server="service")[0]
        service["vs_naive"] = service["texts_per_s"] / naive_texts_per_s
        targets.evaluate(rec, ["fp32"], None)
        return {t["target"].rsplit(", ", 1)[-1] if "naive" not in t["target"] else "naive": t["passed"]
                for t in rec.of("target")}

    # 330 / 400 = 0.83x the engine's texts/s; CPU 4.0 / 4.3 = 0.93x (within 1.1x); 330 / 300 over naive
    assert verdicts(4.3, 300.0) == {"texts/s": True, "CPU per text": True, "naive": True}
    assert verdicts(4.5, 340.0) == {"texts/s": True, "CPU per text": False, "naive": False}  # 0.89x; 0.97x


def test_the_service_s_memory_is_held_to_a_limit_and_to_the_naive_server_s(tmp_path):
    def verdicts(service_mb: float, naive_mb: float) -> dict[str, bool]:
        rec = Recorder(tmp_path / "r.jsonl")
        for server, mb in (("service", service_mb), ("naive", naive_mb)):
            rec.add("process", server=server, variant="fp32", peak_rss_mb=mb, torch_mapped=False)
        targets.evaluate(rec, ["fp32"], None)
        return {t["target"]: t["passed"] for t in rec.of("target") if "RSS" in t["target"]}

    limit, naive = "(f) service RSS under load, fp32", "(f) service peak RSS ÷ the naive server's, fp32"
    assert verdicts(371.0, 506.0) == {limit: True, naive: True}
    assert verdicts(4052.0, 2547.0) == {limit: False, naive: False}  # a 0.6B decoder, weights resident twice
    assert verdicts(2200.0, 2547.0) == {limit: False, naive: True}


def test_config_labels():
    assert Config(2, 1).label == "2x1t" and Config(1, 2).label == "1x2t"


@pytest.fixture(scope="module")
def sequences(tiny_bundle: Path) -> list[list[int]]:
    manifest = Manifest.read(tiny_bundle)
    return invariance.texts(load_tokenizer(tiny_bundle, manifest),
                            manifest.max_length)


def test_an_fp32_graph_is_batch_invariant_to_float_rounding(tiny_bundle, sequences):
    assert len({len(s) for s in sequences}) > 3  # mixed lengths: the batch really pads
    session = open_session(tiny_bundle / Manifest.read(tiny_bundle).graph("fast", "fp32").file, "cpu", 1)
    assert invariance.batch_max_abs_diff(session, sequences) < 1e-5


class BatchDependent:
    """A session whose embeddings are scaled by the batch's largest value: what per-batch scales do."""

    class Output:
        name = "embeddings"

    class Input:
        def __init__(self, name: str) -> None:
            self.name = name

    def get_outputs(self) -> list[Any]:
        return [self.Output()]

    def get_inputs(self) -> list[Any]:
        return [self.Input("input_ids"), self.Input("attention_mask")]

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        ids = feeds["input_ids"].astype(np.float32)  # (B, T)
        return [ids[:, :2] / ids.max()]  # (B, 2)


def test_a_batch_dependent_session_is_caught(sequences):
    assert invariance.batch_max_abs_diff(BatchDependent(), sequences) > 1e-3


def test_side_by_side_servers_are_trees_with_their_settings():
    from bench.sidebyside import parse_args

    args = parse_args([".", "../old,ATTNSERVE_GRAPH_RUNS=2,ATTNSERVE_INTRA_OP_THREADS=1", "--bundle", "b",
                       "--scenarios", "b,c"])
    assert [(s.tree, s.env) for s in args.servers] == [
        (Path("."), {}), (Path("../old"), {"ATTNSERVE_GRAPH_RUNS": "2", "ATTNSERVE_INTRA_OP_THREADS": "1"})]
    assert args.scenarios == ["b", "c"]
    with pytest.raises(SystemExit):
        parse_args([".,GRAPH_RUNS", "--bundle", "b"])
    with pytest.raises(SystemExit):
        parse_args([".", "--bundle", "b", "--scenarios", "e"])


def test_lone_requests_alternate_between_the_idle_path_and_the_queue(tiny_bundle):
    from bench import lone

    figures = asyncio.run(lone.measure(tiny_bundle, 6, "fp32", 0.0))
    assert {way: len(got["wall"]) for way, got in figures.items()} == {"queued": 3, "at once": 3}
    assert all(t > 0 for got in figures.values() for t in got["wall"])
    assert [line.split()[0] for line in lone.report(figures)] == ["queued", "at"]
