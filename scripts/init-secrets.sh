#!/usr/bin/env bash
# Creates the files docker-compose.yml reads as secrets, once (existing files are kept):
#   secrets/grafana_admin_password  a random password (printed once)
#   secrets/sidecar_token           the sidecar's ingest token, as in OTEL_GRPO_SIDECAR_TOKEN (empty: open)
#   secrets/slack_webhook_url       placeholder: put your Slack incoming-webhook URL here
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p secrets
chmod 700 secrets
umask 077
if [ ! -e secrets/grafana_admin_password ]; then
  head -c 18 /dev/urandom | base64 | tr -d '/+=' > secrets/grafana_admin_password
  echo "Grafana admin password: $(cat secrets/grafana_admin_password)"
fi
[ -e secrets/sidecar_token ] || printf '%s' "${OTEL_GRPO_SIDECAR_TOKEN:-}" > secrets/sidecar_token
[ -e secrets/slack_webhook_url ] || echo "https://hooks.slack.com/services/REPLACE/WITH/YOURS" > secrets/slack_webhook_url
