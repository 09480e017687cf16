#!/bin/sh
# Entry point of the otel-grpo images: `otel-grpo "$@"`, after turning each OTEL_*_FILE (and
# PGPASSWORD_FILE) variable into the variable without `_FILE`, holding the file's content.
# Compose keeps tokens in files (the `secrets` volume) rather than in its rendered environment:
#   OTEL_GRPO_SIDECAR_TOKEN_FILE=/secrets/sidecar_token      -> OTEL_GRPO_SIDECAR_TOKEN
#   OTEL_EXPORTER_OTLP_HEADERS_FILE=/secrets/otlp_headers    -> OTEL_EXPORTER_OTLP_HEADERS
# A named file that cannot be read is an error: starting without the credential would fail later,
# less clearly (or, for a client, send without it).
set -eu
for var in $(env | sed -n 's/^\(OTEL_[A-Z0-9_]*_FILE\)=.*/\1/p; s/^\(PGPASSWORD_FILE\)=.*/\1/p'); do
  eval "path=\${$var}"
  if ! value=$(cat "$path" 2>/dev/null); then
    echo "otel-grpo: $var: cannot read $path" >&2
    exit 1
  fi
  export "${var%_FILE}=$value"
  unset "$var"
done
exec otel-grpo "$@"
