"""Orchestration: engine grid, then each scenario in passes through every server (attnserve, naive, Infinity)
and the engine reference."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from tokenizers import Tokenizer

from bench import infinity, procs, scenarios
from bench.engine import EngineBench
from bench.httpload import Payload
from bench.report import Recorder
from bench.targets import engine_reference


@dataclass(frozen=True)
class Plan:
    bundle: Path
    max_length: int
    scenarios: list[str]
    duration_s: float  # of each pass of a scenario on each server, unless `durations` names the scenario
    engine_s: float
    embed_route: str
    log_dir: Path
    quick: bool = False  # warm up with the one checked request only
    passes: int = 1  # of each scenario, servers in alternating order (run_passes)
    durations: dict[str, float] = field(default_factory=dict)  # scenario -> seconds of each of its passes
    infinity: Path | None = None  # the Python of Infinity's venv (bench.infinity); None: Infinity not run
    infinity_kinds: tuple[str, ...] = ()  # which of bench.infinity.KINDS run
    infinity_user: Path | None = None  # infinity-user's model folder (bench.infinity.user_model)

    def seconds(self, scenario: str) -> float:
        """Seconds of each pass of `scenario` (e-embed, the denominator of e, lasts as long as e)."""
        return self.durations.get(scenario.removesuffix("-embed"), self.duration_s)

    def warmup_s(self, scenario: str) -> float:
        """A quarter of a pass, at most 2 s (none with --quick); a warm-up waits for the answers it asked for, so
        every caller sends at least one request, however long it takes."""
        return 0.0 if self.quick else min(2.0, self.seconds(scenario) / 4)


def engine_grid(bench: EngineBench, shapes: list[tuple[int, int]], rec: Recorder, both: bool = True) -> None:
    for batch, length in shapes:
        for tokenize in (False, True) if both else (False,):
            point = bench.point(batch, length, tokenize)
            rec.add("engine", **asdict(point))
            print(f"  engine {point.variant:8s} {point.config} B={batch:<3d} T={point.length:<4d} "
                  f"tokenise={tokenize!s:5s} {point.texts_per_s:9.1f} texts/s {point.tokens_per_s:10.0f} tokens/s "
                  f"{point.cpu_ms_per_text:7.2f} CPU ms/text", flush=True)


class RssSampler:
    """Samples the server's VmRSS (with children) every 0.2 s while the load runs."""

    def __init__(self, server: procs.Server):
        self.server, self.stop_event = server, threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> RssSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join()

    def _loop(self) -> None:
        while not self.stop_event.wait(0.2):
            self.server.sample_rss()


def start_server(kind: str, variant: str, plan: Plan) -> procs.Server:
    if kind == "infinity-user":
        assert plan.infinity is not None and plan.infinity_user is not None  # named only when both were made
        return infinity.start_user(plan.infinity, plan.infinity_user, plan.bundle, variant, plan.log_dir)
    if kind == "infinity":
        assert plan.infinity is not None  # kinds name infinity only when its venv was made
        return infinity.start(plan.infinity, plan.bundle, variant, plan.log_dir)
    argv = procs.service_argv(plan.bundle) if kind == "service" else procs.naive_argv(plan.bundle, variant)
    # The answer cache off: the scenarios cycle through a pool of bodies, and hits would skip the graph whose
    # cost is compared with the engine's (bench.mixed measures the cache on its own servers).
    env = {"ATTNSERVE_VARIANT": variant, "ATTNSERVE_CACHE_BYTES": "0"} if kind == "service" else {}
    return procs.start(f"{kind}-{variant}", argv, env, plan.log_dir)


