"""--outputs on multi-vector bundles: a tiny random bge-m3's three outputs equal BGEM3FlagModel.encode's (dense_vecs,
lexical_weights, colbert_vecs), from one graph run per batch; float16 token vectors within float16 rounding; a tiny
PyLate ColBERT's documents equal PyLate's; what cannot be asked is refused, a resume with other outputs too."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from inference.runtime.graphs import Graph
from jobs.cli import main
from jobs.inputs import Columns
from jobs.local import Job, run
from jobs.options import JobError, JobOutput
from tests.helpers import bge_m3
from tests.helpers import colbert as ref
from tests.jobs.corpus import job_model, output, write

TOLERANCE = 1e-5
TEXTS = bge_m3.TEXTS  # 1 to ~40 tokens, one with <unk>s
ALL = ("dense", "sparse", "multi")


@pytest.fixture(scope="module")
def bge(bge_m3_tiny: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The session's tiny bge-m3 (tests/fixtures.py) and its reference's outputs for TEXTS."""
    source, bundle = bge_m3_tiny
    expected = bge_m3.encode_reference(bge_m3.reference_model(source), TEXTS, 64)
    docs = write(tmp_path_factory.mktemp("bge-m3-job") / "docs.jsonl",
                 [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)])
    return dict(bundle=bundle, expected=expected, docs=docs)


def _run(bundle: Path, docs: Path, out: Path, max_batch_size: int = 64, **output: Any):
    job = Job((docs,), out, columns=Columns("text", "id"), output=JobOutput(**output))  # type: ignore[call-arg]
    return run(job, job_model(bundle, max_batch_size), io.StringIO())


def _multi(table: pa.Table) -> list[np.ndarray]:
    return [np.asarray(row, dtype=np.float32) for row in table.column("multi").to_pylist()]


def test_three_outputs_equal_bgem3_from_one_run_per_batch(bge, tmp_path: Path, monkeypatch) -> None:
    runs: list[tuple[list[str], int]] = []
    real = Graph.run

    def counting(self: Graph, sequences, adapters=None):
        runs.append((list(self.outputs), len(sequences)))
        return real(self, sequences, adapters)

    monkeypatch.setattr(Graph, "run", counting)
    _run(bge["bundle"], bge["docs"], tmp_path / "out", max_batch_size=4, outputs=ALL)
    monkeypatch.undo()
    probe, *batches = runs  # the load's smoke run of one sequence (inference.runtime.loading), then the job's batches
    assert probe[1] == 1 and sum(size for _, size in batches) == len(TEXTS)
    assert len(batches) == 3 and all(sorted(o) == ["embeddings", "multi_vectors", "token_weights"] for o, _ in batches)
    table, expected = output(tmp_path / "out"), bge["expected"]
    assert table.column_names == ["id", "embedding", "sparse", "multi"]
    assert table.column("id").to_pylist() == [f"d{i}" for i in range(len(TEXTS))]
    dense = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
    assert np.abs(dense - expected["dense_vecs"]).max() <= TOLERANCE
    for row, want in zip(table.column("sparse").to_pylist(), expected["lexical_weights"], strict=True):
        assert [str(e["index"]) for e in row] == sorted(want, key=int)
        assert max((abs(e["value"] - float(want[str(e["index"])])) for e in row), default=0.0) <= TOLERANCE
    ref.assert_equal_vectors(_multi(table), list(expected["colbert_vecs"]), TOLERANCE)


def test_float16_token_vectors_and_outputs_asked_alone(bge, tmp_path: Path) -> None:
    _run(bge["bundle"], bge["docs"], tmp_path / "out", outputs=("multi",), multi_dtype="float16")
    table, want = output(tmp_path / "out"), list(bge["expected"]["colbert_vecs"])
    assert table.column_names == ["id", "multi"]
    assert table.schema.field("multi").type.value_type.value_type == pa.float16()
    got = _multi(table)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want, strict=True):  # each value as float16 rounds the reference's (unit vectors: < 1)
        assert np.abs(g - w.astype(np.float16).astype(np.float32)).max() <= 2.0 ** -11


def test_pylate_documents_equal_pylates(colbert_tiny: dict[str, Any], tmp_path: Path) -> None:
    built, bundle = colbert_tiny, colbert_tiny["pylate_bundle"]  # the session's tiny PyLate case
    docs = write(tmp_path / "docs.jsonl", [{"id": str(i), "text": t} for i, t in enumerate(ref.DOCUMENTS)])
    _run(bundle, docs, tmp_path / "out", max_batch_size=2, outputs=("multi",), input_type="document")
    ref.assert_equal_vectors(_multi(output(tmp_path / "out")), built["pylate"]["documents"], TOLERANCE)
    queries = write(tmp_path / "q.jsonl", [{"id": str(i), "text": t} for i, t in enumerate(ref.QUERIES)])
    _run(bundle, queries, tmp_path / "q", outputs=("multi",), input_type="query")
    ref.assert_equal_vectors(_multi(output(tmp_path / "q")), built["pylate"]["queries"], TOLERANCE)


def test_refusals(bge, tiny_bundle: Path, tmp_path: Path, capsys) -> None:
    with pytest.raises(JobError, match="no token_weights output"):
        _run(tiny_bundle, bge["docs"], tmp_path / "plain", outputs=("dense", "sparse"))
    with pytest.raises(JobError, match="no multi_vectors output"):
        _run(tiny_bundle, bge["docs"], tmp_path / "plain", outputs=("multi",))
    with pytest.raises(JobError, match="--sparse does not go with --outputs"):
        _run(bge["bundle"], bge["docs"], tmp_path / "both", outputs=("multi",), sparse=True)
    with pytest.raises(JobError, match="--prompt-name"):  # the model's own prefixes, never silently another
        _run(bge["bundle"], bge["docs"], tmp_path / "prompt", outputs=("multi",), prompt_name="query")
    args = [str(bge["docs"]), "--bundle", str(bge["bundle"]), "--id-column", "id"]
    assert main([*args, "--out", str(tmp_path / "bad"), "--outputs", "dense,colbert"]) == 2
    assert "'colbert'" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "bad"), "--multi-dtype", "float16"]) == 2
    assert main([*args, "--out", str(tmp_path / "o"), "--outputs", "dense"]) == 0
    assert main([*args, "--out", str(tmp_path / "o"), "--outputs", "dense,multi"]) == 2  # a resume, other outputs
    assert "output" in capsys.readouterr().err
