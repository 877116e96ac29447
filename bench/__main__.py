"""python -m bench --bundle DIR: engine, attnserve, naive-server and Infinity figures with ratios and targets.

Prints progress and Markdown tables to stdout and appends one JSON line per point to --out.
Timings on a shared machine are noisy: every row carries the 1-minute load average.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tokenizers import Tokenizer

from bench import infinity, invariance, mixed, report, runner, targets
from bench.engine import Config, EngineBench, service_config
from bench.scenarios import SCENARIOS
from bench.texts import load_tokenizer
from bundle.manifest import Manifest

BATCHES = (1, 8, 32, 64)
LENGTHS = (16, 128, 512)
CPU_VARIANTS = ("fp32", "fp32-opt", "int8")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True, help="bundle directory (manifest.json, ...)")
    parser.add_argument("--variants", "--variant", default="all",
                        help="comma-separated variants to serve and measure, or 'all' present in the bundle "
                             "(fp32, fp32-opt, int8); --quick defaults to int8 (else fp32)")
    parser.add_argument("--duration", type=durations, default={},
                        help="seconds of each pass of a load scenario on each server (default 10, --quick 2), "
                             "or per scenario: '20,h=300' gives h 300 s and the others 20. A pass ends when the "
                             "requests in flight at its end are answered, and its warm-up (a quarter of it, at most "
                             "2 s) waits for each caller's first answer; a scenario whose one request takes long "
                             "(h on make bench-decoder's 0.6B model: 30 s or more per 8 x 512 batch) needs a "
                             "duration of several requests, which that target passes")
    parser.add_argument("--passes", type=int,
                        help="passes of each scenario (default 3, --quick 1): each through every server, in an "
                             "order reversed every other pass, then the engine reference; figures are medians "
                             "over the passes, printed with their lowest and highest")
    parser.add_argument("--scenarios", default="a,b,c,d,e,g",
                        help="comma-separated subset of a,b,c,d,e,g,h,i (e also runs e-embed; h and i are the "
                             "decoder's: make bench-decoder); 'none' for engine only")
    parser.add_argument("--quick", action="store_true", help="smoke run: short durations, targets' shapes only")
    parser.add_argument("--route", choices=("embed", "openai"), default="embed",
                        help="embedding route for load: /embed (TEI) or /v1/embeddings (OpenAI)")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive baseline server")
    parser.add_argument("--no-infinity", action="store_true",
                        help="skip both Infinity peers (infinity-emb on onnxruntime, in its own venv under "
                             "build/peers, made on first use): on the bundle's graph, and infinity-user, the "
                             "bundle's source model exported by optimum-cli as a user serves it")
    parser.add_argument("--no-traffic", action="store_true",
                        help="skip the mixed-traffic figures (priorities, fair shares, the answer cache: bench.mixed)")
    parser.add_argument("--no-grid", action="store_true",
                        help="skip the engine grid (the engine references for the ratios are still measured)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results.jsonl",
                        help="JSON-lines file results are appended to")
    return parser.parse_args(argv)


def durations(spec: str) -> dict[str, float]:
    """--duration's value, "10" or "20,h=300": seconds of each pass by scenario ("": every other one)."""
    found = {}
    for part in spec.split(","):
        name, _, seconds = part.rpartition("=")
        if name.strip() not in ("", *SCENARIOS) or float(seconds) <= 0:
            raise ValueError(part)
        found[name.strip()] = float(seconds)
    return found


def pick_variants(spec: str, manifest: Manifest, quick: bool) -> list[str]:
    present = [v for v in CPU_VARIANTS if manifest.graph("fast", v)]
    if spec != "all":
        wanted = [v.strip() for v in spec.split(",") if v.strip()]
        missing = [v for v in wanted if v not in present]
        if missing:
            sys.exit(f"bundle has no fast graph for {', '.join(missing)}; it has {', '.join(present)}")
        return wanted
    return (["int8"] if "int8" in present else present[:1]) if quick else present


