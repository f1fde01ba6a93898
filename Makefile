# MCO — the two quick-start commands are `make run` and `make test`; both set up what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
export BCC_KERNEL_SOURCE ?= $(CURDIR)/.cache/kernel-headers
export PYTHONUNBUFFERED := 1

# `make run` knobs: STRESS=io|memory|cross-pod|io-limited|io-cross-pod drives real load; ports are all configurable.
STRESS ?=
RUN_ARGS ?=

.PHONY: all run test image image-test lint typecheck pytest bench soak reliability generate check-generated system venv clean help

all: test

help:
	@echo "make run        run MCO's local stack on this host (STRESS=io|memory|cross-pod|io-limited|io-cross-pod adds real load)"
	@echo "make test       set up and run the whole test suite (ruff, mypy, pytest)"
	@echo "make lint       ruff, mypy and shellcheck only"
	@echo "make bench      run the benchmarks (prints ratios against in-run baselines)"
	@echo "make soak       MCO under stress and outages for DURATION (default 24h; make bench runs 20m)"
	@echo "make reliability  replay issues 19's and 27's attacks at full scale (QUICK=1: smaller)"
	@echo "make generate   regenerate checked-in rules, CRDs and dashboards"
	@echo "make image      build the container image with buildah; writes $(IMAGE_ARCHIVE)"
	@echo "make image-test run the image as the chart runs it (tests/image)"

system:
	@scripts/setup-system.sh

$(STAMP):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "MCO needs Python >= 3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@# Debian ships bcc for its own python3 only; expose just that package to the venv.
	@site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	  if [ -d /usr/lib/python3/dist-packages/bcc ] && [ ! -e $$site/bcc ]; then \
	    ln -s /usr/lib/python3/dist-packages/bcc $$site/bcc; fi
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: system $(STAMP)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	@if command -v shellcheck >/dev/null; then shellcheck --severity=info scripts/*.sh; \
	  else echo "shellcheck is not installed (make system installs it): scripts/*.sh not linted"; fi

typecheck: venv
	$(BIN)/mypy

pytest: venv
	$(BIN)/pytest $(PYTEST_ARGS)

test: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest $(PYTEST_ARGS)

# The image's base is built from Debian packages (no registry needed); docs/helm.md.
IMAGE_ARCHIVE ?= .cache/image/mco.tar

image: venv
	$(BIN)/python -m scripts.image --archive $(IMAGE_ARCHIVE)

image-test: venv
	$(BIN)/pytest tests/image $(PYTEST_ARGS)

run: venv
	$(BIN)/python -m scripts.local_stack $(if $(STRESS),--stress $(STRESS)) $(RUN_ARGS)

bench: venv
	$(BIN)/python -m bench $(BENCH_ARGS)

# Hours of the local stack + a synthetic fleet under stress and outages (bench/soak.py).
DURATION ?= 24h
soak: venv
	$(BIN)/python -m bench.soak --duration $(DURATION) $(SOAK_ARGS)

reliability: venv
	$(BIN)/python -m bench.reliability $(if $(QUICK),--quick) $(RELIABILITY_ARGS)

generate: venv
	$(BIN)/python -m scripts.generate

check-generated: venv
	$(BIN)/python -m scripts.generate --check

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache build *.egg-info
