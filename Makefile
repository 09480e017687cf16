# Set-up is part of every target and idempotent: a fresh machine needs only `make test` or `make demo`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_VERSION := 2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
STAMP := $(VENV)/.installed

.PHONY: setup test demo bench clean system-deps backends demo-backends

# Debian's Prometheus and Alertmanager: what `otel-grpo up` runs (and names) where Go cannot build the
# pinned ones (the tests skip then); Chromium drives the web-page test;
# docker-compose (1.29) validates the compose file without an engine; the sidecar's
# PostgreSQL tests start Debian's server (initdb/pg_ctl) on a temporary cluster, and PgBouncer in front of
# it (tests/sidecar/test_pgbouncer.py); libfaketime
# moves a real trainer's clock 10 minutes off Prometheus's (tests/stack/test_skewed_clock.py).
system-deps:
	@missing=""; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	command -v prometheus-alertmanager >/dev/null || missing="$$missing prometheus-alertmanager"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v docker-compose >/dev/null || missing="$$missing docker-compose"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || missing="$$missing pgbouncer"; \
	ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing="$$missing libfaketime"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing:$$missing (run as root or: sudo apt-get install -y$$missing)"; \
	  fi; \
	fi

# One line per step on the terminal. pip's output goes to $(SETUP_LOG): with it the ERROR lines pip
# prints where the CPU index is out of reach, which the next step expects; a failed step names the log
# and shows its end.
SETUP_LOG := $(VENV)/setup.log
# `logged CMD...`: CMD's output into the log after a line naming it; $(FAILED) shows the last command's.
LOGGED = logged() { echo "==== $$*" >>$(SETUP_LOG); "$$@" >>$(SETUP_LOG) 2>&1; };
FAILED = { echo " failed; pip's output is in $(SETUP_LOG), ending:"; \
           awk '/^==== /{n=0} {last[n++]=$$0} END{for (i = (n > 15 ? n - 15 : 0); i < n; i++) print "  " last[i]}' $(SETUP_LOG); \
           exit 1; }

$(STAMP): pyproject.toml
	@printf 'setup: [1/3] virtual environment %s ...' '$(VENV)'; \
	if test -x $(PY); then echo " there"; else python3 -m venv $(VENV) && echo " created"; fi
	@: > $(SETUP_LOG)
	@# torch: the CPU build unless a CUDA GPU is present (an unpinned torch pulls GBs of CUDA
	@# wheels). A wheel provided locally (PIP_FIND_LINKS) wins; the CPU index is tried with a
	@# short timeout, since pip otherwise waits minutes on an index it cannot reach. Where the
	@# CPU index is out of reach, PyPI's build needs its nvidia-* dependencies (--no-deps
	@# would leave them out and `import torch` fails).
	@$(LOGGED) printf 'setup: [2/3] torch %s ...' '$(TORCH_VERSION)'; \
	if $(PY) -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$(TORCH_VERSION)')" 2>/dev/null; then \
	  echo " already installed"; \
	elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then \
	  printf ' the CUDA build (a GPU is here) ...'; logged $(PIP) install -q "torch==$(TORCH_VERSION)" || $(FAILED); echo " done"; \
	elif logged $(PIP) install -q --no-deps --no-index "torch==$(TORCH_VERSION)"; then \
	  echo " from a local wheel"; \
	elif logged $(PIP) install -q --no-deps --timeout 20 --retries 1 "torch==$(TORCH_VERSION)" --index-url $(TORCH_CPU_INDEX); then \
	  echo " the CPU build"; \
	else \
	  printf " CPU index unreachable: PyPI's build with its CUDA libraries (~3 GB; runs on the CPU) ..."; \
	  logged $(PIP) install -q "torch==$(TORCH_VERSION)" || $(FAILED); echo " done"; \
	fi
	@$(LOGGED) printf 'setup: [3/3] otel-grpo[dev] (pip install -e) ...'; logged $(PIP) install -q -e ".[dev]" || $(FAILED); echo " done"
	@touch $(STAMP)

setup: system-deps $(STAMP)

# The collector, Prometheus 3 + promtool, Alertmanager + amtool, helm and the Prometheus Operator's
# CRDs the tests run, built from their Go modules at otel_grpo/stack/backends.yml's versions into ~/.cache/otel-grpo/bin,
# once per machine; without Go it says so and the tests skip. The demo runs two of them: Prometheus
# and Alertmanager (`otel-grpo up`), and builds only those the machine has neither built nor on PATH
# (Debian's, from system-deps, are used and named with their versions: minutes instead of a long Go build).
backends:
	@scripts/build-backends.sh

demo-backends: $(STAMP)
	@$(PY) scripts/demo-backends.py prometheus alertmanager

# One pytest worker more than there are cores (pytest-xdist), each test file on one worker so that a
# file's module fixtures (a running stack, a trained run) are made once: much of the suite waits on the
# real processes it starts, so at one worker per core the cores idle (benchmarks/README.md, suite); the
# longest files are handed out first (tests/conftest.py), so the workers end together. The backends
# this machine lacks are built beside the suite (scripts/test.sh; their progress in $(VENV)/backends.log),
# not before it. `pytest` alone runs serially.
# The slowest tests are listed at the end: the suite's budget is 30 minutes on 2 cores.
test: setup
	scripts/test.sh $(VENV)/backends.log $(PY) -m pytest -q -n $$(($$(nproc) + 1)) --dist loadfile --durations=20

demo: setup demo-backends
	@$(VENV)/bin/otel-grpo demo

bench: setup
	$(PY) benchmarks/signals.py
	$(PY) benchmarks/emit.py
	$(PY) benchmarks/sidecar.py
	$(PY) benchmarks/runs_scale.py
	$(PY) benchmarks/retention.py
	$(PY) benchmarks/step_reads.py
	$(PY) benchmarks/step_writes.py
	$(PY) benchmarks/read_burst.py
	$(PY) benchmarks/cache_full.py
	$(PY) benchmarks/sqlite_wal.py
	$(PY) benchmarks/trainer.py
	$(PY) benchmarks/trl.py
	$(PY) benchmarks/alerts.py
	$(PY) benchmarks/team.py

clean:
	rm -rf $(VENV) .pytest_cache
