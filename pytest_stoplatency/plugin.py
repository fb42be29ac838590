"""The pytest plugin's entry point: options, ini keys, markers, and the platform guard.

The plugin works on Linux only (/proc, pidfds, prctl, cgroup v2), yet it is installed into
every pytest session of an environment, on a developer's Mac too. So this module imports
nothing Linux-only, and nothing that reads /proc: on Linux it registers one plugin object
per feature, the stop latency's (_linux.py) and, when asked for, the process-leak check's
(_leakplugin.py); anywhere else the inactive one (_inactive.py), which says so once in the
header and skips what needs Linux. Help texts are module constants, shared by the options,
the ini keys, the tests and docs/plugin.md.
"""

from __future__ import annotations

import sys

import pytest

HELP_ENABLE = "run the stop-latency tests (marked stop_latency); without it they are skipped"
HELP_INI = "run the stop-latency tests (marked stop_latency), as --stop-latency does"
HELP_JSON = "write every stop-latency sample and the per-label summary to PATH as JSON"
HELP_REPEAT = "run each stop_latency-marked test N times (to collect enough samples for a p95)"
MARKER_LINE = (
    "stop_latency(bound=SECONDS, label=TEXT): a stop-latency test; skipped unless --stop-latency "
    "(or the stop_latency ini key) is set; its samples are checked against the bound"
)
SKIP_REASON = "stop-latency test: enable with --stop-latency (or stop_latency = true in the ini file)"
LEAK_HEADER = "stoplatency: test leaked victim processes"

HELP_LEAKS = (
    "report each test that leaves a process it started alive after its teardown, as an error at that "
    "teardown (children, setsid escapees, double forks, processes without the run tag; a wider fixture's "
    "after its own teardown; what starts between tests or after the last one at session level), and kill "
    "those processes"
)
HELP_LEAKS_INI = "check every test for leaked processes, as --process-leaks does"
HELP_LEAKS_JSON = "write the process leaks (leaking tests, each process and its escape route) to PATH as JSON"
LEAKS_MARKER_LINE = (
    "process_leaks(enabled=False): turn the --process-leaks check off for this test (or module, as pytestmark)"
)
PROCESS_LEAKS_HEADER = "stoplatency: process leaks"
HELP_LEAKS_CGROUP = (
    "as --process-leaks, and run each test in a cgroup of its own (cgroup v2, where writable), which "
    "also finds a process that dropped its environment and left pytest's process tree; costs two "
    "moves of pytest between cgroups per test, each up to an RCU grace period (milliseconds) when "
    "tests are spaced out (the plugin guide, docs/plugin.md, gives the measured cost)"
)
HELP_LEAKS_CGROUP_INI = "run each test in a cgroup of its own, as --process-leaks-cgroup does"
NO_CGROUP_LINE = (
    "stoplatency: --process-leaks runs without a cgroup: a process that drops its environment (env -i) "
    "and leaves pytest's process tree (a double fork, a daemon's child) is not seen; add "
    "--process-leaks-cgroup to see it (needs a writable cgroup v2 with cgroup.kill, Linux 5.14+: as root, "
    "or in a delegated cgroup, e.g. systemd-run --user --scope -p Delegate=yes pytest ...), or "
    "--process-leaks-subreaper (pytest then adopts orphans: a side effect)"
)
CGROUP_UNAVAILABLE = "(--process-leaks-cgroup: no writable cgroup v2 with cgroup.kill here)"
CGROUP_LINE = "stoplatency: --process-leaks-cgroup: each test runs in a cgroup of its own under"
HELP_LEAKS_SUBREAPER = (
    "as --process-leaks, and make pytest a child subreaper, so that a double-forked process that "
    "dropped its environment stays in pytest's tree and is found; changes the process tree the code "
    "under test sees: an orphan of a test's process is re-parented to pytest, not init"
)
HELP_LEAKS_SUBREAPER_INI = "make pytest a child subreaper for the leak check, as --process-leaks-subreaper does"
SUBREAPER_LINE = (
    "stoplatency: --process-leaks-subreaper: pytest is a child subreaper: an orphan of a test's process is "
    "re-parented to pytest, not init (its getppid() is pytest's pid; psutil.Process().children() lists it)"
)
SUBREAPER_UNAVAILABLE = "stoplatency: --process-leaks-subreaper: the kernel refused PR_SET_CHILD_SUBREAPER here"
AT_EXIT_LINE = (
    "stoplatency: process leaks found at exit (started while pytest shut down, after the session's "
    "check; the exit status was already decided):"
)
THREADS_LINE = "stoplatency: threads still running, whose processes are checked again at exit"
INACTIVE_HEADER = "stoplatency: inactive:"
NEEDS_LINUX = "pytest-stoplatency needs Linux (/proc, pidfds, cgroup v2); this is sys.platform"
LEAKS_OFF_LINUX = "{what}: no process-leak check can run here: {reason}"
LEAKS_INI_OFF_LINUX = " (turn it off here with -o {key}=false)"


