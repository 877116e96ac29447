"""`make image-check`: runs the images `make image` built, and fails loudly on any miss.

CPU image: serves the bundle (mounted at /bundle), answers /ready, its HEALTHCHECK, and the README's /embed example
with the numbers a server started from this checkout on the host gives (max abs diff <= 1e-6); the serving
process runs as uid 10001; torch is not importable. GPU image: every shared-library dependency of onnxruntime's
CUDA provider resolves (ldd, with the NVIDIA wheels' library folders on the path) except the host driver's
libcuda.so.1, and `onnxruntime.preload_dlls()` loads CUDA and cuDNN from those wheels (read back from
/proc/self/maps); served with provider auto on a host without a GPU it logs why CUDA did not run and serves on CPU
with the same numbers; with provider cuda it refuses to start. Onboarding a model by name, as each Kubernetes pod and
deploy/compose.yaml do it: the export image (uid 10001, a CPU torch) runs `attnserve pull` of a local model directory
into a host folder, on a read-only root with a 4 GB /tmp as the init container has; the CPU image serves what it
wrote, and answers the README's /embed example as `attnserve serve --model DIR` on the host does (which exports the
same directory with this checkout). Prints each image's size and the pull's time.

    python deploy/image/check.py --bundle bundles/default --model checkpoints/default
        (ENGINE=podman|docker; CPU_TAG, GPU_TAG, EXPORT_TAG)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-6
UID = "10001"
FALLBACK_LINE = "serving on CPU"
# preload_dlls loads these from onnxruntime-gpu's cuda and cudnn extras (site-packages/nvidia/...).
PRELOADED = ("libcudart.so", "libcublas.so", "libcublasLt.so", "libcufft.so", "libcurand.so", "libnvrtc.so",
             "libcudnn.so")
# Run inside the GPU image: ldd of the CUDA provider and of every library in the NVIDIA wheels (cuDNN's engines
# among them), with the wheels' folders on the path as preload_dlls finds them; then preload_dlls in this process
# and the libraries it mapped from site-packages/nvidia. One JSON line last.
LIBRARIES = r"""
import glob, json, os, subprocess
import onnxruntime as ort
capi = os.path.join(os.path.dirname(ort.__file__), "capi")
site = os.path.dirname(os.path.dirname(ort.__file__))
wheels = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "*.so*")))
env = dict(os.environ, LD_LIBRARY_PATH=":".join([*sorted({os.path.dirname(p) for p in wheels}), capi]))
def missing(path):
    out = subprocess.run(["ldd", path], env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    return len(out), {line.split()[0] for line in out if "not found" in line}
deps, provider = missing(os.path.join(capi, "libonnxruntime_providers_cuda.so"))
others = set().union(*(missing(path)[1] for path in wheels))
ort.preload_dlls()
maps = {line.split()[-1] for line in open("/proc/self/maps") if "/nvidia/" in line}
print(json.dumps({"onnxruntime": ort.__version__, "providers": ort.get_available_providers(), "deps": deps,
                  "missing": sorted(provider), "wheels": len(wheels), "wheels_missing": sorted(others),
                  "mapped": sorted(os.path.basename(p) for p in maps)}))
"""


class Checks:
    def __init__(self) -> None:
        self.misses: list[str] = []

    def expect(self, ok: bool, what: str, detail: str = "") -> bool:
        print(f"  {'ok  ' if ok else 'MISS'} {what}{f': {detail}' if detail else ''}", flush=True)
        if not ok:
            self.misses.append(what)
        return ok


def engine() -> str:
    if os.environ.get("ENGINE"):
        return os.environ["ENGINE"]
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return "docker"
    if shutil.which("podman"):
        return "podman"
    sys.exit("image-check runs containers: it needs docker (with a running daemon) or podman")


def run_flags(tool: str, image: str) -> list[str]:
    """The first set of `run` flags this host can start a container with, on the host's network (the servers
    listen on 127.0.0.1; no container network needed). Where the kernel refuses podman's default rlimits (this
    development machine: a Firecracker VM) they are lowered, and where crun refuses hybrid cgroups, runc runs it."""
    lowered = ["--network", "host", "--ulimit", "nofile=8192:8192", "--ulimit", "nproc=4096:4096"]
    for flags in (["--network", "host"], lowered, [*lowered, "--runtime", "runc"]):
        if engine_out(tool, "run", "--rm", *flags, "--entrypoint", "true", image, check=False) is not None:
            return flags
    sys.exit(f"{tool} cannot start a container from {image} here")


def engine_out(tool: str, *args: str, check: bool = True, timeout: float = 300) -> str | None:
    result = subprocess.run([tool, *args], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        if check:
            sys.exit(f"{tool} {' '.join(args[:3])} ... failed:\n{result.stdout}{result.stderr}")
        return None
    return result.stdout


def readme_embed_body() -> dict:
    """The README's /embed example, as the README writes it."""
    found = re.search(r"curl -s localhost:8000/embed -H 'Content-Type: application/json' \\\n\s+-d '(\{.*\})'",
                      (ROOT / "README.md").read_text())
    if found is None:
        sys.exit("no /embed example found in README.md")
    return json.loads(found.group(1))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(port: int, alive, timeout: float = 300) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as answer:
                if answer.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def post_embed(port: int, body: dict) -> np.ndarray:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/embed", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return np.asarray(json.loads(answer.read()), dtype=np.float64)