def pick_scenarios(spec: str) -> list[str]:
    if spec == "none":
        return []
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        sys.exit(f"unknown scenarios {unknown}; choose from {','.join(k for k in SCENARIOS if k != 'e-embed')}")
    return [x for s in names for x in ((s, "e-embed") if s == "e" else (s,))]


def engine_shapes(quick: bool, max_length: int) -> list[tuple[int, int]]:
    if quick:
        return [(1, 16), (32, 128)]
    return [(b, min(n, max_length)) for n in LENGTHS for b in BATCHES]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    manifest = Manifest.read(args.bundle)
    tokenizer = load_tokenizer(args.bundle, manifest)
    variants = pick_variants(args.variants, manifest, args.quick)
    rec = report.Recorder(args.out)
    info = rec.add("machine", bundle=str(args.bundle), model=manifest.name, max_length=manifest.max_length,
                   variants=variants, quick=args.quick, **report.machine())
    print(f"# attnserve bench {rec.run_id}: {info['cpu']}, {info['cores']} cores, load {info['loadavg_1m']:.2f}")
    if any(n > manifest.max_length for n in LENGTHS):
        print(f"note: texts longer than max_length={manifest.max_length} are clipped to it")
    plan = _plan(args, manifest)
    config = service_config()
    print(f"service and engine: {config.runs} graph run(s) in flight x {config.threads} intra-op thread(s) each")
    engines = _engines(args, manifest, tokenizer, variants, plan.engine_s, config)
    _invariance(rec, engines, tokenizer, manifest)
    for variant in [] if args.no_grid else variants:
        print(f"## engine {variant}", flush=True)
        runner.engine_grid(engines[variant], engine_shapes(args.quick, manifest.max_length), rec, not args.quick)
    _serve(args, plan, variants, tokenizer, rec, engines)
    if not args.no_traffic:
        print(f"## mixed traffic {variants[0]}: priorities, fair shares, the answer cache", flush=True)
        mixed.measure(args.bundle, variants[0], tokenizer, plan.duration_s, plan.log_dir, rec)
    targets.evaluate(rec, variants, engines.get("fp32") or _fp32(args, manifest, tokenizer, plan.engine_s, config))
    _print(rec, args.out)
    return 0


def _plan(args: argparse.Namespace, manifest: Manifest) -> runner.Plan:
    by_scenario = dict(args.duration)
    duration = by_scenario.pop("", 2.0 if args.quick else 10.0)
    log_dir = Path(tempfile.mkdtemp(prefix="attnserve-bench-"))
    names = pick_scenarios(args.scenarios)
    passes = args.passes if args.passes is not None else 1 if args.quick else 3
    if passes < 1:
        sys.exit("--passes must be 1 or more")
    python, kinds, folder = _infinity(args, manifest, names, log_dir / "hf-home")
    return runner.Plan(args.bundle, manifest.max_length, names, duration, durations=by_scenario,
                       engine_s=0.3 if args.quick else 1.0, quick=args.quick, passes=passes, embed_route=args.route,
                       log_dir=log_dir, infinity=python, infinity_kinds=kinds, infinity_user=folder)


def _infinity(args: argparse.Namespace, manifest: Manifest, names: list[str],
              home: Path) -> tuple[Path | None, tuple[str, ...], Path | None]:
    """(the Python of Infinity's venv, the configurations that run, infinity-user's model folder): the venv
    and the export made now if they are not there yet; each one skipped is said in one line."""
    if args.no_infinity or not set(names) & set(infinity.SCENARIOS):
        return None, (), None
    why = {"infinity": infinity.unsupported(manifest), "infinity-user": infinity.user_unsupported(manifest)}
    for kind, reason in why.items():
        if reason:
            print(f"{kind} skipped: {reason}", flush=True)
    if all(why.values()):
        return None, (), None
    python, said = infinity.ensure_venv()
    runnable = ", ".join(kind for kind, reason in why.items() if not reason)
    print(f"infinity: {said}" if python else f"{runnable} skipped: {said}", flush=True)
    folder = None
    if python and not why["infinity-user"]:
        folder, said = infinity.user_model(python, manifest, home)
        print(f"infinity-user: {said}" if folder else f"infinity-user skipped: {said}", flush=True)
    kinds = (*([] if why["infinity"] else ["infinity"]), *(["infinity-user"] if folder else []))
    return python, (kinds if python else ()), folder


