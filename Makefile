# Every target bootstraps .venv from pyproject.toml by itself: on a fresh machine
# `make measure` and `make test` are the whole set-up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ARTIFACTS := .artifacts

.PHONY: package-check measure-docs
.PHONY: venv bytecode browser init container test test-loaded test-loaded-ci measure mutate mutate-ci docs docs-check bench bench-ci lint soak soak-short screenshot examples leak-demo leaks-strangers

# compat: a plain path entry instead of setuptools' import-hook finder, which costs about
# 12 ms at every interpreter start (every victim, engine and runner command pays it).
#
# Before .venv exists, tools/requirements.sh checks what it needs (Linux 5.3, Python 3.11
# as $(PYTHON), its venv module): a missing one stops make with one line, before anything
# is created. A .venv is reused only if its pip runs; one that a failed bootstrap left
# half-made is removed and made again, and a `python -m venv` that fails removes what it made.
ifeq ($(wildcard $(STAMP)),)
MISSING := $(shell sh tools/requirements.sh "$(PYTHON)" 2>&1)
ifneq ($(MISSING),)
$(error $(MISSING))
endif
endif
$(STAMP): pyproject.toml
	@$(PY) -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV); $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "make: '$(PYTHON) -m venv $(VENV)' failed (see above); nothing was kept" >&2; exit 1; }; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[plots]' --group test --group dev --group package --config-settings editable_mode=compat
	touch $(STAMP)

venv: $(STAMP)

# Byte-compile the project's own modules. Every `runner` command (each stop, each engine)
# is a new interpreter: with PYTHONDONTWRITEBYTECODE set (as on these machines) and no
# .pyc on disk, each one would compile its modules from source again, tens of ms of its
# stop latency. pip does this for an installed package; an editable checkout needs it
# here. Cheap when nothing changed.
bytecode: $(STAMP)
	$(PY) -m compileall -q runner pytest_stoplatency mutation bench reliability > /dev/null

# Debian's chromium, which the dashboard's browser tests drive through Playwright (never a
# browser download: none can work here). Installed where this user may (root, apt-get);
# elsewhere the browser tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
		  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; }; } || \
		echo "make: no chromium could be installed: the dashboard's browser tests will skip" >&2

# Debian's tini, the container recipe's PID 1 (examples/kubernetes/: its Containerfile, and
# run-local, which the examples' tests and the soak drive). Installed where this user may
# (root, apt-get); elsewhere those tests skip and the soak says so.
init:
	@command -v tini >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tini >/dev/null 2>&1 || \
		  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tini >/dev/null; }; }; } || \
		echo "make: no tini could be installed: run-local's tests skip and the soak's run-local row fails" >&2

# The container recipe run by a real runtime (examples/kubernetes/podman_check.py): podman,
# runc and debootstrap from Debian's packages (installed where this user may: root,
# apt-get), a local Debian base made by debootstrap and cached outside the checkout
# (/var/cache/pytest-stoplatency as root), a wheelhouse made here and an image built with
# no network; then `podman stop` before the engine starts, in a session and in the kill
# grace, each checked (exit code against job.yaml's podFailurePolicy, nothing left, the
# stop recorded), and a second and third run on the same volume (resumed, completed).
# CONTAINER_BASE=IMAGE builds FROM a registry's base instead.
CONTAINER_BASE ?=
container: $(STAMP)
	@command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc debootstrap >/dev/null 2>&1 || \
		  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc debootstrap >/dev/null; }; }; } || \
		{ echo "make: container: no podman could be installed (not root, or no apt-get): nothing to run" >&2; exit 1; }
	$(PY) examples/kubernetes/podman_check.py $(if $(CONTAINER_BASE),--base $(CONTAINER_BASE))

# Lint, format, types and architecture: ruff (lint and format check), mypy (strict on
# runner/; see [tool.mypy] in pyproject.toml) and import-linter (runner/'s allowed import
# directions, [tool.importlinter]). CI runs this before the tests.
LINTED := runner pytest_stoplatency mutation tests bench reliability docs docgen examples tools
lint: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

# SUITE_PROBE=DIR (CI): `make test` and `make examples` load the campaign's probe, which
# writes what each test did to DIR/<target>/pytest.json; `make mutate-ci` reads them as
# its baseline instead of running every killer again. It only records.
SUITE_PROBE ?=
PROBED = $(if $(SUITE_PROBE),env MUTATION_PROBE_DIR=$(abspath $(SUITE_PROBE))/$@ $(PY) -m pytest -p mutation._pytest_probe,$(PY) -m pytest)

