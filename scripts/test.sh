#!/usr/bin/env bash
# `make test`: the set-up, then the suite, with the backends this machine has not built yet built beside both.
#   usage: scripts/test.sh <progress log> <set-up command line> <python> -m pytest [pytest's arguments]
# On a new machine the ten Go builds take about 10 minutes with the cores idle a third of it (module
# downloads, single-threaded links), the set-up (apt-get, pip) a few with the cores half idle, and about half
# of the suite's work needs no backend: run one after the other, they add those minutes to a fresh
# `make test`; run together, each fills the others' idle cores (benchmarks/README.md, suite). The builds
# need only Go, so they start first. A test that needs a backend runs scripts/build-backends.sh for it
# (`need` in tests/stack/conftest.py), which waits for the build under way (one lock per binary);
# OTEL_GRPO_BACKENDS_BUILDING tells tests/conftest.py to hand out the files that need none first. The
# builds are stopped when the suite ends (those the tests needed are done by then), when the set-up fails,
# and on a Ctrl-C.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$1 setup=$2
shift 2
builder=""
missing=$(scripts/build-backends.sh --missing)  # nothing without Go (it says so: the stack tests skip)
if [ -n "$missing" ]; then
  mkdir -p "$(dirname "$log")"
  echo "make test: building $(echo "$missing" | wc -l) backends beside the set-up and the tests (progress: $log)" >&2
  # A session of its own: the builds and Go's compilers are one process group, stopped together below.
  setsid scripts/build-backends.sh > "$log" 2>&1 &
  builder=$!
  export OTEL_GRPO_BACKENDS_BUILDING=1
fi
stop_builds() {
  # Only while the builder runs: its number is ours until it ends, and the suite's processes reuse numbers.
  [ -n "$builder" ] && [[ " $(jobs -pr) " == *" $builder "* ]] || return 0
  kill -TERM -- "-$builder" 2>/dev/null
  kill -TERM "$builder" 2>/dev/null  # a set-up that fails at once may end before the builder made its group
  wait "$builder" 2>/dev/null
  # The script's end is not its group's: a compiler or linker it started ends in its own time, seconds on a
  # loaded machine. Wait for the last of them (what is left after 10 s is killed): nothing outlives the suite.
  local tries=100
  while kill -0 -- "-$builder" 2>/dev/null; do
    if [ $((tries -= 1)) -eq 0 ]; then kill -KILL -- "-$builder" 2>/dev/null; break; fi
    sleep 0.1
  done
}
trap stop_builds EXIT
$setup || exit  # a plain command line (`make setup`): split on its spaces
"$@"
