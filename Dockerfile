# otel-grpo: the trainer and the sidecar (one image, two commands).
#   CPU:  docker build -t otel-grpo:cpu .
#   GPU:  docker build -t otel-grpo:gpu --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130 .
# docker-compose.yml builds both.
FROM python:3.11.11-slim-bookworm

ARG TORCH_VERSION=2.13.0
# The CPU wheel index by default: an unpinned torch from PyPI pulls gigabytes of CUDA wheels.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# torch first, in its own layer: it changes far less often than our code.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"

COPY pyproject.toml README.md ./
COPY otel_grpo ./otel_grpo
RUN pip install ".[trainer,sidecar,follow]"

RUN useradd --create-home --uid 10001 grpo \
    && mkdir -p /data /runs \
    && chown grpo:grpo /data /runs
USER grpo

# 8000: sidecar; 9464: the trainer's Prometheus endpoint when it exports that way.
EXPOSE 8000 9464
ENTRYPOINT ["otel-grpo"]
CMD ["--help"]