def reference(served: list[str], body: dict, logs: Path) -> np.ndarray:
    """The README example answered by `python -m attnserve serve` from this checkout on the host (`make serve`),
    serving `served` (--bundle DIR, or --model NAME)."""
    port = free_port()
    with open(logs / "host.log", "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "attnserve", "serve", *served,
                                   "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT, stdout=log, stderr=log)
        try:
            if not wait_ready(port, lambda: server.poll() is None, timeout=600):  # --model exports first
                sys.exit(f"the host server did not become ready:\n{(logs / 'host.log').read_text()[-3000:]}")
            return post_embed(port, body)
        finally:
            server.terminate()
            server.wait(30)


class Container:
    """One serving container on the host network, removed on exit; its log read by the checks."""

    def __init__(self, tool: str, flags: list[str], image: str, bundle: Path, env: dict[str, str]) -> None:
        self.tool, self.port, self.name = tool, free_port(), f"attnserve-check-{os.getpid()}-{free_port()}"
        env = {**env, "ATTNSERVE_PORT": str(self.port)}  # the port the image's HEALTHCHECK probes
        env_flags = [arg for key, value in env.items() for arg in ("--env", f"{key}={value}")]
        # A read-only root with a writable /tmp, as the Kubernetes pods run it (deploy/kubernetes/base).
        engine_out(tool, "run", "--detach", "--name", self.name, *flags, *env_flags, "--read-only", "--tmpfs", "/tmp",
                   "--volume", f"{bundle.resolve()}:/bundle:ro", image, "--bundle", "/bundle", "--host", "127.0.0.1")

    def running(self) -> bool:
        state = engine_out(self.tool, "inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return (state or "").strip() == "true"

    def logs(self) -> str:
        result = subprocess.run([self.tool, "logs", self.name], capture_output=True, text=True)
        return result.stdout + result.stderr

    def exec(self, *command: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.tool, "exec", self.name, *command], capture_output=True, text=True, timeout=60)

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *_: object) -> None:
        subprocess.run([self.tool, "rm", "--force", self.name], capture_output=True)


def image_size(tool: str, image: str, checks: Checks) -> bool:
    """Whether `image` exists (a check); prints its size when it does."""
    size = engine_out(tool, "image", "inspect", "--format", "{{.Size}}", image, check=False)
    if not checks.expect(size is not None, f"image {image} exists", "" if size else "run make image first"):
        return False
    print(f"  size {image}: {int(size) // 1_000_000} MB", flush=True)
    return True


