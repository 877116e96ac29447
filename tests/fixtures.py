"""Session fixtures shared by every test package (registered in tests/conftest.py via pytest_plugins). Each is made
once per run, by whichever pytest-xdist worker asks first (tests.helpers.shared), but live_server: one per worker.

    tiny_checkpoint   a seeded tiny attnserve checkpoint (tests.helpers.tiny; linear head, labels neg/pos)
    tiny_bundle       its fp32 bundle (fast + attention graphs, no fp32-opt: auto serves fp32), name "tiny",
                      version "7": exported once
    tiny_plain_bundle the same model without a classification head: an embedding-only bundle, name "plain"
    variants_bundle   tiny_checkpoint exported with every variant (fp32, fp32-opt, int8, int8-dynamic, fp16), int8
                      calibrated and gated on tests.helpers.tiny.review_texts(400) (--calibration-data)
    cli_bundle        tiny_checkpoint exported by `attnserve export` in a subprocess with the default variants (fp32,
                      fp32-opt), as a user runs it: (the bundle, the finished process with its output)
    tiny_hf_dir       a seeded transformers BertForSequenceClassification saved with save_pretrained
    tiny_hf_bundle    its fp32 bundle
    small_bundle      a wider, deeper, 128-token model whose graph time dominates (the traffic checks)
    medium_bundle     wider still: a text costs about what it costs a real encoder (the cache checks)
    live_server       a real server process on tiny_bundle, for the whole session; its base URL
    head_bundles      a cross-encoder (BERT, XLM-R), a masked LM and a token classifier from transformers,
                      each exported (tests.helpers.heads): name -> Case
    family_export     case name -> that case of tests.helpers.exports exported (fp32), made on first use: every
                      family's bundle is exported once per session, whichever tests ask for it
    cross_encoder_graphs  a small random BERT cross-encoder (tests.helpers.families.save_hf) and its fast and
                      attention graphs, each exported on its own (export.graphs.export_graph, no bundle): (source,
                      fast, attention), read by the export checks of graphs and their parity
    task_model        a jina-v3-shaped sentence-transformers BERT with three PEFT LoRA adapters (tests.helpers.tasks)
    task_bundle       its fp32 bundle with the adapters, name "jina"
    bge_m3_tiny       a tiny random bge-m3 (tests.helpers.bge_m3) and its fp32 bundle: (source, bundle)
    colbert_tiny      tests.helpers.colbert.build_case at the tiny shape (PyLate and colbert-ai layouts with their
                      references' vectors and scores), each layout exported fp32 as `{layout}_bundle` (names
                      "pylate", "colbert_ai")
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers.process import launch_server, stop, wait_ready
from tests.helpers.shared import once
from tests.helpers.tiny import make_tiny_checkpoint, make_tiny_hf_bert

if TYPE_CHECKING:
    from tests.helpers.exports import Exported


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return once(tmp_path_factory, "ckpt-tiny", lambda made: make_tiny_checkpoint(made / "tiny"))


def _exported(source: Path, factory: pytest.TempPathFactory, folder: str, **options: str) -> Path:
    """`source` exported (fp32 only) to a fresh bundle directory called `folder`, once for the run."""
    from export.bundle import export_bundle

    def build(made: Path) -> Path:
        export_bundle(source, made / folder, variants=("fp32",), **options)
        return made / folder
    return once(factory, f"bundle-{folder}", build)


@pytest.fixture(scope="session")
def tiny_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _exported(tiny_checkpoint, tmp_path_factory, "tiny", name="tiny", version="7")


@pytest.fixture(scope="session")
def variants_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every variant of the tiny model, exported once for the export checks (tests/export/test_variants.py) and
    the serving ones (tests/service/test_cache.py)."""
    from export.bundle import export_bundle
    from tests.helpers.tiny import review_texts

    def build(made: Path) -> Path:
        texts, out = made / "texts.txt", made / "tiny-all"
        texts.write_text("\n".join(review_texts(400)) + "\n")
        export_bundle(tiny_checkpoint, out, variants=("fp32-opt", "int8", "int8-dynamic", "fp16"),
                      calibration_data=texts)
        return out
    return once(tmp_path_factory, "variants", build)


