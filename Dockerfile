# otel-grpo: the sidecar (no torch) and the trainer, two targets of one file.
#   sidecar:  docker build --target sidecar -t otel-grpo-sidecar .
#   CPU:      docker build --target trainer -t otel-grpo:cpu .
#   GPU:      docker build --target trainer -t otel-grpo:gpu --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130 .
# docker-compose.yml builds all three.
FROM python:3.11.11-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
RUN useradd --create-home --uid 10001 grpo \
    && mkdir -p /data /runs \
    && chown grpo:grpo /data /runs

# The sidecar needs no torch: a smaller image that starts faster.
FROM base AS sidecar
COPY pyproject.toml README.md ./
COPY otel_grpo ./otel_grpo
RUN pip install ".[sidecar]"
USER grpo
EXPOSE 8000
ENTRYPOINT ["otel-grpo"]
CMD ["sidecar", "--host", "0.0.0.0"]

FROM base AS trainer
ARG TORCH_VERSION=2.13.0
# The CPU wheel index by default: an unpinned torch from PyPI pulls gigabytes of CUDA wheels.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# torch first, in its own layer: it changes far less often than our code.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"
COPY pyproject.toml README.md ./
COPY otel_grpo ./otel_grpo
RUN pip install ".[trainer,sidecar,follow]"
USER grpo
# 9464: the trainer's Prometheus endpoint when it exports that way.
EXPOSE 9464
ENTRYPOINT ["otel-grpo"]
CMD ["--help"]
