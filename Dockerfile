# attnserve image. GPU by default (CUDA runtime + cuDNN, onnxruntime-gpu); a CPU image from the same file:
#   docker build -t attnserve:gpu .
#   docker build -t attnserve:cpu --build-arg BASE_IMAGE=ubuntu:24.04 --build-arg ORT_EXTRA=cpu .
# The bundle is mounted at /bundle (-v $PWD/bundles/default:/bundle:ro) or baked in at build time with
#   --build-arg BUNDLE_SRC=bundles/default
# No torch is installed: the service reads ONNX bundles only.
ARG BASE_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
FROM ${BASE_IMAGE}

ARG ORT_EXTRA=gpu
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
# docker stop waits 10 s before SIGKILL: the drain (8 s) ends inside it. Raise both together.
# ORT_DISABLE_TELEMETRY: onnxruntime otherwise writes a device id under $HOME/.cache at every start.

# The OS packages follow the base image's release (its security updates included); the Python
# dependencies are pinned in deploy/requirements-*.txt.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && useradd --system --uid 10001 --create-home attnserve

WORKDIR /app
COPY deploy/requirements-${ORT_EXTRA}.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --requirement /tmp/requirements.txt
COPY pyproject.toml README.md ./
# The server needs the bundle contract, the inference core, the HTTP front and the CLI, and `attnserve embed`
# the jobs package;
# model/ and export/ (torch) stay out.
COPY attnserve ./attnserve
COPY bundle ./bundle
COPY inference ./inference
COPY service ./service
COPY jobs ./jobs
RUN pip install --no-cache-dir --no-deps . \
    && python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"

COPY --chown=attnserve:attnserve ${BUNDLE_SRC} /bundle

USER 10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/ready', timeout=4)"]

# The same command the integration tests start.
ENTRYPOINT ["python", "-m", "attnserve", "serve"]
CMD ["--bundle", "/bundle", "--host", "0.0.0.0", "--port", "8000"]
