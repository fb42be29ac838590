# Every target bootstraps .venv from pyproject.toml by itself: on a fresh machine
# `make measure` and `make test` are the whole set-up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ARTIFACTS := .artifacts

.PHONY: venv browser test measure mutate docs docs-check bench lint soak soak-short screenshot

# compat: a plain path entry instead of setuptools' import-hook finder, which costs about
# 12 ms at every interpreter start (every victim, engine and runner command pays it).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]' --config-settings editable_mode=compat
	touch $(STAMP)

venv: $(STAMP)

# Debian's chromium, which the dashboard's browser tests drive through Playwright (never a
# browser download: none can work here). Installed where this user may (root, apt-get);
# elsewhere the browser tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
		  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; }; } || \
		echo "make: no chromium could be installed: the dashboard's browser tests will skip" >&2

# Lint, format and types: ruff (lint and format check) and mypy (strict on runner/; see
# [tool.mypy] in pyproject.toml). CI runs this before the tests.
LINTED := runner pytest_stoplatency mutation tests bench docs
lint: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(PY) -m mypy

# The whole suite, the stop-latency tests included, in parallel.
test: $(STAMP) browser
	mkdir -p $(ARTIFACTS)
	$(PY) -m pytest --stop-latency -n 2 --stop-latency-json $(ARTIFACTS)/test-latency.json

# The stop-latency tests only, serially (parallel load distorts latencies),
# 20 samples per label so that a p95 means something.
measure: $(STAMP) browser
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
# runner/defaults.py. docs-check fails (with a diff) when the committed file is stale.
docs: $(STAMP)
	$(PY) docs/render_stop_latency.py

docs-check: $(STAMP)
	$(PY) docs/render_stop_latency.py --check

# docs/dashboard.png (shown in README.md): the dashboard over three real runs, taken by
# chromium. Never drawn by hand.
screenshot: $(STAMP) browser
	$(PY) docs/dashboard_screenshot.py --out docs/dashboard.png

# Benchmarks: exact speeds, never asserted by the suite. Results go to $(ARTIFACTS)/bench-*.json.
bench: $(STAMP)
	mkdir -p $(ARTIFACTS)
	$(PY) bench/membership_cost.py --n 1000 --json $(ARTIFACTS)/bench-membership.json

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
