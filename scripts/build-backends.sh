#!/usr/bin/env bash
# Builds the backends the stack tests run, from their published Go modules, at the
# versions pinned in otel_grpo/stack/backends.yml: the OpenTelemetry Collector (through the
# collector builder and collector/builder-config.yaml), Prometheus + promtool,
# Alertmanager + amtool, helm, the Prometheus Operator's CRDs (YAML files of its module,
# nothing to compile), compose-config (target compose-go: scripts/compose-config, which
# renders a compose file through compose-go as `docker compose config` does, for machines
# without the Docker CLI plugin), kube-score (a linter platform teams run on Helm charts) and
# pod-security (scripts/pod-security: the API server's PodSecurity evaluator on rendered pods). Everything goes to a per-machine cache outside the repository,
#   ${OTEL_GRPO_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-grpo/bin}/<name>-<version>
# (the collector's name also carries a digest of its component list, so a changed
# builder-config.yaml builds a new collector) and what is already there is reused. Without Go
# it says so and exits 0: the tests then fall back to binaries on PATH or skip with that reason.
# One target per binary: `make demo` builds only the two servers it runs (prometheus alertmanager),
# `make test` all of them (scripts/test.sh: beside the suite, whose tests each run this script for the
# binary they need). What Go prints (hundreds of `go: downloading` lines) goes to a log per binary,
# $CACHE/logs/<name>.log; the terminal gets one line per binary, and the log's name and tail if a build
# fails. Each binary is built under a lock of its own ($CACHE/.<name>.lock): a second run that wants
# one being built waits for it, says so, and builds nothing.
#   usage: scripts/build-backends.sh [--missing] [prometheus|promtool|alertmanager|amtool|collector|helm|crds|compose-go|kube-score|pod-security ...]
#   --missing: print the names of those not built yet, build nothing
set -euo pipefail
cd "$(dirname "$0")/.."
version() { awk -F': *' -v k="$1" '$1 == k { print $2 }' otel_grpo/stack/backends.yml; }
OTELCOL_VERSION=$(version otelcol)
PROMETHEUS_VERSION=$(version prometheus)
ALERTMANAGER_VERSION=$(version alertmanager)
HELM_VERSION=$(version helm)
OPERATOR_VERSION=$(version prometheus-operator)
COMPOSE_GO_VERSION=$(version compose-go)
KUBE_SCORE_VERSION=$(version kube-score)
POD_SECURITY_VERSION=$(version pod-security-admission)
# The builder manifest without its comments: the collector's cache name changes with its components.
OTELCOL_DIGEST=$(grep -v '^[[:space:]]*#' collector/builder-config.yaml | sha256sum | cut -c1-12)
CACHE="${OTEL_GRPO_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-grpo/bin}"
if ! command -v go >/dev/null; then
  echo "build-backends: go not found; the stack tests use binaries on PATH or skip" >&2
  exit 0
fi
mkdir -p "$CACHE"
export GOFLAGS="${GOFLAGS:-} -trimpath"
export CGO_ENABLED=0

have() { [ -x "$CACHE/$1" ]; }