@pytest.fixture(scope="session")
def cli_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory,
               ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The CLI's export of the tiny model, once for the CLI's checks (tests/export/test_bundle.py) and the default
    export's (tests/export/test_fusion.py); no --variants, so the defaults."""
    def build(made: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
        argv = [sys.executable, "-m", "attnserve", "export", str(tiny_checkpoint), "--out", str(made / "tiny")]
        return made / "tiny", subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    return once(tmp_path_factory, "cli", build)


@pytest.fixture(scope="session")
def tiny_plain_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkpoint = once(tmp_path_factory, "ckpt-plain", lambda made: make_tiny_checkpoint(made / "plain", head=False))
    return _exported(checkpoint, tmp_path_factory, "plain", name="plain")


@pytest.fixture(scope="session")
def small_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkpoint = once(tmp_path_factory, "ckpt-small", lambda made: make_tiny_checkpoint(made / "small", size="small"))
    return _exported(checkpoint, tmp_path_factory, "small", name="small", version="1")


@pytest.fixture(scope="session")
def medium_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkpoint = once(tmp_path_factory, "ckpt-medium",
                      lambda made: make_tiny_checkpoint(made / "medium", size="medium"))
    return _exported(checkpoint, tmp_path_factory, "medium", name="medium", version="1")


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return once(tmp_path_factory, "hf", lambda made: make_tiny_hf_bert(made / "tiny-bert"))


@pytest.fixture(scope="session")
def tiny_hf_bundle(tiny_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _exported(tiny_hf_dir, tmp_path_factory, "tiny-bert")


@pytest.fixture(scope="session")
def live_server(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `python -m attnserve serve` on 127.0.0.1 (uvicorn, httptools) on the tiny bundle; its base URL."""
    server = launch_server(tiny_bundle, tmp_path_factory.mktemp("live") / "server.log")
    if not wait_ready(server, 60):
        _, log = stop(server)
        pytest.fail(f"server did not become ready:\n{log}")
    yield server.url
    status, log = stop(server)
    assert status == 0, log


@pytest.fixture(scope="session")
def head_bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from tests.helpers.heads import export_cases

    return once(tmp_path_factory, "heads", export_cases)


@pytest.fixture(scope="session")
def family_export(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Exported]:
    from tests.helpers.exports import export_case  # torch and transformers: only for the tests that ask

    made: dict[str, Exported] = {}

    def get(name: str) -> Exported:
        if name not in made:
            made[name] = once(tmp_path_factory, f"family-{name}", lambda root: export_case(name, root))
        return made[name]
    return get


@pytest.fixture(scope="session")
def cross_encoder_graphs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    def build(made: Path) -> tuple[Path, Path, Path]:
        from export.graphs import export_graph  # torch and transformers: only for the tests that ask
        from model.load import load_model
        from tests.helpers.families import RELEVANCE, save_hf

        save_hf(made / "source", "bert", "ForSequenceClassification", "small", names=RELEVANCE)
        encoder = load_model(made / "source").encoder
        for kind in ("fast", "attention"):
            export_graph(encoder, kind, made / f"{kind}.onnx")
        return made / "source", made / "fast.onnx", made / "attention.onnx"
    return once(tmp_path_factory, "cross-encoder-graphs", build)


@pytest.fixture(scope="session")
def task_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.helpers.tasks import make_task_model  # torch, transformers and peft: only for the tests that ask

    return once(tmp_path_factory, "tasks", lambda made: make_task_model(made / "jina"))


@pytest.fixture(scope="session")
def task_bundle(task_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.tasks import export_task_bundle

    return once(tmp_path_factory, "bundle-jina", lambda made: export_task_bundle(task_model, made / "jina"))


@pytest.fixture(scope="session")
def bge_m3_tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from export.bundle import export_bundle
    from tests.helpers import bge_m3

    def build(root: Path) -> tuple[Path, Path]:
        bge_m3.save_bge_m3(root / "source", "tiny")
        export_bundle(root / "source", root / "bundle", variants=("fp32",))
        return root / "source", root / "bundle"
    return once(tmp_path_factory, "bge-m3-tiny", build)


@pytest.fixture(scope="session")
def colbert_tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from export.bundle import export_bundle
    from tests.helpers import colbert

    def build(root: Path) -> dict[str, Any]:
        built = colbert.build_case(root, "tiny")
        for layout in ("pylate", "colbert_ai"):
            built[f"{layout}_bundle"] = root / f"bundle-{layout}"
            export_bundle(built[f"{layout}_dir"], built[f"{layout}_bundle"], variants=("fp32",), name=layout)
        return built
    return once(tmp_path_factory, "colbert-tiny", build)
