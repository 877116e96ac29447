"""The Ray Data path: the map_batches keyword per Ray version, the actors' resources, and runs on one local
Ray instance (2 CPUs, no dashboard, no usage stats; started once: that is the slow part) whose rows, sorted
by id, equal the local job's, without and with --chunking."""

from __future__ import annotations

import inspect
import io
import signal
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from inference.options import LoadOptions
from inference.runtime.loading import load_bundle
from jobs.embedding import FINGERPRINT_KEY, Chunking, JobError, JobOutput
from jobs.inputs import Columns
from jobs.local import Job, Summary, run
from jobs.ray import RayOptions, actor_resources, pool_arguments, run_on_ray
from tests.jobs.corpus import job_model, long_texts, output, rejects, texts, vectors, write


def _strategy(**kwargs: int) -> tuple[str, dict[str, int]]:
    return ("ActorPoolStrategy", kwargs)


@pytest.mark.parametrize("version, expected", [
    ("2.8.1", {"compute": ("ActorPoolStrategy", {"min_size": 3, "max_size": 3})}),
    ("2.9.0", {"concurrency": 3}),
    ("2.50.1", {"concurrency": 3}),
    ("2.51.0", {"compute": ("ActorPoolStrategy", {"min_size": 3, "max_size": 3})}),
    ("2.60.0", {"compute": ("ActorPoolStrategy", {"min_size": 3, "max_size": 3})}),
    ("3.0.0.dev0", {"compute": ("ActorPoolStrategy", {"min_size": 3, "max_size": 3})}),
])
def test_pool_keyword_follows_the_ray_version(version: str, expected: dict) -> None:
    assert pool_arguments(version, 3, _strategy) == expected


def test_the_installed_rays_map_batches_takes_the_chosen_keyword() -> None:
    import ray
    import ray.data

    chosen = pool_arguments(ray.__version__, 2, ray.data.ActorPoolStrategy)
    assert set(chosen) <= set(inspect.signature(ray.data.Dataset.map_batches).parameters)


@pytest.mark.parametrize("provider, options, cluster, expected", [
    ("cpu", RayOptions("local"), {"CPU": 8.0}, {"num_cpus": 1, "num_gpus": 0, "actors": 7}),
    ("cpu", RayOptions("local", cpus_per_actor=2), {"CPU": 8.0}, {"num_cpus": 2, "num_gpus": 0, "actors": 3}),
    ("cuda", RayOptions("local"), {"CPU": 8.0, "GPU": 2.0}, {"num_cpus": 1, "num_gpus": 1, "actors": 2}),
    ("cpu", RayOptions("local", actors=5), {"CPU": 2.0}, {"num_cpus": 1, "num_gpus": 0, "actors": 5}),
])
def test_actor_resources(provider: str, options: RayOptions, cluster: dict, expected: dict) -> None:
    assert actor_resources(provider, options, cluster) == expected


def test_no_room_for_an_actor_is_an_error() -> None:
    with pytest.raises(JobError, match="no room for an engine actor"):
        actor_resources("cpu", RayOptions("local"), {"CPU": 1.0})


@pytest.fixture(scope="module")
def local_ray():
    """ray.init installs Ray's own SIGTERM handler in this process and ray.shutdown leaves it: the handlers
    before it are put back, so the rest of the run answers SIGTERM and SIGINT as it did."""
    import ray  # the ray extra: make install puts it in, so a missing ray fails here rather than skips

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RAY_USAGE_STATS_ENABLED", "0")  # no usage report to the network
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            yield ray
            ray.shutdown()
    finally:
        for sig, handler in handlers.items():
            if handler is not None:  # None: set outside Python, so it cannot be put back from here
                signal.signal(sig, handler)


