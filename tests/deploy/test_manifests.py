"""deploy/kubernetes, offline: each overlay renders with `kubectl kustomize`; every rendered Kubernetes object
validates strictly (unknown fields fail) against the Kubernetes schemas of kubernetes-validate, at the oldest
version the manifests claim and at the newest the package ships; KEDA's ScaledObject validates against its
schema (tests/deploy/keda_scaledobject_schema.yaml). Then the manifests are checked against the service
itself: the args and ATTNSERVE_* variables parse as `attnserve serve` parses them, the probe paths are its
routes, the ports agree, every metric named is one it exports, and the drain fits the grace period.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from attnserve import pull
from hub.names import ModelName
from service.app import create_app
from service.cli import read_settings
from service.metrics import Metrics
from service.settings import Settings
from tests.deploy.manifests import (
    KUBERNETES,
    OVERLAYS,
    Obj,
    container,
    dockerfile_user,
    env,
    init_container,
    load_schema,
    metric_names_in_files,
    only,
    overlay_id,
    pod_spec,
    probes,
    render,
    served_model,
)

OLDEST_KUBERNETES = "1.30"  # the preStop sleep action is on by default from 1.30
KUBERNETES_VERSIONS = (OLDEST_KUBERNETES, latest_version())
KEDA_SCHEMA = load_schema(Path(__file__).with_name("keda_scaledobject_schema.yaml"))
NAMESPACE = "attnserve"
SIGNAL = "attnserve_inputs_in_flight"
# Variables for what runs inside the service; each is exercised in test_pod_environment.py.
OTHER_VARIABLES = {"ORT_DISABLE_TELEMETRY"}
MODELS = "/models"  # the volume the init container writes the bundle into and the server reads it from
EXPECTED_KINDS = {
    "cpu": {"Namespace", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "HorizontalPodAutoscaler"},
    "gpu": {"Namespace", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "ScaledObject"},
    "keda": {"Namespace", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "ScaledObject"},
}


def validate(obj: Obj, version: str) -> None:
    if obj["apiVersion"].startswith("keda.sh/"):
        jsonschema.validate(obj, KEDA_SCHEMA, cls=jsonschema.Draft202012Validator)
        behavior = obj["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
        if behavior is not None:  # the HPA KEDA makes gets it: check it as the HPA's own schema would
            validate(hpa_with(behavior), version)
    else:
        kubernetes_validate.validate(obj, version, strict=True)  # raises on any error, or a kind it lacks


def hpa_with(behavior: Obj) -> Obj:
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}
    spec = {"scaleTargetRef": target, "maxReplicas": 1, "behavior": behavior}
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"}, "spec": spec}


# -- schemas -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_every_rendered_object_validates_strictly(overlay: str, version: str) -> None:
    objects = render(overlay)
    assert {o["kind"] for o in objects} == EXPECTED_KINDS[overlay]  # never an HPA and a ScaledObject together
    for obj in objects:
        validate(obj, version)


def test_strict_validation_rejects_what_the_api_server_would() -> None:
    deployment = copy.deepcopy(only(render("cpu"), "Deployment"))
    main = deployment["spec"]["template"]["spec"]["containers"][0]
    main["readinesProbe"] = main.pop("readinessProbe")  # a typo
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        validate(deployment, latest_version())


@pytest.mark.parametrize("field, value", [
    (("spec", "minReplicas"), 2),  # the HPA's name, not KEDA's minReplicaCount
    (("spec", "triggers", 0, "metadata", "treshold"), "128"),
    (("spec", "triggers", 0, "metadata", "threshold"), "lots"),
    (("spec", "advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleDown", "stabilizationWindow"), 60),
])
def test_scaledobject_schema_rejects_mistakes(field: tuple[str | int, ...], value: object) -> None:
    scaled = copy.deepcopy(only(render("keda"), "ScaledObject"))
    node = scaled
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value  # type: ignore[index]
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled, latest_version())


# -- the manifests against the service --------------------------------------------------------------------
def served_settings(objects: tuple[Obj, ...], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The container's args and environment read exactly as `attnserve serve` reads them in the pod."""
    variables = env(objects)
    ours = {name for name in variables if name.startswith("ATTNSERVE_")}
    assert set(variables) - ours <= OTHER_VARIABLES
    unknown = {name for name in ours if name.removeprefix("ATTNSERVE_").lower() not in Settings.model_fields}
    assert not unknown, f"not attnserve settings: {unknown}"
    for name in [n for n in os.environ if n.startswith("ATTNSERVE_")]:
        monkeypatch.delenv(name)
    for name in ours:
        monkeypatch.setenv(name, variables[name])
    return read_settings(container(objects)["args"], "attnserve serve")


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_args_env_ports_and_probes_match_the_service(overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(overlay)
    settings = served_settings(objects, monkeypatch)
    (port,) = container(objects)["ports"]
    assert (port["name"], port["containerPort"], settings.port, settings.host) == ("http", 8000, 8000, "0.0.0.0")
    template = only(objects, "Deployment")["spec"]["template"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(settings.port)
    assert template["metadata"]["annotations"]["prometheus.io/path"] in route_paths()
    assert [p["targetPort"] for p in only(objects, "Service")["spec"]["ports"]] == ["http"]
    paths = {name: (probe["httpGet"]["path"], probe["httpGet"]["port"]) for name, probe in probes(objects).items()}
    assert paths == {"startupProbe": ("/health", "http"), "livenessProbe": ("/health", "http"),
                     "readinessProbe": ("/ready", "http")}
    assert {path for path, _ in paths.values()} <= route_paths()


def route_paths() -> set[str]:
    """The service's GET routes, from its OpenAPI document (no lifespan runs, so no bundle is read)."""
    paths = create_app(Settings(bundle=Path("unused"))).openapi()["paths"]
    return {path for path, operations in paths.items() if "get" in operations}


def test_every_metric_named_in_the_manifests_is_exported() -> None:
    named = metric_names_in_files()
    assert SIGNAL in named
    exported = set()
    for family in Metrics().registry.collect():
        exported |= {family.name + suffix for suffix in ("", "_total", "_bucket", "_sum", "_count")}
    assert named <= exported, named - exported


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_drain_finishes_inside_the_grace_period(overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(overlay)
    settings = served_settings(objects, monkeypatch)
    pre_stop = container(objects)["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = pod_spec(objects)["terminationGracePeriodSeconds"]
    # an input admitted just before SIGTERM is run or refused (504) before the drain ends, and the drain
    # (which starts after preStop) ends before the kill
    assert settings.queue_timeout_s < settings.graceful_timeout_s < grace - pre_stop


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_startup_probe_allows_for_warm_up(overlay: str) -> None:
    startup = probes(render(overlay))["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120  # loading, verifying, warming each graph


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_runs_unprivileged_on_a_read_only_root(overlay: str) -> None:
    """Both containers: only /tmp is writable to the server; the init container writes the models volume too."""
    objects = render(overlay)
    pod = pod_spec(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == dockerfile_user()
    volumes = {v["name"]: v for v in pod["volumes"]}
    for box, writable in ((container(objects), {"/tmp"}), (init_container(objects), {"/tmp", MODELS})):
        assert box["securityContext"]["readOnlyRootFilesystem"] is True
        assert box["securityContext"]["allowPrivilegeEscalation"] is False
        assert box["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert {m["mountPath"] for m in box["volumeMounts"]
                if "emptyDir" in volumes[m["name"]] and not m.get("readOnly")} == writable


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_resources_match_the_provider(overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(overlay)
    settings = served_settings(objects, monkeypatch)
    resources = container(objects)["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and {"cpu", "memory"} <= set(resources["limits"])
    # onnxruntime would count the node's cores; one intra-op thread per core of the pod's limit instead
    assert settings.intra_op_threads == int(resources["limits"]["cpu"])
    gpus = resources["limits"].get("nvidia.com/gpu", 0)
    assert (settings.provider, gpus) == (("cuda", 1) if overlay == "gpu" else ("cpu", 0))


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_everything_points_at_the_one_deployment(overlay: str) -> None:
    objects = render(overlay)
    deployment = only(objects, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert only(objects, "Service")["spec"]["selector"].items() <= labels.items()
    assert only(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    scaler = next(o for o in objects if o["kind"] in {"HorizontalPodAutoscaler", "ScaledObject"})
    target = scaler["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert "replicas" not in deployment["spec"]  # the autoscaler owns the count
    assert all(o["metadata"].get("namespace") == NAMESPACE for o in objects if o["kind"] != "Namespace")


@pytest.mark.parametrize("overlay", ["gpu", "keda"], ids=overlay_id)
def test_keda_scales_on_the_signal_before_replicas_refuse(overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(overlay)
    settings = served_settings(objects, monkeypatch)
    (trigger,) = only(objects, "ScaledObject")["spec"]["triggers"]
    metadata = trigger["metadata"]
    assert (trigger["type"], trigger["metricType"]) == ("prometheus", "AverageValue")
    assert metadata["query"] == f'sum({SIGNAL}{{namespace="{NAMESPACE}"}})'
    assert 0 < float(metadata["threshold"]) < settings.max_queue  # scale out well before 429s


# -- the init step: attnserve pull into the volume the server reads ---------------------------------------
def pull_args(objects: tuple[Obj, ...]) -> list[str]:
    """The init container's args as the kubelet runs them: $(ATTNSERVE_MODEL) from the ConfigMap it refers to."""
    pull = init_container(objects)
    (variable,) = [v for v in pull["env"] if v["name"] == "ATTNSERVE_MODEL"]
    reference = variable["valueFrom"]["configMapKeyRef"]
    config = only(objects, "ConfigMap")
    assert (reference["name"], reference["key"]) == (config["metadata"]["name"], "model")  # the hashed name
    return [arg.replace("$(ATTNSERVE_MODEL)", served_model(objects)) for arg in pull["args"]]


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_init_container_pulls_the_configured_model_into_the_served_bundle(overlay: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(overlay)
    args = pull.parser("attnserve pull").parse_args(pull_args(objects))
    name = ModelName.parse(args.name)
    assert (name.alias, name.directory, name.checked_repo()) == (None, None, served_model(objects))  # a hub id
    settings = served_settings(objects, monkeypatch)
    assert [served.path for served in settings.bundle] == [args.out] and settings.model == []
    assert args.out.parent == Path(MODELS)
    mounts = {box["name"]: {m["mountPath"]: m for m in box["volumeMounts"]}
              for box in (container(objects), init_container(objects))}
    assert mounts["attnserve"][MODELS]["readOnly"] is True and not mounts["pull"][MODELS].get("readOnly")
    assert mounts["attnserve"][MODELS]["name"] == mounts["pull"][MODELS]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_init_container_environment_is_read_by_pull(overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its ATTNSERVE_* variables other than the model name's carrier are `attnserve pull` settings; HF_HOME is on
    the writable /tmp."""
    variables = {v["name"]: v.get("value") for v in init_container(render(overlay))["env"]}
    ours = {name for name in variables if name.startswith("ATTNSERVE_")} - {"ATTNSERVE_MODEL"}
    assert {name.removeprefix("ATTNSERVE_").lower() for name in ours} <= set(pull.PullSettings.model_fields)
    assert set(variables) - ours == {"ATTNSERVE_MODEL", "HF_HOME", *OTHER_VARIABLES}
    assert Path(variables["HF_HOME"]).is_relative_to("/tmp")


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_images_export_for_the_init_step_and_the_overlays_own_for_serving(overlay: str) -> None:
    objects = render(overlay)
    assert init_container(objects)["image"] == "attnserve:export"
    assert container(objects)["image"] == f"attnserve:{'gpu' if overlay == 'gpu' else 'cpu'}"


def test_a_new_model_name_renames_the_configmap_and_so_rolls_the_pods(tmp_path: Path) -> None:
    """An overlay that replaces the model (as deploy/README.md shows) gets a ConfigMap of another hashed name, which
    the pod template refers to: the Deployment rolls out with the new model."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(KUBERNETES / "overlays" / "cpu", tmp_path)],  # kustomize wants it relative
        "configMapGenerator": [{"name": "attnserve-model", "behavior": "replace",
                                "literals": ["model=intfloat/e5-small-v2"]}],
    }))
    done = subprocess.run(["kubectl", "kustomize", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    changed = tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)
    assert served_model(changed) == "intfloat/e5-small-v2"
    assert only(changed, "ConfigMap")["metadata"]["name"] != only(render("cpu"), "ConfigMap")["metadata"]["name"]
    assert pull_args(changed)[0] == "intfloat/e5-small-v2"


def mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "Gi" else 1)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=overlay_id)
def test_init_containers_tmp_holds_a_graph(overlay: str) -> None:
    """onnxruntime's graph optimiser (the fp32-opt variant) writes a copy of the graph under /tmp: the default
    MiniLM's 90 MB graph failed in the server's 64 MiB /tmp (make image-check), so the init container has its own."""
    pod = pod_spec(render(overlay))
    volumes = {v["name"]: v for v in pod["volumes"]}
    (pull_tmp,) = [m["name"] for m in init_container(render(overlay))["volumeMounts"] if m["mountPath"] == "/tmp"]
    (server_tmp,) = [m["name"] for m in container(render(overlay))["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert pull_tmp != server_tmp
    assert mebibytes(volumes[pull_tmp]["emptyDir"]["sizeLimit"]) >= 1024