# Progress on the terminal (fd 3, our stderr): one banner saying what is built and why when anything
# is missing (a machine that has them all prints nothing), then one line per binary,
#   build-backends: [2/4] prometheus-3.16.0 (go install ...) ... done in 212 s (250 s so far)
# Everything a build prints goes to its log, named again if it fails.
exec 3>&2
LOGS="$CACHE/logs"
STEP=0 TOTAL=0 STARTED=$SECONDS CURRENT=""
binary_of() {
  case "$1" in
    prometheus) echo "prometheus-$PROMETHEUS_VERSION" ;;
    promtool) echo "promtool-$PROMETHEUS_VERSION" ;;
    alertmanager) echo "alertmanager-$ALERTMANAGER_VERSION" ;;
    amtool) echo "amtool-$ALERTMANAGER_VERSION" ;;
    collector) echo "otelcol-grpo-$OTELCOL_VERSION-$OTELCOL_DIGEST" ;;
    helm) echo "helm-$HELM_VERSION" ;;
    crds) echo "prometheus-operator-crds-$OPERATOR_VERSION" ;;
    compose-go) echo "compose-config-$COMPOSE_GO_VERSION" ;;
    kube-score) echo "kube-score-$KUBE_SCORE_VERSION" ;;
    pod-security) echo "pod-security-$POD_SECURITY_VERSION" ;;
  esac
}
missing() {  # missing <target>...: the binaries not built yet, by name
  local t b
  for t in "$@"; do b=$(binary_of "$t"); have "$b" || echo "$b"; done
}
announce() {  # announce <target>...: count what is missing, say what and why once
  local missing
  mapfile -t missing < <(missing "$@")
  TOTAL=${#missing[@]}
  [ "$TOTAL" -gt 0 ] || return 0
  echo "build-backends: building ${missing[*]} from their Go modules into $CACHE (Go's output: $LOGS/<name>.log)" >&3
  echo "build-backends: why: the tests and 'otel-grpo up' run these pinned versions (otel_grpo/stack/backends.yml);" \
       "no package registry here ships them. Once per machine, then reused." >&3
}
begin_step() {
  STEP=$((STEP + 1)) STEP_STARTED=$SECONDS CURRENT=$1
  echo "==== $1: $2"
  printf 'build-backends: [%s/%s] %s (%s) ...' "$STEP" "$TOTAL" "$1" "$2" >&3
}
end_step() {
  echo " done in $((SECONDS - STEP_STARTED)) s ($((SECONDS - STARTED)) s so far)" >&3
  CURRENT=""
}

# Build directories, removed at exit even when a build fails or is stopped (scripts/test.sh stops the
# builds when the suite ends, a Ctrl-C stops them here); a failed build names its log.
WORKDIRS=()
STOPPED=""
cleanup() {
  local code=$?
  if [ -n "$STOPPED" ] && [ -n "$CURRENT" ]; then
    echo " stopped" >&3
  elif [ "$code" -ne 0 ] && [ -n "$CURRENT" ]; then
    echo " failed (exit $code)" >&3
    echo "build-backends: building $CURRENT failed; Go's output is in $LOG, ending:" >&3
    tail -n 15 "$LOG" | sed 's/^/  /' >&3
  fi
  [ ${#WORKDIRS[@]} -eq 0 ] || rm -rf "${WORKDIRS[@]}"
}
trap cleanup EXIT
trap 'STOPPED=1; exit 143' TERM
trap 'STOPPED=1; exit 130' INT
new_workdir() { WORK=$(mktemp -d); WORKDIRS+=("$WORK"); }  # sets WORK (not in a subshell: the list must grow)

# A fresh GOBIN per tool: `go install` names the binary after its package, and several
# versions must sit side by side in the cache.
# Prometheus' projects print their version from prometheus/common's variables.
version_flags() { echo "-X github.com/prometheus/common/version.Version=$1 -X github.com/prometheus/common/version.Branch=release"; }

install_as() {  # install_as <cache name> <package@version> <-X version flags> [build tags]
  local name=$1 pkg=$2 xflags=$3 tags=${4:-} tmp
  new_workdir; tmp=$WORK
  begin_step "$name" "go install $pkg"
  GOBIN="$tmp" go install ${tags:+-tags "$tags"} -ldflags "-s -w $xflags" "$pkg"
  mv "$tmp"/* "$CACHE/$name.tmp" && mv "$CACHE/$name.tmp" "$CACHE/$name"
  end_step "$name"
}

prometheus_module() { echo "v0.${PROMETHEUS_VERSION%%.*}$(printf '%02d' "$(echo "$PROMETHEUS_VERSION" | cut -d. -f2)").$(echo "$PROMETHEUS_VERSION" | cut -d. -f3)"; }

# remove_all_sd: no cloud service-discovery plugins (the tests use static targets);
# the module carries no compiled web UI, so only the API and the rules engine serve.
build_prometheus() {
  install_as "prometheus-$PROMETHEUS_VERSION" "github.com/prometheus/prometheus/cmd/prometheus@$(prometheus_module)" "$(version_flags "$PROMETHEUS_VERSION")" remove_all_sd
}

build_promtool() {
  install_as "promtool-$PROMETHEUS_VERSION" "github.com/prometheus/prometheus/cmd/promtool@$(prometheus_module)" "$(version_flags "$PROMETHEUS_VERSION")" remove_all_sd
}

build_amtool() {
  install_as "amtool-$ALERTMANAGER_VERSION" "github.com/prometheus/alertmanager/cmd/amtool@v$ALERTMANAGER_VERSION" "$(version_flags "$ALERTMANAGER_VERSION")"
}

build_alertmanager() {
  local name="alertmanager-$ALERTMANAGER_VERSION" src work
  # The published module embeds ui/app/dist, the compiled web UI, which it does not ship
  # (`pattern app/dist: no matching files found`): build from a copy of the module with
  # a one-page stand-in there. The API, routing and notifications are unaffected.
  begin_step "$name" "go build from a copy of its module, with a stand-in for the web UI it does not ship"
  src=$(go mod download -json "github.com/prometheus/alertmanager@v$ALERTMANAGER_VERSION" | awk -F'"' '/"Dir"/ { print $4 }')
  new_workdir; work=$WORK
  cp -r "$src" "$work/am" && chmod -R u+w "$work/am"
  mkdir -p "$work/am/ui/app/dist"
  echo "<!doctype html><title>Alertmanager</title><p>Web UI not built; the API is at /api/v2/." \
    > "$work/am/ui/app/dist/index.html"
  (cd "$work/am" && go build -ldflags "-s -w $(version_flags "$ALERTMANAGER_VERSION")" -o "$CACHE/$name.tmp" ./cmd/alertmanager)
  mv "$CACHE/$name.tmp" "$CACHE/$name"
  end_step "$name"
}

build_collector() {
  local name="otelcol-grpo-$OTELCOL_VERSION-$OTELCOL_DIGEST" work
  new_workdir; work=$WORK
  begin_step "$name" "the collector builder with collector/builder-config.yaml's components"
  # The checksum database has no entry for the builder v0.144.0 (a 404 from sum.golang.org;
  # the components it builds are all there), so only the builder skips that check.
  GOBIN="$work/bin" GONOSUMDB=go.opentelemetry.io/collector/cmd/builder \
    go install "go.opentelemetry.io/collector/cmd/builder@v$OTELCOL_VERSION"
  sed "s#output_path: .*#output_path: $work/dist#" collector/builder-config.yaml > "$work/manifest.yaml"
  "$work/bin/builder" --config "$work/manifest.yaml" --ldflags "-s -w"
  mv "$work/dist/otelcol-grpo" "$CACHE/$name.tmp" && mv "$CACHE/$name.tmp" "$CACHE/$name"
  end_step "$name"
}

build_helm() {  # `helm lint` / `helm template` for the chart under deploy/helm
  install_as "helm-$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" "$(version_flags "$HELM_VERSION")"
}

build_crds() {  # the CRD schemas the chart's PrometheusRule, PodMonitor and ServiceMonitor are checked against
  local name="prometheus-operator-crds-$OPERATOR_VERSION" src
  begin_step "$name" "the CRD files of the prometheus-operator module"
  src=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@v$OPERATOR_VERSION" | awk -F'"' '/"Dir"/ { print $4 }')
  mkdir -p "$CACHE/$name.tmp"
  for kind in prometheusrules podmonitors servicemonitors; do
    cp "$src/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$CACHE/$name.tmp/"
  done
  chmod -R u+w "$CACHE/$name.tmp" && mv "$CACHE/$name.tmp" "$CACHE/$name"
  end_step "$name"
}

program_as() {  # program_as <cache name> <scripts/ folder> <module> <version>: our main.go, a module of its own
  local name=$1 dir=$2 module=$3 version=$4 work
  new_workdir; work=$WORK
  begin_step "$name" "scripts/$dir against $module v$version"
  cp "scripts/$dir/main.go" "$work/"
  (cd "$work" && go mod init "$dir" >/dev/null 2>&1 \
    && go get "$module@v$version" && go mod tidy \
    && go build -ldflags "-s -w" -o "$CACHE/$name.tmp" .)
  mv "$CACHE/$name.tmp" "$CACHE/$name"
  end_step "$name"
}

build_compose-go() {  # renders a compose file through compose-go, at the pinned version
  program_as "compose-config-$COMPOSE_GO_VERSION" compose-config github.com/compose-spec/compose-go/v2 "$COMPOSE_GO_VERSION"
}

build_kube-score() {  # a linter platform teams run on Helm charts (tests/stack/test_helm_linters.py)
  install_as "kube-score-$KUBE_SCORE_VERSION" "github.com/zegl/kube-score/cmd/kube-score@v$KUBE_SCORE_VERSION" \
    "-X main.version=$KUBE_SCORE_VERSION"
}

build_pod-security() {  # the API server's PodSecurity evaluator, at the pinned k8s.io/pod-security-admission
  program_as "pod-security-$POD_SECURITY_VERSION" pod-security k8s.io/pod-security-admission "$POD_SECURITY_VERSION"
}

ALL=(prometheus promtool alertmanager amtool collector helm crds compose-go kube-score pod-security)
LIST_MISSING=0
if [ "${1:-}" = --missing ]; then LIST_MISSING=1; shift; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
for t in "${targets[@]}"; do
  [[ " ${ALL[*]} " == *" $t "* ]] || { echo "build-backends: unknown target '$t' (${ALL[*]})" >&2; exit 2; }
done
if [ "$LIST_MISSING" = 1 ]; then missing "${targets[@]}"; exit 0; fi
announce "${targets[@]}"
[ "$TOTAL" -gt 0 ] || exit 0
mkdir -p "$LOGS"

# One build of a binary at a time on this machine: `make test` builds them all beside the suite while
# its tests ask for the one each needs (tests/stack/conftest.py), so a test waits for the build under way
# rather than starting a second, and looks for the binary again once it holds the lock.
locked() {  # locked <target>: built under its lock, its output in its log
  local name lock
  name=$(binary_of "$1")
  exec {lock}>"$CACHE/.$name.lock"
  if ! flock -n "$lock"; then
    echo "build-backends: $name is being built by another run; waiting for it" >&3
    flock "$lock"
  fi
  if ! have "$name"; then
    LOG="$LOGS/$name.log"
    "build_$1" > "$LOG" 2>&1
  fi
  exec {lock}>&-
}
for t in "${targets[@]}"; do locked "$t"; done