def measure_variant(variant: str, kinds: list[str], plan: Plan, tokenizer: Tokenizer, rec: Recorder,
                    engine: EngineBench) -> None:
    """All servers up at once; each scenario runs in passes (run_passes), so the figures of a ratio are taken
    within seconds of each other, not minutes."""
    servers: dict[str, procs.Server] = {}
    try:
        for kind in kinds:
            _start(servers, kind, variant, plan, rec)
        if "service" in servers:
            rec.add("served", variant=variant, graphs=_served_graphs(servers["service"]))
        for peer in infinity.KINDS if "service" in servers else ():
            if peer in servers:
                _agreement(servers, peer, variant, tokenizer, rec)
        for name in plan.scenarios:
            run_passes(servers, variant, scenarios.SCENARIOS[name], plan, tokenizer, rec, engine)
        for kind, server in servers.items():
            rec.add("process", server=kind, variant=variant, peak_rss_mb=server.peak_rss_kb / 1024,
                    torch_mapped=procs.torch_mapped(server.proc.pid))
    finally:
        for kind, server in servers.items():
            print(f"  {kind} stopped with exit code {procs.terminate(server)}; log {server.log_path}", flush=True)


def run_passes(servers: dict[str, procs.Server], variant: str, scenario: scenarios.Scenario, plan: Plan,
               tokenizer: Tokenizer, rec: Recorder, engine: EngineBench) -> None:
    """plan.passes passes of one scenario, each through every server in turn and then the engine reference.
    The order is reversed every other pass, so no server always goes first (or always follows the busiest);
    each server is checked and warmed up once, before its first pass."""
    kinds = [kind for kind in servers if _answers(kind, scenario)]
    routes = {_route(kind, plan) for kind in kinds}
    bodies = {route: scenarios.payloads(scenario, tokenizer, route, max_length=plan.max_length) for route in routes}
    problems: dict[str, str | None] = {}
    for index in range(plan.passes):
        rows: dict[str, dict] = {}
        for kind in kinds if index % 2 == 0 else kinds[::-1]:
            server, route = servers[kind], _route(kind, plan)
            if kind not in problems:
                problems[kind] = scenarios.check_once(server.url, scenario, bodies[route][0], route)
                scenarios.warm_up(server.port, scenario, bodies[route], route, plan.warmup_s(scenario.name))
            rows[kind] = _scenario(server, kind, variant, scenario, plan, bodies[route], problems[kind], index, rec)
        _engine_reference(engine, rows.get("service") or rows.get("naive"), index, rec)


def _start(servers: dict[str, procs.Server], kind: str, variant: str, plan: Plan, rec: Recorder) -> None:
    """Start one server into `servers`. A peer (Infinity) that will not start is reported and left out; the
    others' figures still come."""
    try:
        servers[kind] = start_server(kind, variant, plan)
    except RuntimeError as error:
        if kind not in infinity.KINDS:
            raise
        print(f"  {kind} {variant} not measured: {error}", flush=True)
        rec.add("error", server=kind, variant=variant, error=str(error))
        return
    if kind == "infinity-user":
        _optimiser(servers[kind], variant, rec)


def _optimiser(server: procs.Server, variant: str, rec: Recorder) -> None:
    """Whether Infinity's own graph optimiser failed on the user's model (its log says so at start-up)."""
    failure = infinity.optimiser_failure(server)
    rec.add("peer", server="infinity-user", variant=variant, optimiser_failed=failure is not None, failure=failure)
    if failure:
        print(f"  infinity-user {variant}: Infinity's optimiser failed, so it serves transformers' unoptimised "
              f"export ({failure[:160]})", flush=True)


def _answers(kind: str, scenario: scenarios.Scenario) -> bool:
    if kind in infinity.KINDS:
        return scenario.name in infinity.SCENARIOS
    return kind == "service" or scenario.naive


def _agreement(servers: dict[str, procs.Server], peer: str, variant: str, tokenizer: Tokenizer,
               rec: Recorder) -> None:
    """An Infinity configuration's vectors against attnserve's for the same texts: both must serve the same
    model."""
    try:
        found = infinity.agreement(servers["service"].url, servers[peer].url, tokenizer)
    except (httpx.HTTPError, KeyError, ValueError) as error:  # an answer that is not the OpenAI shape
        print(f"  {peer} {variant} vs attnserve not compared: {error!r}", flush=True)
        return
    rec.add("agreement", server=peer, variant=variant, **found)
    within = found["min_cosine_within"]
    print(f"  {peer} {variant} vs attnserve, {found['texts']} texts: lowest cosine {found['min_cosine']:.7f} "
          f"({'-' if within is None else f'{within:.7f}'} within the max length), largest |difference| "
          f"{found['max_abs_diff']:.2e}", flush=True)


