"""The served models: one engine (its own sessions, batcher and admission permits) per bundle, by name,
in the order the bundles were given; the first is the default.

With one model served, any name reaches it (clients that send a `model` field keep working whatever they
send); with several, a request names one of them or gets 404 listing the served names, and a request
that names none goes to the first. All the engines share the graph threads (ATTNSERVE_GRAPH_RUNS, 1 by
default), so no more graph runs overlap on the CPU than the session threads were sized for, and one pool
for tokenising.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from service.batcher import Batcher, BatchLimits
from service.engine import Engine
from service.errors import ModelNotFound, NotReady
from service.limits import EngineLimits
from service.metrics import Metrics
from service.runtime import Opened, Runtime, StartupError, load_runtime
from service.settings import MODEL_NAME, Settings


def load_runtimes(settings: Settings) -> list[Runtime]:
    """Every bundle of `settings`, verified and opened, in order. Graphs and tokenizers with the same sha256
    (two bundles of one model) are opened once and shared."""
    opened: Opened = {}
    return [load_runtime(settings.for_bundle(bundle), opened) for bundle in settings.bundle]


def served_names(settings: Settings, runtimes: Sequence[Runtime]) -> list[str]:
    """Each bundle's served name: the one given (NAME=DIR) or its manifest's. Names must be unique and,
    with several models, usable in a URL path; a StartupError says which bundle to name."""
    names = [b.name or r.manifest.name for b, r in zip(settings.bundle, runtimes, strict=True)]
    for bundle, name in zip(settings.bundle, names, strict=True):
        if names.count(name) > 1:
            raise StartupError(f"two bundles are named {name!r} ({bundle.path} is one); give each a name "
                               "with NAME=DIR (ATTNSERVE_BUNDLE, --bundle)")
        if len(names) > 1 and not MODEL_NAME.match(name):
            raise StartupError(f"the manifest name {name!r} of {bundle.path} cannot be used in a URL; give it "
                               "a name with NAME=DIR (ATTNSERVE_BUNDLE, --bundle)")
    return names


class Models:
    def __init__(self, engines: dict[str, Engine]) -> None:
        if not engines:
            raise ValueError("no models")
        self._engines = engines

    @property
    def names(self) -> list[str]:
        return list(self._engines)

    @property
    def default(self) -> Engine:
        return next(iter(self._engines.values()))

    def __iter__(self) -> Iterator[Engine]:
        return iter(self._engines.values())

    def __len__(self) -> int:
        return len(self._engines)

    def resolve(self, name: str | None) -> Engine:
        """The engine a request naming `name` (None: no name) goes to."""
        if name is None or len(self._engines) == 1:
            return self.default
        engine = self._engines.get(name)
        if engine is None:
            raise ModelNotFound(f"no model named {quoted(name)} is served; served models: {', '.join(self._engines)}")
        return engine

    async def check_ready(self) -> None:
        """NotReady naming the first model that is not ready."""
        for engine in self:
            await ensure_ready(engine)

    def busy(self, name: str | None) -> bool:
        """Whether a request to `name` would surely be refused: that model's permits are all taken, or, when
        the model is not known before the body is read (None), every model's are. Unknown names: not busy
        (the route answers 404)."""
        if name is None or len(self._engines) == 1:
            return all(engine.batcher.full for engine in self)
        engine = self._engines.get(name)
        return engine is not None and engine.batcher.full


async def ensure_ready(engine: Engine) -> None:
    """NotReady unless `engine` is warm and its inference works (after a failure, a probe run decides)."""
    if not await engine.check_ready():
        state = "warming up" if not engine.warm else "the last inference failed"
        raise NotReady(f"model {engine.name}: {state}")


def quoted(name: str, most: int = 64) -> str:
    """A requested name for an error message, cut short: error bodies echo little of what was sent."""
    return repr(name if len(name) <= most else name[:most] + "...")


def start_models(
    settings: Settings, runtimes: Sequence[Runtime], metrics: Metrics,
) -> tuple[Models, list[ThreadPoolExecutor]]:
    """One engine and started batcher per runtime, sharing the graph thread and the tokenising pool."""
    runs = settings.graph_runs
    graphs = ThreadPoolExecutor(runs, thread_name_prefix="attnserve-graph")  # graph runs in flight, all models
    cpu = ThreadPoolExecutor(2, thread_name_prefix="attnserve-cpu")  # tokenising and post-processing
    limits = BatchLimits(
        settings.max_batch_tokens, settings.max_batch_size, settings.max_queue, settings.queue_timeout_s,
        settings.batch_wait_ms / 1000, runs,
    )
    engine_limits = EngineLimits(
        settings.max_inputs, settings.max_input_chars, settings.truncate, settings.attention_cap_bytes,
        settings.max_chunked_input_chars, settings.max_windows_per_input, settings.embed_all_cap_bytes,
    )
    engines = {}
    for name, runtime in zip(served_names(settings, runtimes), runtimes, strict=True):
        observer = metrics.for_model(name)
        batcher = Batcher(runtime.run_batch, limits, graphs, observer)
        batcher.start()
        engines[name] = Engine(runtime, batcher, engine_limits, cpu, observer, name)
    return Models(engines), [graphs, cpu]
