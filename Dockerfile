# attnserve image, in two stages: a builder that makes /opt/venv and pip-installs into it, and a runtime that
# copies the venv onto a clean base (no compiler, no headers, no pip cache). GPU by default: onnxruntime-gpu with
# CUDA and cuDNN from the Python registry (its cuda and cudnn extras), so no CUDA base image is needed; the CPU
# image is the same file with onnxruntime:
#   docker build -t attnserve:gpu .
#   docker build -t attnserve:cpu --build-arg ORT_EXTRA=cpu .
# Both build FROM debian:bookworm-slim; `make image` builds both, FROM a local Debian 12 base made with debootstrap
# where no registry serves base images (deploy/README.md). Any Debian or Ubuntu base works (BASE_IMAGE).
# The bundle is mounted at /bundle (-v $PWD/bundles/default:/bundle:ro) or baked in at build time with
#   --build-arg BUNDLE_SRC=bundles/default
# No torch is installed: the service reads ONNX bundles only.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS builder
ARG ORT_EXTRA=gpu
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
# The OS packages follow the base image's release (its security updates included); the Python
# dependencies are pinned in deploy/requirements-*.txt. A base that has Python's venv (make image's) skips apt.
# PIP_CERT: the base's CA bundle, which make image's base copies from the host (a proxy's CA included).
# hadolint ignore=DL3008
RUN if ! python3 -c "import ensurepip, venv" 2>/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/venv
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
COPY deploy/requirements-${ORT_EXTRA}.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --requirement /tmp/requirements.txt
WORKDIR /src
COPY pyproject.toml README.md ./
# The server needs the bundle contract, the inference core, the HTTP front, models by name (hub/) and the CLI, and
# `attnserve embed` the jobs package; model/ and export/ (torch) stay out: --model serves what the bundle cache holds
# and repositories that hold a bundle, and refuses to export a checkpoint.
COPY attnserve ./attnserve
COPY bundle ./bundle
COPY hub ./hub
COPY inference ./inference
COPY service ./service
COPY jobs ./jobs
RUN pip install --no-cache-dir --no-deps . \
    && python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)" \
    && find /opt/venv -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
ARG BUNDLE_SRC=deploy/bundle-placeholder
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    ATTNSERVE_BUNDLE=/bundle \
    ATTNSERVE_HOST=0.0.0.0 \
    ATTNSERVE_PORT=8000 \
    ATTNSERVE_GRACEFUL_TIMEOUT_S=8 \
    ORT_DISABLE_TELEMETRY=1
# The health probe below reads ATTNSERVE_PORT: serve on another port with -e ATTNSERVE_PORT=..., not --port.
# docker stop waits 10 s before SIGKILL: the drain (8 s) ends inside it. Raise both together.
# ORT_DISABLE_TELEMETRY: onnxruntime otherwise writes a device id under $HOME/.cache at every start.

# Python only (the venv's interpreter is the base's /usr/bin/python3): no build tools.
# hadolint ignore=DL3008
RUN if ! command -v python3 >/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --system --uid 10001 --create-home attnserve
COPY --from=builder /opt/venv /opt/venv
WORKDIR /home/attnserve
COPY --chown=attnserve:attnserve ${BUNDLE_SRC} /bundle

USER 10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/ready' % os.environ['ATTNSERVE_PORT'], timeout=4)"]

# The same command the integration tests start.
ENTRYPOINT ["python", "-m", "attnserve", "serve"]
CMD ["--bundle", "/bundle", "--host", "0.0.0.0", "--port", "8000"]
