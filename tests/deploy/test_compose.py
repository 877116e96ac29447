"""deploy/compose.yaml (and its GPU override, deploy/compose.gpu.yaml), offline: each parses strictly as a Compose
file (compose-spec, the Rust compose_spec crate's parser: unknown keys and values fail), with its ${VAR:-default}
interpolated as Compose does. Then the two steps against attnserve itself: `pull` runs the export image's `attnserve
pull` of the model into the `models` volume, `serve` starts only once it succeeded and its args serve that bundle
from the same volume, read-only, on the port it publishes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_spec import PyCompose

from attnserve import pull
from bench.procs import ROOT
from hub.names import ModelName
from service.cli import read_settings

COMPOSE = ROOT / "deploy" / "compose.yaml"
GPU = ROOT / "deploy" / "compose.gpu.yaml"
INTERPOLATION = re.compile(r"\$\{(\w+):-([^}]*)\}")


def interpolated(path: Path, variables: dict[str, str] | None = None) -> dict[str, Any]:
    """The file as Compose reads it: each ${VAR:-default} is VAR from `variables`, else its default."""
    text = INTERPOLATION.sub(lambda m: (variables or {}).get(m.group(1), m.group(2)), path.read_text())
    assert "$" not in text, "an interpolation this test does not read"
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


@pytest.mark.parametrize("path", [COMPOSE, GPU], ids=lambda path: path.name)
def test_parses_strictly_as_a_compose_file(path: Path) -> None:
    # ValueError on any key or value the Compose spec does not have
    PyCompose.from_yaml(yaml.safe_dump(interpolated(path)))


def test_strict_parsing_rejects_what_compose_would() -> None:
    broken = interpolated(COMPOSE)
    broken["services"]["serve"]["depends_on"]["pull"]["condition"] = "service_completed"
    with pytest.raises(ValueError, match="condition"):
        PyCompose.from_yaml(yaml.safe_dump(broken))


def test_serve_starts_once_pull_succeeded_and_serves_its_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    services = interpolated(COMPOSE)["services"]
    assert services["serve"]["depends_on"] == {"pull": {"condition": "service_completed_successfully"}}
    args = pull.parser("attnserve pull").parse_args(services["pull"]["command"])
    assert ModelName.parse(args.name).checked_repo() == "BAAI/bge-small-en-v1.5"
    for name in [n for n in os.environ if n.startswith("ATTNSERVE_")]:
        monkeypatch.delenv(name)
    settings = read_settings(services["serve"]["command"], "attnserve serve")
    assert [served.path for served in settings.bundle] == [args.out] and settings.model == []
    volume, folder = services["pull"]["volumes"][0].split(":")
    assert services["serve"]["volumes"] == [f"{volume}:{folder}:ro"] and args.out.parent == Path(folder)
    assert volume in interpolated(COMPOSE)["volumes"]
    assert services["serve"]["ports"] == [f"{settings.port}:{settings.port}"]
    assert (services["pull"]["image"], services["serve"]["image"]) == ("attnserve:export", "attnserve:cpu")


def test_the_model_is_one_variable() -> None:
    services = interpolated(COMPOSE, {"ATTNSERVE_MODEL": "intfloat/e5-small-v2@main"})["services"]
    assert services["pull"]["command"][0] == "intfloat/e5-small-v2@main"


def test_both_steps_run_on_a_read_only_root_with_a_writable_tmp() -> None:
    for service in interpolated(COMPOSE)["services"].values():
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"]
    assert interpolated(COMPOSE)["services"]["pull"]["environment"]["HF_HOME"].startswith("/tmp/")


def test_gpu_override_serves_the_gpu_image_on_cuda() -> None:
    serve = interpolated(GPU)["services"]["serve"]
    assert serve["image"] == "attnserve:gpu" and serve["environment"]["ATTNSERVE_PROVIDER"] == "cuda"
    (device,) = serve["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and device["count"] == 1
