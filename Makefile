# Every target bootstraps .venv from pyproject.toml by itself: on a fresh machine
# `make measure` and `make test` are the whole set-up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ARTIFACTS := .artifacts

.PHONY: venv test measure mutate docs docs-check bench lint soak soak-short examples

# compat: a plain path entry instead of setuptools' import-hook finder, which costs about
# 12 ms at every interpreter start (every victim, engine and runner command pays it).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]' --config-settings editable_mode=compat
	touch $(STAMP)

venv: $(STAMP)

# Lint, format and types: ruff (lint and format check) and mypy (strict on runner/; see
# [tool.mypy] in pyproject.toml). CI runs this before the tests.
LINTED := runner pytest_stoplatency mutation tests bench docs examples
lint: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(PY) -m mypy

# The whole suite, the stop-latency tests included, in parallel.
test: $(STAMP)
	mkdir -p $(ARTIFACTS)
	$(PY) -m pytest --stop-latency -n 2 --stop-latency-json $(ARTIFACTS)/test-latency.json

# examples/: the stop bugs of common tools (subprocess.run, asyncio, pytest-timeout, a
# group reaper, supervisord, Popen.terminate/kill), each beside its fix. Its own
# pytest.ini (strict xfails, --process-leaks), not in `make test`; the examples extra
# installs supervisor.
EXAMPLES_STAMP := $(VENV)/.installed-examples
$(EXAMPLES_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,dev,examples]' --config-settings editable_mode=compat
	touch $(EXAMPLES_STAMP)

examples: $(EXAMPLES_STAMP)
	$(PY) -m pytest -p no:xdist examples

# The stop-latency tests only, serially (parallel load distorts latencies),
# 20 samples per label so that a p95 means something.
measure: $(STAMP)
	mkdir -p $(ARTIFACTS)
	$(PY) -m pytest --stop-latency -p no:xdist -m stop_latency --stop-latency-repeat 20 \
		--stop-latency-json docs/measure.json -q
	$(MAKE) --no-print-directory docs

# The ablations (mutation/mutations.toml): a baseline, then each mutation in a scratch
# copy, 2 at a time. Inner pytest output goes to $(ARTIFACTS)/mutate/*.log; stdout gets
# the table. CI passes MUTATE_JSON elsewhere so that it never rewrites the committed one.
MUTATE_JSON ?= docs/mutate.json
mutate: $(STAMP)
	$(PY) -m mutation --jobs 2 --artifacts $(ARTIFACTS)/mutate --json $(MUTATE_JSON)

# docs/stop-latency.md from its template, docs/measure.json, docs/mutate.json and
# runner/defaults.py; docs/plugin.md from its template, the plugin's code, docs/measure.json,
# docs/process-leaks-bench.json and examples/. docs-check fails (with a diff) when a
# committed file is stale.
docs: $(STAMP)
	$(PY) docs/render_stop_latency.py
	$(PY) docs/render_plugin.py

docs-check: $(STAMP)
	$(PY) docs/render_stop_latency.py --check
	$(PY) docs/render_plugin.py --check

# Benchmarks: exact speeds, never asserted by the suite. Results go to $(ARTIFACTS)/bench-*.json,
# except the --process-leaks cost, which docs/plugin.md renders (docs/process-leaks-bench.json).
bench: $(STAMP)
	mkdir -p $(ARTIFACTS)
	$(PY) bench/membership_cost.py --n 1000 --json $(ARTIFACTS)/bench-membership.json
	$(PY) bench/process_leaks_cost.py --n 400 --rounds 3 --json docs/process-leaks-bench.json

# The reliability soak: 200 engine SIGKILLs with resume, 50 runs stopped at once (hard,
# then --now), 10 stoppers on one run; then the fuzz tests with thousands of examples.
# Writes docs/soak.json, which `make docs` renders into the Reliability section.
soak: $(STAMP)
	$(PY) bench/soak.py --kills 200 --runs 50 --stoppers 10 --json docs/soak.json --check
	HYPOTHESIS_PROFILE=soak $(PY) -m pytest -p no:xdist -q tests/runner/test_fuzz.py
	$(MAKE) --no-print-directory docs

# CI's short soak: fails on any loss; never writes the committed docs/soak.json.
soak-short: $(STAMP)
	mkdir -p $(ARTIFACTS)
	$(PY) bench/soak.py --kills 20 --runs 10 --stoppers 10 --json $(ARTIFACTS)/soak-ci.json --check