def check_serving(box: Container, tool: str, image: str, body: dict, expected: np.ndarray, checks: Checks) -> None:
    ready = wait_ready(box.port, box.running)
    if not checks.expect(ready, "/ready answers 200", "" if ready else box.logs()[-3000:]):
        return
    status = box.exec("python", "-c", "print(open('/proc/1/status').read())").stdout
    uids = next((line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")), [])
    checks.expect(bool(uids) and set(uids) == {UID}, f"the server runs as uid {UID}", f"Uid: {' '.join(uids)}")
    probe = json.loads(engine_out(tool, "image", "inspect", "--format", "{{json .Config.Healthcheck}}", image)
                       or "null")
    health = box.exec(*probe["Test"][1:]) if probe else None
    checks.expect(health is not None and health.returncode == 0, "the image's HEALTHCHECK passes",
                  " ".join(probe["Test"][1:3]) if probe else "no HEALTHCHECK in the image")
    vectors = post_embed(box.port, body)
    diff = float(np.abs(vectors - expected).max()) if vectors.shape == expected.shape else float("inf")
    checks.expect(diff <= TOLERANCE, f"/embed (README example) equals the host server's, max abs <= {TOLERANCE:g}",
                  f"shape {vectors.shape}, max abs diff {diff:.3g}")


def check_cpu(tool: str, image: str, bundle: Path, body: dict, expected: np.ndarray, checks: Checks) -> None:
    print(f"CPU image {image}", flush=True)
    image_size(tool, image, checks)
    if checks.misses:
        return
    flags = run_flags(tool, image)
    probe = engine_out(tool, "run", "--rm", *flags, "--entrypoint", "python", image, "-c",
                       "import importlib.util as u, os; print(os.getuid(), u.find_spec('torch'))") or ""
    checks.expect(probe.split() == [UID, "None"], f"runs as uid {UID}, torch not importable", probe.strip())
    with Container(tool, flags, image, bundle, {}) as box:
        check_serving(box, tool, image, body, expected, checks)


def check_gpu(tool: str, image: str, bundle: Path, body: dict, expected: np.ndarray, checks: Checks) -> None:
    print(f"GPU image {image}", flush=True)
    if not image_size(tool, image, checks):
        return
    flags = run_flags(tool, image)
    out = engine_out(tool, "run", "--rm", *flags, "--entrypoint", "python", image, "-c", LIBRARIES) or ""
    found = json.loads(out.strip().splitlines()[-1])
    checks.expect("CUDAExecutionProvider" in found["providers"], "onnxruntime offers CUDA",
                  f"onnxruntime-gpu {found['onnxruntime']}: {', '.join(found['providers'])}")
    checks.expect(set(found["missing"]) <= {"libcuda.so.1"}, "ldd: every library of the CUDA provider resolves "
                  "but the driver's libcuda.so.1", f"{found['deps']} dependencies, not found: {found['missing']}")
    absent = [name for name in PRELOADED if not any(m.startswith(name) for m in found["mapped"])]
    checks.expect(not absent, "preload_dlls maps CUDA and cuDNN from the NVIDIA wheels",
                  f"{', '.join(found['mapped'])}{f'; absent: {absent}' if absent else ''}")
    checks.expect(set(found["wheels_missing"]) <= {"libcuda.so.1"}, "ldd: every library of the NVIDIA wheels "
                  "resolves but libcuda.so.1", f"{found['wheels']} libraries, not found: {found['wheels_missing']}")
    with Container(tool, flags, image, bundle, {"ATTNSERVE_PROVIDER": "auto"}) as box:
        check_serving(box, tool, image, body, expected, checks)
        line = next((line for line in box.logs().splitlines() if FALLBACK_LINE in line), "")
        checks.expect(bool(line), "provider auto without a GPU: one log line says why, and serves on CPU",
                      line[line.find("WARNING"):].strip())
    refused = subprocess.run([tool, "run", "--rm", *flags, "--env", "ATTNSERVE_PROVIDER=cuda",
                              "--volume", f"{bundle.resolve()}:/bundle:ro", image, "--port", str(free_port())],
                             capture_output=True, text=True, timeout=300)
    said = next((line for line in (refused.stdout + refused.stderr).splitlines() if "did not run on CUDA" in line), "")
    checks.expect(refused.returncode != 0 and bool(said), "provider cuda without a GPU refuses to start",
                  f"exit {refused.returncode}: {said[said.find('ERROR'):].strip()}")


# Run inside the export image: its user, whether torch was built for CUDA, and who owns /models (a new volume's owner).
EXPORT_PROBE = "import os, torch; print(os.getuid(), torch.version.cuda, os.stat('/models').st_uid)"


def check_onboarding(tool: str, images: tuple[str, str], model: Path, body: dict, expected: np.ndarray,
                     checks: Checks) -> None:
    """The two steps of a pod: the export image pulls `model` into a folder, the CPU image serves that bundle."""
    export_image, cpu_image = images
    print(f"Onboarding {model} by name: {export_image}, then {cpu_image}", flush=True)
    if not image_size(tool, export_image, checks):
        return
    flags = run_flags(tool, export_image)
    probe = engine_out(tool, "run", "--rm", *flags, "--entrypoint", "python", export_image, "-c", EXPORT_PROBE) or ""
    checks.expect(probe.split() == [UID, "None", UID], f"runs as uid {UID}, torch built for CPU, /models its own",
                  probe.strip())
    with tempfile.TemporaryDirectory() as folder:
        models = Path(folder)
        models.chmod(0o777)  # as an emptyDir is: writable by the image's uid
        if pull(tool, flags, export_image, model, models, checks):
            with Container(tool, run_flags(tool, cpu_image), cpu_image, models / "bundle", {}) as box:
                check_serving(box, tool, cpu_image, body, expected, checks)


def pull(tool: str, flags: list[str], image: str, model: Path, models: Path, checks: Checks) -> bool:
    """`attnserve pull /source --out /models/bundle` as the init container runs it: read-only root, its /tmp (the
    pull-tmp volume of deploy/kubernetes/base/deployment.yaml: onnxruntime's optimiser writes a graph's copy there)."""
    start = time.monotonic()
    done = subprocess.run([tool, "run", "--rm", *flags, "--read-only", "--tmpfs", "/tmp:size=4g",
                           "--env", "HF_HOME=/tmp/huggingface", "--volume", f"{model.resolve()}:/source:ro",
                           "--volume", f"{models}:/models", image, "/source", "--out", "/models/bundle"],
                          capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - start
    made = (models / "bundle" / "manifest.json").is_file()
    detail = f"exit {done.returncode} in {seconds:.0f} s" + ("" if made else f": {done.stderr.strip()[-2000:]}")
    return checks.expect(done.returncode == 0 and made, "the export image pulls the model into the folder", detail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles" / "default")
    parser.add_argument("--cpu", default=os.environ.get("CPU_TAG", "localhost/attnserve:cpu"))
    parser.add_argument("--gpu", default=os.environ.get("GPU_TAG", "localhost/attnserve:gpu"))
    parser.add_argument("--export", default=os.environ.get("EXPORT_TAG", "localhost/attnserve:export"))
    parser.add_argument("--model", type=Path, default=ROOT / "checkpoints" / "default",
                        help="a local model directory (a checkpoint) the export image pulls")
    args = parser.parse_args()
    if not (args.bundle / "manifest.json").is_file():
        sys.exit(f"no bundle at {args.bundle} (make bundle)")
    if not (args.model / "config.json").is_file():
        sys.exit(f"no model directory at {args.model} (attnserve train --out {args.model})")
    tool, body, checks = engine(), readme_embed_body(), Checks()
    with tempfile.TemporaryDirectory() as logs:
        expected = reference(["--bundle", str(args.bundle)], body, Path(logs))
        print(f"host server: README /embed example -> {expected.shape[0]} x {expected.shape[1]} ({tool} runs the "
              "images)", flush=True)
        start = time.monotonic()
        by_name = reference(["--model", str(args.model), "--cache-dir", str(Path(logs) / "cache")], body, Path(logs))
        print(f"host server --model {args.model}: exported and served in {time.monotonic() - start:.0f} s", flush=True)
    check_cpu(tool, args.cpu, args.bundle, body, expected, checks)
    check_gpu(tool, args.gpu, args.bundle, body, expected, checks)
    check_onboarding(tool, (args.export, args.cpu), args.model, body, by_name, checks)
    if checks.misses:
        print(f"image-check FAILED: {len(checks.misses)} miss(es): {'; '.join(checks.misses)}", flush=True)
        sys.exit(1)
    print("image-check passed", flush=True)


if __name__ == "__main__":
    main()
