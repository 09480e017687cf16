#!/usr/bin/env bash
# `make test`: the suite, with the backends this machine has not built yet built beside it.
#   usage: scripts/test.sh <progress log> <python> -m pytest [pytest's arguments]
# On a new machine the ten Go builds take about 10 minutes with the cores idle a third of it (module
# downloads, single-threaded links), and about half of the suite's work needs no backend: run one
# after the other, they add those minutes to a fresh `make test`; run together, the suite fills the
# idle cores (benchmarks/README.md, suite). A test that needs a backend runs
# scripts/build-backends.sh for it (`need` in tests/stack/conftest.py), which waits for the build
# under way (one lock per binary); OTEL_GRPO_BACKENDS_BUILDING tells tests/conftest.py to hand out
# the files that need none first. The builds are stopped when the suite ends: those the tests
# needed are done by then, and a Ctrl-C stops them too. They start after the set-up (`make test`
# depends on it), not before: its pip installs (torch's wheels unpacked) keep the cores busy, and a
# paired fresh run with the builds started first was slower (benchmarks/README.md, suite).
set -uo pipefail
cd "$(dirname "$0")/.."
log=$1
shift
builder=""
missing=$(scripts/build-backends.sh --missing)  # nothing without Go (it says so: the stack tests skip)
if [ -n "$missing" ]; then
  echo "make test: building $(echo "$missing" | wc -l) backends beside the tests (progress: $log)" >&2
  # A session of its own: the builds and Go's compilers are one process group, stopped together below.
  setsid scripts/build-backends.sh > "$log" 2>&1 &
  builder=$!
  export OTEL_GRPO_BACKENDS_BUILDING=1
fi
stop_builds() {
  # Only while the builder runs: its number is ours until it ends, and the suite's processes reuse numbers.
  [ -n "$builder" ] && [[ " $(jobs -pr) " == *" $builder "* ]] || return 0
  kill -TERM -- "-$builder" 2>/dev/null
  kill -TERM "$builder" 2>/dev/null  # a suite that ends at once may end before the builder made its group
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
"$@"
