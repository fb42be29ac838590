"""The plugin's options, ini keys, their help texts and the texts its reports print, and the
readers that say what a session asked for.

One module that every other imports (plugin.py, the entry point; _linux.py, _leakplugin.py,
_inactive.py), so that none of them imports another for a text or a setting: the entry point
imports the feature modules, never the reverse. Help texts are module constants, shared by
the options, the ini keys, the tests and docs/plugin.md. Imports nothing Linux-only (it loads
on every platform).
"""

from __future__ import annotations

import importlib.util
import re

import pytest

HELP_ENABLE = "run the stop-latency tests (marked stop_latency); without it they are skipped"
HELP_INI = "run the stop-latency tests (marked stop_latency), as --stop-latency does"
HELP_JSON = "write every stop-latency sample and the per-label summary to PATH as JSON"
HELP_SVG = (
    "draw the latency distribution per label (each sample a dot, the bound a red bar) as an SVG at PATH "
    "(needs matplotlib: the plots extra)"
)
HELP_REPEAT = (
    "run each stop_latency-marked test N times (to collect enough samples for a p95), and each kind of "
    "--stop-conformance N times"
)
HELP_COMPARE = "compare this session's stop latencies, label by label, with a previous --stop-latency-json file"
HELP_COMPARE_FAIL = (
    "with --stop-latency-compare: fail the session when a label's STAT (min, median, p95 or max) "
    "is slower than before by more than THRESH, relative (median:25%) or absolute (median:5ms, "
    "max:+50ms); a label with a failed sample fails it always"
)
HELP_COMPARE_ALLOW_NEW = (
    "with --stop-latency-compare: pass a session none of whose labels is in the previous file "
    "(without it such a compare fails, exit 6)"
)
COMPARE_STATS = ("min", "median", "p95", "max")
HELP_CONFORMANCE = (
    "run the stop-conformance kit's victim zoo against this stopper (a built-in adapter's name or "
    "module:Class), one test per victim kind, with the stop-latency table and JSON; may be given more than once"
)
HELP_CONFORMANCE_START = (
    "with --stop-conformance-stop: start each victim the way the tool under test starts work, a shell "
    "command whose {argv} is the victim's command line (as the kit's --start)"
)
HELP_CONFORMANCE_STOP = (
    "run the stop-conformance zoo against this stop command (a shell command; {pid} is the started "
    "process, {pgid} its group), as the kit's --stop; its labels are 'command / KIND'"
)
MARKER_LINE = (
    "stop_latency(bound=SECONDS, label=TEXT): a stop-latency test; skipped unless --stop-latency "
    "(or the stop_latency ini key) is set; its samples are checked against the bound"
)
SKIP_REASON = "stop-latency test: enable with --stop-latency (or stop_latency = true in the ini file)"
LEAK_HEADER = "stoplatency: test leaked victim processes"

# -- --process-leaks ----------------------------------------------------------------------

MODE_ERROR = "error"
MODE_WARN = "warn"
KILL_SESSION = "session"
KILL_TEARDOWN = "teardown"
KILLS = (KILL_SESSION, KILL_TEARDOWN)

GRACE = 0.25
"""Seconds the check waits, at most, for a test's leftover processes to exit on their own
before it calls them leaked (one wait for all of them, on their pidfds): a process already
told to exit (a gateway after its exit(), a server after its stop()) is gone within tens of
milliseconds, and is no leak. Paid only where some process is left, and only until the last
of them exits."""

STOP_GRACE = 2.0
"""Seconds the check waits, at most, for a leftover process that was told to stop: one
exiting already (the kernel shows it), one with SIGTERM, SIGINT or SIGHUP pending, or one
that pytest's own process signalled so (os.kill, os.killpg: Popen.terminate(),
send_signal(), psutil's and pexpect's kill go through them) since it started. Once a
signal is delivered to a handler nothing in /proc shows it, so the check asks the sender.
Such a process runs its clean-up (supervisord's after its SIGINT, a server's SIGTERM
handler) and is gone within a second even at a load of 8; twice that keeps a busy machine
from turning a clean stop into a report, while the ordinary grace stays short. Paid only
where a told-to-stop process is still alive, and only until it exits."""