def _served_graphs(server: procs.Server) -> dict[str, str]:
    """Graph kind -> variant the service really serves (from /info): with the int8 fast graph, the
    attention graph is fp32 (the bundle has no int8 attention graph), so (e) is not like with like."""
    try:
        return dict(httpx.get(server.url + "/info", timeout=10.0).json().get("variants", {}))
    except (httpx.HTTPError, ValueError):
        return {}


def _engine_reference(engine: EngineBench, row: dict | None, index: int, rec: Recorder) -> None:
    """The engine at the scenario's reference shape, measured afresh in each pass (a cached point would give
    every pass the first pass's figure)."""
    engine.cache.clear()
    point = engine_reference(engine, row) if row else None
    if row and point:
        rec.add("engine_ref", scenario=row["scenario"], pass_index=index, **asdict(point))
        print(f"  {'engine':13s} {engine.variant:8s} ({row['scenario']}, pass {index + 1}) {point.texts_per_s:8.1f} "
              f"texts/s at {point.batch}x{point.length} {point.config}, {point.median_s * 1000:.1f} ms per run",
              flush=True)


def _route(kind: str, plan: Plan) -> str:
    return "openai" if kind.startswith("infinity") else plan.embed_route  # Infinity has the OpenAI route only


def _scenario(server: procs.Server, kind: str, variant: str, scenario: scenarios.Scenario, plan: Plan,
              bodies: list[Payload], problem: str | None, index: int, rec: Recorder) -> dict:
    """One pass of the scenario on one server: its row, tagged with the pass's index."""
    route = _route(kind, plan)
    before = scenarios.read_histograms(server.url) if kind == "service" else {}
    with RssSampler(server):
        result = scenarios.run(server.port, scenario, bodies, route, plan.seconds(scenario.name),
                               lambda: procs.tree_cpu_s(server.proc.pid))
    deltas = scenarios.histogram_deltas(before, scenarios.read_histograms(server.url)) if kind == "service" else {}
    means = scenarios.histogram_means(deltas)
    length = scenario.length if scenario.chunking else min(scenario.length, plan.max_length)
    row = rec.add("load", server=kind, variant=variant, scenario=scenario.name, pass_index=index,
                  workers=scenario.workers,
                  texts=scenario.texts, length=length, shape=_shape(scenario, length), check=problem,
                  chunking=scenario.chunking, window=plan.max_length,
                  batch_mean=means.get("attnserve_batch_size"), histogram_means=means,
                  rss_mb=server.peak_rss_kb / 1024, **result.summary(), **_graph_tokens(deltas, result.wall_s))
    print(f"  {kind:13s} {variant:8s} ({scenario.name}, pass {index + 1}) {row['texts_per_s']:8.1f} texts/s "
          f"p50 {row['p50_ms']:7.1f} ms errors {row['errors']}/{row['requests']}"
          + (f"  CHECK: {problem}" if problem else ""), flush=True)
    return row


def _shape(scenario: scenarios.Scenario, length: int) -> str:
    shape = f"{scenario.workers}x{scenario.texts}x{length}"
    return f"{shape}, chunking {scenario.chunking}" if scenario.chunking else shape


def _graph_tokens(deltas: dict[str, list[float]], wall_s: float) -> dict[str, float]:
    """What the graph ran over the scenario (service only): real tokens per second (a chunked document's
    windows overlap, so more than the tokens sent) and the padding waste, tokens run over real tokens."""
    found = scenarios.graph_tokens(deltas)
    if found is None:
        return {}
    real, padded = found
    return {"graph_tokens_per_s": real / max(wall_s, 1e-9), "padding_waste": padded / real}