def inactive_reason() -> str | None:
    """Why the plugin is inactive here, or None on Linux. Read at configure time, not at
    import, so that a test can fake another platform before pytest loads the plugin."""
    if sys.platform.startswith("linux"):  # ablate: plugin-platform-guard
        return None
    return f"{NEEDS_LINUX} {sys.platform!r}"


def pytest_addoption(parser):
    g = parser.getgroup("stoplatency", "stop latency")
    g.addoption("--stop-latency", action="store_true", default=None, dest="stop_latency", help=HELP_ENABLE)
    g.addoption("--stop-latency-json", dest="stop_latency_json", metavar="PATH", default=None, help=HELP_JSON)
    g.addoption("--stop-latency-repeat", dest="stop_latency_repeat", metavar="N", type=int, default=1, help=HELP_REPEAT)
    parser.addini("stop_latency", HELP_INI, type="bool", default=False)
    g.addoption("--process-leaks", action="store_true", default=None, dest="process_leaks", help=HELP_LEAKS)
    g.addoption("--process-leaks-json", dest="process_leaks_json", metavar="PATH", default=None, help=HELP_LEAKS_JSON)
    parser.addini("process_leaks", HELP_LEAKS_INI, type="bool", default=False)
    g.addoption(
        "--process-leaks-cgroup", action="store_true", default=None, dest="process_leaks_cgroup", help=HELP_LEAKS_CGROUP
    )
    parser.addini("process_leaks_cgroup", HELP_LEAKS_CGROUP_INI, type="bool", default=False)
    g.addoption(
        "--process-leaks-subreaper",
        action="store_true",
        default=None,
        dest="process_leaks_subreaper",
        help=HELP_LEAKS_SUBREAPER,
    )
    parser.addini("process_leaks_subreaper", HELP_LEAKS_SUBREAPER_INI, type="bool", default=False)


def enabled(config) -> bool:
    opt = config.getoption("stop_latency")
    return bool(opt) if opt is not None else bool(config.getini("stop_latency"))


def leaks_cgroup(config) -> bool:
    opt = config.getoption("process_leaks_cgroup")
    return bool(opt) if opt is not None else bool(config.getini("process_leaks_cgroup"))


def leaks_subreaper(config) -> bool:
    opt = config.getoption("process_leaks_subreaper")
    return bool(opt) if opt is not None else bool(config.getini("process_leaks_subreaper"))


def leaks_enabled(config) -> bool:
    if leaks_cgroup(config) or leaks_subreaper(config):
        return True
    opt = config.getoption("process_leaks")
    return bool(opt) if opt is not None else bool(config.getini("process_leaks"))


def _leak_check_asked(config) -> str | None:
    """The option or ini key that asks for the leak check, as the user wrote it."""
    for opt, flag in (
        ("process_leaks", "--process-leaks"),
        ("process_leaks_cgroup", "--process-leaks-cgroup"),
        ("process_leaks_subreaper", "--process-leaks-subreaper"),
        ("process_leaks_json", "--process-leaks-json"),
    ):
        if config.getoption(opt):
            return flag
    for key in ("process_leaks", "process_leaks_cgroup", "process_leaks_subreaper"):
        if config.getini(key):
            return f"{key} = true (ini file)"
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", MARKER_LINE)
    config.addinivalue_line("markers", LEAKS_MARKER_LINE)
    reason = inactive_reason()
    if reason is None:
        # Two features, two plugin objects (as pytest's own LoggingPlugin, CaptureManager):
        # the stop latency's always; the process-leak check's only when it is on (an
        # unused check reads nothing and changes nothing).
        from . import _linux

        config.pluginmanager.register(_linux.StopLatency(config), _linux.PLUGIN_NAME)
        if leaks_enabled(config):
            from . import _leakplugin, _records, _token

            # The owner's record directory marks this process as one whose processes a
            # sweep may have to end (its tagged ones, its session cgroup) should it die:
            # created before any test runs, removed at a clean end (_cleanup.drop_own_records).
            _records.owner_dir(_token.me())
            config.pluginmanager.register(_leakplugin.ProcessLeaks(config), _leakplugin.NAME)
        return
    # A check that cannot run must not pass for one that found nothing.
    asked = _leak_check_asked(config)
    if asked is not None:
        hint = LEAKS_INI_OFF_LINUX.format(key=asked.split()[0]) if "(ini file)" in asked else ""
        raise pytest.UsageError(LEAKS_OFF_LINUX.format(what=asked, reason=reason) + hint)
    from . import _inactive

    config.stash[_inactive.REASON] = reason
    config.pluginmanager.register(_inactive, _inactive.PLUGIN_NAME)