def _engines(args: argparse.Namespace, manifest: Manifest, tokenizer: Tokenizer, variants: list[str], seconds: float,
             config: Config) -> dict[str, EngineBench]:
    runs = 1 if args.quick else 2
    return {v: EngineBench(v, args.bundle / _file(manifest, v), tokenizer, seconds, runs, config) for v in variants}


def _fp32(args: argparse.Namespace, manifest: Manifest, tokenizer: Tokenizer, seconds: float,
          config: Config) -> EngineBench | None:
    entry = manifest.graph("fast", "fp32")
    return EngineBench("fp32", args.bundle / entry.file, tokenizer, seconds, service=config) if entry else None


def _file(manifest: Manifest, variant: str) -> str:
    entry = manifest.graph("fast", variant)
    assert entry is not None  # pick_variants keeps only variants the bundle has
    return entry.file


def _invariance(rec: report.Recorder, engines: dict[str, EngineBench], tokenizer: Tokenizer,
                manifest: Manifest) -> None:
    """Per variant, the served session's largest |alone - batched| (and export's figure, when the manifest
    carries one)."""
    sequences = invariance.texts(tokenizer, manifest.max_length)
    pad_id = int(manifest.model_config_.get("pad_token_id", 0))
    for variant, engine in engines.items():
        measured = getattr(manifest.graph("fast", variant), "measured", None) or {}
        exported = getattr(measured.get("cpu"), "batch_max_abs_diff", None)
        row = rec.add("invariance", variant=variant, texts=len(sequences), exported=exported,
                      max_abs_diff=invariance.batch_max_abs_diff(engine.session, sequences, pad_id))
        print(f"  batch invariance {variant:8s} largest |alone - batched| {row['max_abs_diff']:.2e}", flush=True)


def _serve(args: argparse.Namespace, plan: runner.Plan, variants: list[str], tokenizer: Tokenizer,
           rec: report.Recorder, engines: dict[str, EngineBench]) -> None:
    if not plan.scenarios:
        return
    for variant in variants:
        kinds = ["service", *([] if args.no_naive else ["naive"]), *plan.infinity_kinds]
        print(f"## {', '.join(kinds)} {variant}", flush=True)
        try:
            runner.measure_variant(variant, kinds, plan, tokenizer, rec, engines[variant])
        except RuntimeError as error:  # a server that will not start must not lose the run
            print(f"  {variant} FAILED: {error}", flush=True)
            rec.add("error", variant=variant, error=str(error))
        targets.add_ratios(rec, variant)


def _print(rec: report.Recorder, out: Path) -> None:
    print("\n### Batch invariance (each text alone vs in one mixed batch)\n\n" + report.invariance_table(rec))
    print("\n### Engine (onnxruntime session in-process)\n\n" + report.engine_table(rec))
    if rec.of("median"):
        print("\n### Served (attnserve vs the naive per-request server and Infinity; medians over the passes, "
              "lowest-highest)\n\n" + report.load_table(rec))
    if rec.of("agreement"):
        print("\n### Same model (each text through attnserve and each Infinity configuration)\n\n"
              + report.agreement_table(rec))
    if rec.of("priorities"):
        print("\n### Mixed traffic (callers with keys; bench.mixed)\n\n" + mixed.tables(rec))
    if rec.of("target"):
        print("\n### Targets\n\n" + report.targets_table(rec))
    print(f"\n{len(rec.rows)} rows appended to {out} (run {rec.run_id})")


if __name__ == "__main__":
    sys.exit(main())