# The whole suite, the stop-latency tests included, in parallel.
test: $(STAMP) bytecode browser
	mkdir -p $(ARTIFACTS)
	$(PROBED) --stop-latency -n 2 --stop-latency-json $(ARTIFACTS)/test-latency.json

# The timing-sensitive part of the suite (the stop under faults, PID 1 and pid namespaces,
# the dashboard, directory safety, membership's exit window, the engine's stop, the
# plugin's guardian, the ablation runner) with the machine kept busy beside it: two CPU
# hogs and an I/O hog (tools/loaded.py, which always kills them, also on a failure or an
# interrupt). A proof that holds only on a quiet machine is a defect (principle 15).
# Before each resolve; .ci/run runs the reduced form, test-loaded-ci (LOADED_CI_TESTS).
LOADED_TESTS ?= tests/runner/test_stop_faults.py tests/runner/test_pid_namespace.py \
	tests/runner/test_dashboard_browser.py tests/runner/test_dashboard_page.py tests/runner/test_dashboard_http.py \
	tests/runner/test_dir_safety.py tests/runner/test_dir_identity.py tests/runner/test_membership.py \
	tests/runner/test_stop_all.py tests/runner/test_stop_kill_first.py tests/runner/test_status_model.py \
	tests/runner/test_watchdog_wakeup.py tests/runner/test_disk_faults.py tests/mutation tests/plugin/test_leaks.py
LOADED_CI_TESTS ?= tests/runner/test_stop_faults.py tests/runner/test_stop_all.py tests/runner/test_stop_kill_first.py \
	tests/runner/test_membership.py tests/runner/test_status_model.py tests/runner/test_watchdog_wakeup.py \
	tests/runner/test_dashboard_http.py
LOADED := $(PY) tools/loaded.py --cpu 2 --io 1 --
test-loaded: $(STAMP) bytecode browser
	$(LOADED) $(PY) -m pytest --stop-latency -n 2 $(LOADED_TESTS)

test-loaded-ci: $(STAMP) bytecode
	$(LOADED) $(PY) -m pytest --stop-latency -n 2 $(LOADED_CI_TESTS)