HELP_LEAKS = (
    "report each test that leaves a process it started alive after its teardown, as an error at that "
    "teardown (children, setsid escapees, double forks, processes without the run tag; a wider fixture's "
    "after its own teardown; what starts between tests or after the last one at session level); the "
    "processes are killed when the session ends (--process-leaks-kill), never in the middle of it"
)
HELP_LEAKS_WARN = "as --process-leaks, and each leak is a warning (ProcessLeakWarning), not an error"
HELP_LEAKS_INI = (
    "check every test for leaked processes, as --process-leaks does: true (or error), warn (as "
    "--process-leaks=warn), false"
)
HELP_LEAKS_KILL = (
    "when to kill a leaked process: 'session' (the default: at the session's end, or at once if pytest "
    "dies; the suite runs on exactly as without the check) or 'teardown' (at the check, as soon as it is "
    "reported: each test starts without the processes earlier tests leaked)"
)
HELP_LEAKS_KILL_INI = "when to kill a leaked process, as --process-leaks-kill: session or teardown"
HELP_LEAKS_GRACE = (
    "seconds to wait, at most, for a test's leftover processes to exit before they are called leaked "
    "(one wait for all of them; a process already told to exit is no leak)"
)
HELP_LEAKS_GRACE_INI = "as --process-leaks-grace: seconds a leftover process gets to exit"
HELP_LEAKS_STOP_GRACE = (
    "seconds to wait, at most, for a leftover process that was told to stop (exiting, SIGTERM/SIGINT/SIGHUP "
    "pending, or so signalled by pytest's own process since it started) before it is called leaked: a "
    "server's clean-up after its stop signal can outlast the ordinary grace on a busy machine; never less "
    "than --process-leaks-grace"
)
HELP_LEAKS_STOP_GRACE_INI = "as --process-leaks-stop-grace: seconds a leftover process told to stop gets to exit"
HELP_LEAKS_EXCLUDE_INI = (
    "a regular expression: a leaked process whose command line it matches (re.search) is not "
    "reported; it is still killed at the session's end"
)
HELP_LEAKS_JSON = "write the process leaks (leaking tests, each process and its escape route) to PATH as JSON"
LEAKS_MARKER_LINE = (
    "process_leaks(enabled=False): turn the --process-leaks check off for this test (or module, as pytestmark)"
)
PROCESS_LEAKS_HEADER = "stoplatency: process leaks"
KEPT_NOTE = "kept alive until the session's end (--process-leaks-kill=teardown kills at once)"
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


class ProcessLeakWarning(UserWarning):
    """A process leak, under --process-leaks=warn (``-W error::pytest_stoplatency.ProcessLeakWarning``
    makes each one an error again)."""


_TRUE = ("true", "yes", "on", "1", MODE_ERROR)
_FALSE = ("false", "no", "off", "0", "")


def add_options(parser) -> None:
    g = parser.getgroup("stoplatency", "stop latency")
    g.addoption("--stop-latency", action="store_true", default=None, dest="stop_latency", help=HELP_ENABLE)
    g.addoption("--stop-latency-json", dest="stop_latency_json", metavar="PATH", default=None, help=HELP_JSON)
    g.addoption("--stop-latency-svg", dest="stop_latency_svg", metavar="PATH", default=None, help=HELP_SVG)
    g.addoption("--stop-latency-repeat", dest="stop_latency_repeat", metavar="N", type=int, default=1, help=HELP_REPEAT)
    g.addoption(
        "--stop-conformance",
        dest="stop_conformance",
        metavar="STOPPER",
        action="append",
        default=[],
        help=HELP_CONFORMANCE,
    )
    g.addoption(
        "--stop-conformance-start", dest="stop_conformance_start", metavar="CMD", default=None,
        help=HELP_CONFORMANCE_START,
    )  # fmt: skip
    g.addoption(
        "--stop-conformance-stop", dest="stop_conformance_stop", metavar="CMD", default=None,
        help=HELP_CONFORMANCE_STOP,
    )  # fmt: skip
    g.addoption("--stop-latency-compare", dest="stop_latency_compare", metavar="PATH", default=None, help=HELP_COMPARE)
    g.addoption(
        "--stop-latency-compare-fail",
        dest="stop_latency_compare_fail",
        metavar="STAT:THRESH",
        default=None,
        help=HELP_COMPARE_FAIL.replace("%", "%%"),  # argparse formats help with %
    )
    g.addoption(
        "--stop-latency-compare-allow-new",
        dest="stop_latency_compare_allow_new",
        action="store_true",
        default=False,
        help=HELP_COMPARE_ALLOW_NEW,
    )
    parser.addini("stop_latency", HELP_INI, type="bool", default=False)
    # `--process-leaks=warn` is an option string of its own, not a value of --process-leaks:
    # argparse matches a whole option string before it splits at "=", and a bare
    # --process-leaks never swallows the path after it (`pytest --process-leaks tests/`).
    leaks = {"action": "store_const", "dest": "process_leaks"}
    g.addoption("--process-leaks", const=MODE_ERROR, default=None, help=HELP_LEAKS, **leaks)
    g.addoption("--process-leaks=warn", const=MODE_WARN, help=HELP_LEAKS_WARN, **leaks)
    g.addoption("--process-leaks-json", dest="process_leaks_json", metavar="PATH", default=None, help=HELP_LEAKS_JSON)
    parser.addini("process_leaks", HELP_LEAKS_INI, type="string", default="false")
    g.addoption("--process-leaks-kill", dest="process_leaks_kill", choices=KILLS, default=None, help=HELP_LEAKS_KILL)
    parser.addini("process_leaks_kill", HELP_LEAKS_KILL_INI, type="string", default=KILL_SESSION)
    g.addoption(
        "--process-leaks-grace",
        dest="process_leaks_grace",
        metavar="SECONDS",
        type=float,
        default=None,
        help=HELP_LEAKS_GRACE,
    )
    parser.addini("process_leaks_grace", HELP_LEAKS_GRACE_INI, type="string", default=str(GRACE))
    g.addoption(
        "--process-leaks-stop-grace",
        dest="process_leaks_stop_grace",
        metavar="SECONDS",
        type=float,
        default=None,
        help=HELP_LEAKS_STOP_GRACE,
    )
    parser.addini("process_leaks_stop_grace", HELP_LEAKS_STOP_GRACE_INI, type="string", default=str(STOP_GRACE))
    parser.addini("process_leaks_exclude", HELP_LEAKS_EXCLUDE_INI, type="string", default="")
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


