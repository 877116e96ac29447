"""The served models: one `ServedModel` (its own sessions, batcher and admission permits) per bundle, by
name, in the order the bundles were given; the first is the default.

With one model served, any name reaches it (clients that send a `model` field keep working whatever they
send); with several, a request names one of them or gets ModelNotFound listing the served names, and a
request that names none goes to the first. `NAME:TASK` names model NAME running its LoRA adapter TASK
(`ServedModel.with_adapter`: 422 for a task it does not have); with one model served, any other name whose
part after its last colon is one of that model's adapters selects that adapter (a name such as `x:latest`
still reaches the model as it is). All the models share the graph threads and `graph_runs` run
slots (1 by default), so no more graph runs overlap on the CPU than the session threads were sized for, and
one more thread that runs only interactive batches beside bulk ones (the interactive lane); and one pool for
tokenising. Bulk batches and the tokenising of bulk requests have threads of their own, at a lower CPU
priority, holding the same run slots (`inference.scheduling.slots`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from inference.errors import ModelNotFound, StartupError
from inference.options import LoadOptions, ServingOptions
from inference.runtime.loading import LoadedBundle, Opened, load_bundle
from inference.scheduling.batcher import Batcher
from inference.scheduling.cache import AnswerCache
from inference.scheduling.fairqueue import Priority
from inference.scheduling.observer import BatchObserver
from inference.scheduling.slots import SharedSlots, background_pool
from inference.scheduling.work import BatchLimits
from inference.served import ServedModel

# A served model's name is one URL path segment (/v2/models/{name}/infer): no slash, no spaces.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class ServedBundle(BaseModel):
    """A bundle to serve, and the name to serve it under (None: the manifest's)."""

    model_config = ConfigDict(frozen=True)
    name: str | None = None
    path: Path


def load_bundles(bundles: Sequence[ServedBundle], options: LoadOptions) -> list[LoadedBundle]:
    """Every bundle, verified and opened, in order. Graphs and tokenizers with the same sha256 (two bundles of
    one model) are opened once and shared."""
    opened: Opened = {}
    return [load_bundle(bundle.path, options, opened=opened) for bundle in bundles]


def served_names(bundles: Sequence[ServedBundle], loaded: Sequence[LoadedBundle]) -> list[str]:
    """Each bundle's served name: the one given or its manifest's. Names must be unique and, with several
    models, usable in a URL path; a StartupError says which bundle to name."""
    names = [b.name or lb.manifest.name for b, lb in zip(bundles, loaded, strict=True)]
    for bundle, name in zip(bundles, names, strict=True):
        if names.count(name) > 1:
            raise StartupError(f"two bundles are named {name!r} ({bundle.path} is one); give each a name "
                               "with NAME=DIR (ATTNSERVE_BUNDLE, --bundle)")
        if len(names) > 1 and not MODEL_NAME.match(name):
            raise StartupError(f"the manifest name {name!r} of {bundle.path} cannot be used in a URL; give it "
                               "a name with NAME=DIR (ATTNSERVE_BUNDLE, --bundle)")
    return names


class ModelRegistry:
    def __init__(self, models: dict[str, ServedModel]) -> None:
        if not models:
            raise ValueError("no models")
        self._models = models

    @property
    def names(self) -> list[str]:
        return list(self._models)

    @property
    def default(self) -> ServedModel:
        return next(iter(self._models.values()))

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def resolve(self, name: str | None) -> ServedModel:
        """The model a request naming `name` (None: no name) goes to: a served name, or `base:adapter` (that
        model with its adapter)."""
        if name is None:
            return self.default
        model = self._models.get(name)
        if model is not None:
            return model
        base, colon, adapter = name.rpartition(":")
        if colon and base in self._models:
            return self._models[base].with_adapter(adapter)
        if len(self._models) == 1:  # any name reaches it; one ending in one of its adapters selects it
            return self.default.with_adapter(adapter) if colon and adapter in self.default.adapters else self.default
        raise ModelNotFound(f"no model named {quoted(name)} is served; served models: {', '.join(self._models)}")

    async def check_ready(self) -> None:
        """NotReady naming the first model that is not ready."""
        for model in self:
            await model.ensure_ready()

    def drain(self) -> None:
        """Shutdown has begun: every model runs what waits at once (`Batcher.drain`)."""
        for model in self:
            model.drain()

    def busy(self, name: str | None, priority: Priority = "interactive") -> bool:
        """Whether a request of `priority` to `name` would surely be refused: that model's permits for the class
        are all taken, or, when the model is not known before the body is read (None), every model's are.
        Unknown names: not busy."""
        if name is None or len(self._models) == 1:
            return all(model.batcher.full_for(priority) for model in self)
        model = self._models.get(name) or self._models.get(name.rpartition(":")[0])  # base:adapter: the base's
        return model is not None and model.batcher.full_for(priority)


def quoted(name: str, most: int = 64) -> str:
    """A requested name for an error message, cut short: error messages echo little of what was sent."""
    return repr(name if len(name) <= most else name[:most] + "...")


def start_models(
    names: Sequence[str], loaded: Sequence[LoadedBundle], options: ServingOptions,
    observer: Callable[[str], BatchObserver] = lambda name: BatchObserver(),
) -> tuple[ModelRegistry, list[Executor]]:
    """One served model with a started batcher per bundle, sharing the graph threads, the tokenising pool and
    the answer cache (must run on the event loop that will serve them); the executors, to shut down after the
    batchers stop."""
    slots = threading.Semaphore(options.graph_runs)  # all models' runs, of either class
    bulk_priority = (options.bulk_nice, options.bulk_idle_policy)
    graphs = SharedSlots(ThreadPoolExecutor(options.graph_runs, thread_name_prefix="attnserve-graph"), slots)
    bulk = SharedSlots(background_pool(options.graph_runs, "attnserve-bulk", *bulk_priority), slots)
    lane = ThreadPoolExecutor(1, thread_name_prefix="attnserve-lane")  # interactive batches beside bulk ones
    cpu = ThreadPoolExecutor(2, thread_name_prefix="attnserve-cpu")  # tokenising and post-processing
    bulk_cpu = background_pool(2, "attnserve-bulk-cpu", *bulk_priority)  # ... of bulk requests
    limits, request_limits = BatchLimits.of(options, options.graph_runs), options.request_limits()
    answers, models = AnswerCache(options.cache_bytes), {}
    def served(name: str, bundle: LoadedBundle) -> ServedModel:
        batcher = Batcher(bundle.run_batch, limits, graphs, observer(name), lane, bulk)
        batcher.start()
        model = ServedModel(name, bundle, batcher, request_limits, cpu, observer(name), answers, bulk_cpu)
        if bundle.image_tower is not None:  # a two-tower model: its image encoder, its own batcher, one name
            model.image_tower = served(name, bundle.image_tower)
        return model

    for name, bundle in zip(names, loaded, strict=True):
        models[name] = served(name, bundle)
    return ModelRegistry(models), [graphs, bulk, lane, cpu, bulk_cpu]