def local_and_on_ray(job: Job, tiny_bundle: Path, batch_rows: int) -> tuple[Summary, Summary]:
    """The job run locally (into job.out), then on the Ray instance with the same settings (into the
    sibling folder `ray`); both summaries, after checking they count the same rows, rejects and tokens."""
    model = job_model(tiny_bundle)
    local = run(job, model, io.StringIO())
    on_ray = run_on_ray(Job(job.inputs, job.out.parent / "ray", None, job.columns, job.output), model,
                        RayOptions("local", batch_rows=batch_rows))
    assert (on_ray.rows, on_ray.written, on_ray.rejected, on_ray.tokens) == \
        (local.rows, local.written, local.rejected, local.tokens)
    return local, on_ray


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The lowest cosine between the rows of a and b, (N, D) each."""
    return float(((a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


@pytest.mark.slow
def test_ray_rows_sorted_by_id_equal_the_local_jobs(local_ray, tiny_bundle: Path, tmp_path: Path) -> None:
    rows = [{"id": f"d{i:03d}", "text": t if i % 17 else ""} for i, t in enumerate(texts(300))]
    first, second = write(tmp_path / "a.jsonl", rows[:180]), write(tmp_path / "b.csv", rows[180:])
    job = Job((first, second), tmp_path / "local", None, Columns("text", "id"),
              JobOutput(classify=True, token_count=True))
    local, _ = local_and_on_ray(job, tiny_bundle, batch_rows=64)
    assert (local.rows, local.written, local.rejected) == (300, 282, 18)
    ours, theirs = output(tmp_path / "local"), output(tmp_path / "ray")
    assert theirs.schema == ours.schema
    fingerprints = {pq.read_schema(f).metadata[FINGERPRINT_KEY] for f in (tmp_path / "ray").glob("*.parquet")}
    assert fingerprints == {load_bundle(tiny_bundle, LoadOptions(), kinds=("fast",)).fingerprint.encode()}
    for column in ("id", "tokens", "label"):
        assert theirs.column(column).equals(ours.column(column)), column
    a, b = vectors(ours), vectors(theirs)  # (N, D); other batches than the local job's: equal to float rounding
    assert min_cosine(a, b) >= 0.99999
    np.testing.assert_allclose(b, a, atol=1e-6)
    np.testing.assert_allclose(vectors(theirs, "scores"), vectors(ours, "scores"), atol=1e-6)
    assert rejects(tmp_path / "ray") == rejects(tmp_path / "local")


@pytest.mark.slow
@pytest.mark.parametrize("mode, columns", [("mean", ("id", "tokens", "label")),
                                           ("windows", ("id", "window", "start", "stop", "tokens", "label"))])
def test_ray_with_chunking_equals_the_local_job(local_ray, tiny_bundle: Path, tmp_path: Path, mode: str,
                                                columns: tuple[str, ...]) -> None:
    """--chunking on Ray (the same Ray instance): the same rows, spans and vectors as the local job; a
    document over the window cap is rejected by the read task as the local job rejects it."""
    docs = [t if i % 5 else "" for i, t in enumerate(long_texts(12))] + texts(20) + [" ".join(long_texts(12))]
    rows = [{"id": f"d{i:03d}", "text": t} for i, t in enumerate(docs)]
    first, second = write(tmp_path / "a.jsonl", rows[:20]), write(tmp_path / "b.parquet", rows[20:])
    job = Job((first, second), tmp_path / "local", None, Columns("text", "id"),
              JobOutput(classify=True, token_count=True, chunking=Chunking(mode, 16, 30)))  # type: ignore[arg-type]
    local, _ = local_and_on_ray(job, tiny_bundle, batch_rows=8)
    assert (local.rows, local.written, local.rejected) == (33, 29, 4)
    assert rejects(tmp_path / "ray") == rejects(tmp_path / "local")
    assert "windows, over the limit of 30" in rejects(tmp_path / "local")[-1]["reason"]
    ours, theirs = output(tmp_path / "local"), output(tmp_path / "ray")
    assert theirs.schema == ours.schema and theirs.num_rows == ours.num_rows
    assert ours.num_rows == 29 if mode == "mean" else ours.num_rows >= 29 + 9  # 9 long ones: 2 windows or more
    for column in columns:
        assert theirs.column(column).equals(ours.column(column)), column
    a, b = vectors(ours), vectors(theirs)  # (N, D) or (M, D)
    assert min_cosine(a, b) >= 0.99999
    np.testing.assert_allclose(vectors(theirs, "scores"), vectors(ours, "scores"), atol=1e-6)