def compare_fail(config):
    """--stop-latency-compare-fail as a gate rule (kit/gate.py's Rule); a malformed, NaN,
    infinite or negative threshold, or one without its unit, is a usage error."""
    value = config.getoption("stop_latency_compare_fail")
    if value is None:
        return None
    from .kit import gate  # only when a gate is asked for

    try:
        rule = gate.parse_rule(value, "--stop-latency-compare-fail")
    except gate.GateError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.getoption("stop_latency_compare") is None:
        raise pytest.UsageError("--stop-latency-compare-fail needs --stop-latency-compare PATH")
    return rule


def conformance_command(config) -> tuple[str | None, str] | None:
    """(--stop-conformance-start, --stop-conformance-stop), or None when no stop command is given."""
    start, stop = config.getoption("stop_conformance_start"), config.getoption("stop_conformance_stop")
    if start is not None and stop is None:
        raise pytest.UsageError("--stop-conformance-start needs --stop-conformance-stop (how the tool stops it)")
    return None if stop is None else (start, stop)


def conformance_asked(config) -> bool:
    return bool(config.getoption("stop_conformance")) or conformance_command(config) is not None


def svg_path(config) -> str | None:
    """--stop-latency-svg's PATH, refused up front (before any test runs) when matplotlib,
    the plots extra, is not installed: the message says how to install it. Found without
    importing it: the plugin's runtime never loads a plotting library unless it draws."""
    path = config.getoption("stop_latency_svg")
    if path and importlib.util.find_spec("matplotlib") is None:
        from .pictures import MISSING

        raise pytest.UsageError(f"--stop-latency-svg: {MISSING}")
    return path


def enabled(config) -> bool:
    opt = config.getoption("stop_latency")
    return bool(opt) if opt is not None else bool(config.getini("stop_latency"))


def leaks_cgroup(config) -> bool:
    opt = config.getoption("process_leaks_cgroup")
    return bool(opt) if opt is not None else bool(config.getini("process_leaks_cgroup"))


def leaks_subreaper(config) -> bool:
    opt = config.getoption("process_leaks_subreaper")
    return bool(opt) if opt is not None else bool(config.getini("process_leaks_subreaper"))


def _ini_mode(config) -> str | None:
    raw = str(config.getini("process_leaks")).strip().lower()
    if raw in _FALSE:
        return None
    if raw in _TRUE:
        return MODE_ERROR
    if raw == MODE_WARN:
        return MODE_WARN
    raise pytest.UsageError(f"process_leaks = {raw!r} (ini file): expected true, error, warn or false")


def leaks_mode(config) -> str | None:
    """MODE_ERROR, MODE_WARN, or None (the check is off)."""
    opt = config.getoption("process_leaks")
    mode = opt if opt is not None else _ini_mode(config)
    if mode is None and (leaks_cgroup(config) or leaks_subreaper(config)):
        return MODE_ERROR
    return mode


def leaks_enabled(config) -> bool:
    return leaks_mode(config) is not None


def leaks_kill(config) -> str:
    opt = config.getoption("process_leaks_kill")
    value = opt if opt is not None else str(config.getini("process_leaks_kill")).strip().lower()
    if value not in KILLS:
        raise pytest.UsageError(f"process_leaks_kill = {value!r} (ini file): expected one of {', '.join(KILLS)}")
    return value


def leaks_grace(config, key: str = "process_leaks_grace") -> float:
    opt = config.getoption(key)
    where = f"--{key.replace('_', '-')}" if opt is not None else f"{key} (ini file)"
    try:
        value = float(opt if opt is not None else config.getini(key))
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise pytest.UsageError(f"{where}: expected a number of seconds, 0 or more")
    return value


def leaks_stop_grace(config) -> float:
    return max(leaks_grace(config, "process_leaks_stop_grace"), leaks_grace(config))


def leaks_exclude(config) -> re.Pattern[str] | None:
    raw = str(config.getini("process_leaks_exclude")).strip()
    if not raw:
        return None
    try:
        return re.compile(raw)
    except re.error as exc:
        raise pytest.UsageError(f"process_leaks_exclude = {raw!r} (ini file): no regular expression: {exc}") from None