# examples/: the stop bugs of common tools (subprocess.run, asyncio, pytest-timeout, a
# group reaper, supervisord, Popen.terminate/kill), each beside its fix. Its own
# pytest.ini (strict xfails, --process-leaks), not in `make test`; the `examples`
# dependency group (pyproject.toml) installs supervisor and kubernetes-validate.
EXAMPLES_STAMP := $(VENV)/.installed-examples
$(EXAMPLES_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet --group examples
	touch $(EXAMPLES_STAMP)

# Two at a time: most of the examples wait out a bound (a tool that does not stop), so
# they mostly sleep; 185 s serially, 105 s so, beside other work (load 6-8).
examples: $(EXAMPLES_STAMP) init
	$(PROBED) -n 2 examples

# The stop-latency tests only, serially (parallel load distorts latencies),
# 20 samples per label so that a p95 means something. Prints the table, writes the
# samples to .artifacts/measure.json and the report rendered from them to
# .artifacts/stop-latency.md, and says so: the checkout stays as it was (git status
# clean). `make measure-docs` is the maintainer's: it makes the new measurement the
# committed docs/measure.json and renders the documents from it.
measure: $(STAMP) bytecode browser
	mkdir -p $(ARTIFACTS)
	$(PY) -m pytest --stop-latency -p no:xdist -m stop_latency --stop-latency-repeat 20 \
		--stop-latency-json $(ARTIFACTS)/measure.json -q
	$(PY) docgen/render_stop_latency.py --measure $(ARTIFACTS)/measure.json --out $(ARTIFACTS)/stop-latency.md
	@echo "make measure wrote $(ARTIFACTS)/measure.json (every sample) and $(ARTIFACTS)/stop-latency.md (the report rendered from it); the committed docs are unchanged (make measure-docs makes this measurement theirs)"

# The maintainer's: `make measure`, then its samples become the committed docs/measure.json
# and the documents are rendered from them (docs/stop-latency.md, docs/plugin.md, the
# pictures: git diff shows what moved). `make docs-check` holds the committed documents to
# the committed JSON.
measure-docs: measure
	cp $(ARTIFACTS)/measure.json docs/measure.json
	$(MAKE) --no-print-directory docs
	@echo "make measure-docs rewrote docs/measure.json and the documents rendered from it: see git diff"

# The sdist and the wheel as an index gets them (tools/check_package.py): python -m build,
# twine check --strict, check-wheel-contents, LICENSE in both, a wheel of the runtime
# alone, and the unpacked sdist's own pytest collecting the whole suite. About 10 s;
# tests/test_packaging.py runs the same check in `make test`.
package-check: $(STAMP)
	$(PY) tools/check_package.py --collect

# The ablations (mutation/mutations.toml): a baseline, then each mutation in a scratch
# copy, 2 at a time. Inner pytest output goes to $(ARTIFACTS)/mutate/*.log; stdout gets
# the table. CI passes MUTATE_JSON elsewhere so that it never rewrites the committed one.
MUTATE_JSON ?= docs/mutate.json
mutate: $(STAMP) bytecode
	$(PY) -m mutation --jobs 2 --artifacts $(ARTIFACTS)/mutate --json $(MUTATE_JSON)

# CI's campaign: the same mutations and verdicts, the baseline read from the suite's own
# runs of this tree (`make test` and `make examples` with SUITE_PROBE set, before it):
# refused unless every killer and survivor ran green there.
mutate-ci: $(STAMP) bytecode
	$(if $(SUITE_PROBE),,$(error mutate-ci reads the suite's runs: give it the SUITE_PROBE=DIR that make test and make examples had))
	$(PY) -m mutation --jobs 2 --artifacts $(ARTIFACTS)/mutate --json $(MUTATE_JSON) \
		--baseline-from $(SUITE_PROBE)/test/pytest.json --baseline-from $(SUITE_PROBE)/examples/pytest.json

# docs/spec.md from its template and runner/files/spec.py's SCHEMA (docs-check also fails
# when it lacks a key the parser accepts); docs/stop-latency.md from its template, docs/measure.json, docs/mutate.json and
# runner/defaults.py; docs/plugin.md from its template, the plugin's code, docs/measure.json,
# docs/process-leaks-bench.json, docs/process-leaks-demo.json and examples/;
# examples/kubernetes/job.yaml from its template and `runner bound --container`. docs-check
# fails (with a diff) when a committed file is stale.
# The pictures (docgen/render_pictures.py) need matplotlib, the plots extra, which `make venv`
# installs (so the tests of --stop-latency-svg and --svg run in CI too). `make docs-check`
# does not redraw them: it checks each picture's stamp (the SHA-256 of what it was drawn
# from), since matplotlib's SVG may change by a byte between its releases.
docs: $(STAMP)
	$(PY) docgen/render_pictures.py
	$(PY) docgen/render_spec.py
	$(PY) docgen/render_stop_latency.py
	$(PY) docgen/render_plugin.py
	$(PY) examples/kubernetes/render_job.py

docs-check: $(STAMP)
	$(PY) docgen/render_pictures.py --check
	$(PY) docgen/render_spec.py --check
	$(PY) docgen/render_stop_latency.py --check
	$(PY) docgen/render_plugin.py --check
	$(PY) examples/kubernetes/render_job.py --check

# docs/process-leaks-demo.json: a real `pytest --process-leaks` run of docgen/leak_demo/, whose
# report opens docs/plugin.md, and docs/stop-latency-demo.json: a real `pytest --stop-latency`
# run of examples/guide/test_first_stop.py, whose summary the guide shows (pasted from the
# runs, never typed); then the document.
leak-demo: $(STAMP) bytecode
	$(PY) docgen/leak_demo.py --out docs/process-leaks-demo.json
	$(PY) docgen/latency_demo.py --out docs/stop-latency-demo.json
	$(PY) docgen/render_plugin.py

# docs/leaks-strangers.json (issues 28, 39): --process-leaks on seven strangers' suites (psutil,
# pexpect, execnet, sh, plumbum, pytest-xprocess, supervisor's end-to-end tests) from their sdists,
# serially and with -n 2, each plain, with the
# check and plain again, an independent checker beside each session (bench/strangers/); then
# the document. Not in CI: it needs PyPI's sdists (pip download) and about an hour on 2 cores.
# Exits 1 (after writing) when a suite changed outcome, a report went unverified, the checker
# saw a miss, or something outlived a session with the check.
STRANGERS_ARGS ?=
leaks-strangers: $(STAMP) bytecode
	$(PY) -m bench.strangers --json docs/leaks-strangers.json $(STRANGERS_ARGS); status=$$?; \
		$(PY) docgen/render_plugin.py && exit $$status

# docs/dashboard.png (shown in README.md): the dashboard over three real runs, taken by
# chromium. Never drawn by hand.
screenshot: $(STAMP) browser
	$(PY) docgen/dashboard_screenshot.py --out docs/dashboard.png

# The benchmarks' own tools on top of the venv (the `bench` dependency group: supervisor). tini and
# dumb-init are Debian packages (apt-get install tini dumb-init): where they are absent
# the stop benchmark skips them with a note.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --group bench
	touch $(BENCH_STAMP)

# Benchmarks: exact speeds, never asserted by the suite. The membership cost goes to
# $(ARTIFACTS)/bench-membership.json; the stop benchmark (python -m bench.stoppers: the
# stoppers compared through the stop-conformance kit's adapters and measurement,
# pytest_stoplatency/kit/, at scale, under load; items scaling against a bare spawning loop,
# journal size, 10, 100 and 500 runs under one directory, the dashboard's CPU with a page
# open, the unused plugin's cost, and how long a container's PID 1 is deaf to SIGTERM) writes
# docs/bench.json, which `make docs`
# renders into docs/stop-latency.md (also when --check finds a runner cell that left an
# orphan: the document shows it, then make fails).
# BENCH_ARGS passes options through (e.g. BENCH_ARGS='--n 3'; python -m bench.stoppers --help).
# The document is rendered in the same shell line (not through $(MAKE), which `make -n`
# would run), so that it is rendered even when --check fails.
BENCH_JSON ?= docs/bench.json
BENCH_ARGS ?=
bench: $(BENCH_STAMP) bytecode init browser
	mkdir -p $(ARTIFACTS)
	$(PY) bench/membership_cost.py --n 1000 --json $(ARTIFACTS)/bench-membership.json
	$(PY) bench/process_leaks_cost.py --n 400 --rounds 3 --live 500 --hogs 2 --json docs/process-leaks-bench.json
	$(PY) -m bench.stoppers --parts stoppers,scale,load,items,journal,runs,dashboard,traffic,plugin,pid1,cost --json $(BENCH_JSON) --check $(BENCH_ARGS); status=$$?; \
		$(PY) docgen/render_stop_latency.py && $(PY) docgen/render_plugin.py && exit $$status

# CI's reduced stop benchmark (n=1, `timeout -k` and the two runner stops, small scale
# and load): keeps it working, fails on an orphan of the runner; never writes the
# committed docs/bench.json.
bench-ci: $(STAMP) bytecode
	mkdir -p $(ARTIFACTS)
	$(PY) -m bench.stoppers --ci --check --json $(ARTIFACTS)/bench-ci.json

# The reliability soak: 200 engine SIGKILLs with resume, 50 runs stopped at once (hard,
# then --now), 10 stoppers on one run; the stop under faults (20 stoppers SIGKILLed and 20
# SIGINTed at random moments, 5 fork storms, SIGTERM at 0.02-1 s to a foreground run and to
# a PID-1 run, twice each; SIGTERM to run-local's PID 1 at each of its moments, 20 times,
# quiet and beside two CPU hogs); the disk faults and the faults at the seams (20 trials
# each: rm -rf during each stop mode, a full pids cgroup, a lazy unmount, hard-link
# backups, every refusal's bytes); then the fuzz tests with thousands of examples.
# Writes docs/soak.json, which `make docs` renders into the Reliability section.
soak: $(STAMP) bytecode init
	$(PY) reliability/soak.py --kills 200 --runs 50 --stoppers 10 --faults 20 --storms 5 --early 2 --run-local 20 --modes 3 --all-now 60 \
		--json docs/soak.json --check
	HYPOTHESIS_PROFILE=soak $(PY) -m pytest -p no:xdist -q tests/runner/test_fuzz.py
	$(MAKE) --no-print-directory docs

# CI's short soak: fails on any loss; never writes the committed docs/soak.json.
soak-short: $(STAMP) bytecode init
	mkdir -p $(ARTIFACTS)
	$(PY) reliability/soak.py --kills 20 --runs 10 --stoppers 10 --faults 3 --storms 1 --early 1 --disk-trials 3 --run-local 1 --seam-trials 1 \
		--json $(ARTIFACTS)/soak-ci.json --check
