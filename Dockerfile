# otel-grpo images: targets of one file (docker-compose.yml builds them all).
#   sidecar:   docker build --target sidecar -t otel-grpo:sidecar .        no torch
#   follow:    docker build --target follow -t otel-grpo:follow .          no torch (`otel-grpo follow`)
#   CPU:       docker build --target trainer -t otel-grpo:cpu .
#   GPU:       docker build --target trainer -t otel-grpo:gpu --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130 .
#   collector: docker build --target collector -t otel-grpo:collector .    the contrib collector + a health check
# Our images start through scripts/docker-entrypoint.sh: `otel-grpo "$@"`, with OTEL_*_FILE
# variables read into OTEL_* (compose keeps the tokens in files).
ARG OTELCOL_IMAGE=otel/opentelemetry-collector-contrib:0.144.0

FROM ${OTELCOL_IMAGE} AS otelcol-contrib

FROM python:3.11.11-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
RUN useradd --create-home --uid 10001 grpo \
    && mkdir -p /data /runs \
    && chown grpo:grpo /data /runs
COPY scripts/docker-entrypoint.sh /usr/local/bin/otel-grpo-entrypoint

# The sidecar needs no torch: a smaller image that starts faster.
FROM base AS sidecar
COPY pyproject.toml README.md ./
COPY otel_grpo ./otel_grpo
RUN pip install ".[sidecar]"
USER grpo
EXPOSE 8000
ENTRYPOINT ["otel-grpo-entrypoint"]
CMD ["sidecar", "--host", "0.0.0.0"]

FROM base AS follow
# `otel-grpo follow` reads log files and exports them: no torch either.
COPY pyproject.toml README.md ./
COPY otel_grpo ./otel_grpo
RUN pip install ".[follow]"
USER grpo
WORKDIR /data
ENTRYPOINT ["otel-grpo-entrypoint"]
CMD ["follow", "--help"]

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
ENTRYPOINT ["otel-grpo-entrypoint"]
CMD ["--help"]

# The contrib collector (the same binary as its image) on busybox: its image is distroless, so
# nothing could run a health check inside it. It runs as the contrib image's user (10001), and
# its queue directory belongs to that user, so a new named volume mounted there does too.
FROM busybox:1.37.0 AS collector
COPY --from=otelcol-contrib /otelcol-contrib /otelcol-contrib
RUN mkdir -p /var/lib/otelcol/file_storage && chown -R 10001:10001 /var/lib/otelcol
USER 10001:10001
EXPOSE 4317 4318 8888 8889 13133
ENTRYPOINT ["/otelcol-contrib"]
HEALTHCHECK --interval=5s --timeout=4s --retries=12 CMD wget -q -O /dev/null http://127.0.0.1:13133/ || exit 1
