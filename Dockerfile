# syntax=docker/dockerfile:1
# Fluidity Exporter image: `docker build -t fluidity-exporter:0.1.0 .`
#
# Two stages: the builder installs the package and its dependencies into a virtual environment (every
# dependency ships manylinux wheels; gcc is there for the probe's socket reads in C, exporter/probe/
# _reads.c, which halve its CPU per token); the final image copies that environment only: no compiler,
# no pip cache, no build front-end, no source tree. It runs as a numeric non-root user
# so Kubernetes' runAsNonRoot can verify it, and writes only to /var/lib/fluidity-exporter (state_dir)
# and /tmp, so it runs under a read-only root filesystem.
# Python 3.11 is the version CI tests (pyproject's floor); bump both together.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Pinned to bookworm's version (hadolint DL3008); the official image carries the Python headers.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential=12.9 \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
WORKDIR /src
# .dockerignore lets in only what the wheel is built from: pyproject.toml, README.md, exporter/.
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# The C reads are optional for a pip install without a compiler; in the image they must be there, and
# so must the traffic extra (grpcio: ~11 MiB of RSS, only when traffic: is configured).
RUN /opt/venv/bin/pip install --no-cache-dir '.[traffic]' \
    && /opt/venv/bin/python -c "import exporter.probe._reads, exporter.traffic.observer" \
    && /opt/venv/bin/pip uninstall --yes pip setuptools wheel

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="fluidity-exporter" \
      org.opencontainers.image.description="Prometheus exporter of Etalon fluidity metrics for LLM endpoints" \
      org.opencontainers.image.licenses="Apache-2.0"
# No build tools at run time: the base image's own pip, setuptools and wheel go too.
RUN python -m pip uninstall --yes pip setuptools wheel \
    && groupadd --system --gid 10001 fluidity \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin fluidity \
    && mkdir -p /var/lib/fluidity-exporter /etc/fluidity-exporter \
    && chown 10001:10001 /var/lib/fluidity-exporter
COPY --from=builder /opt/venv /opt/venv
# FLUIDITY_HEALTHCHECK_URL: what the HEALTHCHECK asks; set it with --web.listen-address elsewhere.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    FLUIDITY_HEALTHCHECK_URL=http://127.0.0.1:9468/-/healthy
# Numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/fluidity-exporter
VOLUME ["/var/lib/fluidity-exporter"]
EXPOSE 9468
# Slim images have no curl: ask /-/healthy with the interpreter that is already there.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(urllib.request.urlopen(os.environ['FLUIDITY_HEALTHCHECK_URL'], timeout=4).status != 200)"]
ENTRYPOINT ["fluidity-exporter", "run"]
# Mount the config here (Kubernetes: the ConfigMap); `docker run IMAGE` with other flags replaces this.
CMD ["--config.file", "/etc/fluidity-exporter/config.yaml"]
