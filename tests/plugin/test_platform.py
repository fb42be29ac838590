"""Off Linux the plugin is harmless: it imports, loads, says once that it is inactive and why,
skips what needs Linux, and refuses a leak check it cannot run.

No macOS or Windows machine is at hand, so the inner pytest fakes one before it loads the
plugin (FAKE_PLATFORM, a `-p` plugin, which pytest imports before the entry points): it
sets sys.platform, makes every read of /proc fail as it does there (and records the
attempt), and removes the names that Windows lacks and the plugin's Linux modules use at
import time (signal.SIGKILL, os.getuid, os.sysconf, os.pidfd_open, fcntl). pytest itself
cannot run under a faked "win32" (its capture plugin needs the real Windows console), so
the Windows import is proved on its own, in a plain interpreter.
"""

import json
import re
import subprocess
import sys

import pytest

from pytest_stoplatency import _options

FAKE_PLATFORM = """
import atexit, builtins, io, json, os, signal, sys, sysconfig

sysconfig.get_config_vars()  # cached under the real platform (hypothesis's plugin reads it)
sys.platform = {platform!r}
TRIES = []


def _is_proc(path):
    try:
        path = os.fsdecode(path)
    except TypeError:
        return False  # a file descriptor
    return path == "/proc" or path.startswith("/proc/")


def _no_proc(f):
    def guarded(path=".", *args, **kwargs):
        if _is_proc(path):
            TRIES.append(os.fsdecode(path))
            raise FileNotFoundError(2, "No such file or directory", path)
        return f(path, *args, **kwargs)

    return guarded


os.listdir, os.scandir = _no_proc(os.listdir), _no_proc(os.scandir)
builtins.open = io.open = _no_proc(io.open)
for mod, name in ((signal, "SIGKILL"), (os, "getuid"), (os, "sysconf"), (os, "pidfd_open")):
    delattr(mod, name)
sys.modules["fcntl"] = None  # import fcntl: ImportError, as on Windows


@atexit.register
def _report():
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "pytest_stoplatency")
    with open({out!r}, "w") as f:
        json.dump({{"proc": TRIES, "modules": loaded}}, f)
"""

SUITE = """
import pytest

def test_plain():
    assert 1 + 1 == 2

@pytest.mark.stop_latency(bound=1.0)
def test_marked():
    raise AssertionError("a stop_latency test ran off Linux")

def test_victim(victim):
    victim("trap-term")

def test_recorder(stop_latency):
    stop_latency.measure("x")
"""

# The entry point, and the one module it registers off Linux: nothing Linux-only.
MODULES_OFF_LINUX = [
    "pytest_stoplatency",
    "pytest_stoplatency._inactive",
    "pytest_stoplatency._options",
    "pytest_stoplatency._session",
    "pytest_stoplatency.plugin",
]


def _fake(pytester, platform="darwin"):
    out = pytester.path / "fake-platform.json"
    pytester.makepyfile(fakeplatform=FAKE_PLATFORM.format(platform=platform, out=str(out)))
    return out


def run_faked(pytester, *args):
    return pytester.runpytest_subprocess("-p", "fakeplatform", "-p", "no:cacheprovider", "-p", "no:xdist", *args)


def test_off_linux_the_plugin_is_inactive_says_why_once_and_skips_what_needs_linux(pytester):
    """Path: plugin.inactive_reason and _inactive.py. Under a faked macOS (no /proc, none of
    Windows's missing names either), a suite with a plain test, a stop_latency test and tests
    of the victim and stop_latency fixtures, run WITH --stop-latency: the plain test passes,
    the rest skip with the reason, the header says it once, and the plugin never loaded a
    Linux module nor tried to read /proc.

    Ablation: `plugin-platform-guard` (the guard says Linux everywhere) and the inner pytest
    loads _linux.py, whose modules need os.getuid at import: red."""
    out = _fake(pytester)
    pytester.makepyfile(test_suite=SUITE)
    result = run_faked(pytester, "--stop-latency", "-rs")
    reason = f"{_options.NEEDS_LINUX} 'darwin'"
    result.assert_outcomes(passed=1, skipped=3)
    header = f"{_options.INACTIVE_HEADER} {reason}"
    assert result.stdout.str().count(header) == 1, result.stdout.str()
    result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] test_suite.py:*: {reason}"] * 3, consecutive=True)
    seen = json.loads(out.read_text())
    assert seen["proc"] == []
    assert seen["modules"] == MODULES_OFF_LINUX


def test_off_linux_an_unused_plugin_changes_nothing(pytester):
    """Path: off Linux a session that uses nothing of the plugin runs as without it: the same
    outcomes and the same lines below the header, with the plugin and with -p no:stoplatency.

    Ablation: `plugin-platform-guard` and the session with the plugin fails to start."""
    _fake(pytester)
    pytester.makepyfile(test_plain="def test_a():\n    pass\n\ndef test_b():\n    assert False\n")
    with_it = run_faked(pytester)
    without = run_faked(pytester, "-p", "no:stoplatency")
    with_it.assert_outcomes(passed=1, failed=1)
    without.assert_outcomes(passed=1, failed=1)

    def body(result):
        # From "collected" on: the header above differs by the one inactive line, and the
        # last line by the time taken.
        lines = result.outlines
        start = next(i for i, line in enumerate(lines) if line.startswith("collected"))
        return [re.sub(r" in [0-9.]+s", "", line) for line in lines[start:]]

    assert body(with_it) == body(without)


@pytest.mark.parametrize(
    "args, named",
    [
        (["--process-leaks"], "--process-leaks"),
        (["--process-leaks-cgroup"], "--process-leaks-cgroup"),
        (["--process-leaks-json", "leaks.json"], "--process-leaks-json"),
        (["-o", "process_leaks=true"], "process_leaks = true (ini file)"),
    ],
    ids=["option", "cgroup-option", "json-option", "ini"],
)
def test_off_linux_a_leak_check_is_a_usage_error_naming_the_platform(pytester, args, named):
    """Path: plugin.pytest_configure off Linux: asking for the leak check (option or ini key)
    is a usage error that names what asked and the platform, never a session that reports
    no leaks without having looked.

    Ablation: `plugin-platform-guard` and the inner pytest loads _linux.py: no usage error."""
    _fake(pytester)
    pytester.makepyfile(test_plain="def test_a():\n    pass\n")
    result = run_faked(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    err = result.stderr.str()
    assert f"ERROR: {named}: " in err and "sys.platform 'darwin'" in err
    assert not (pytester.path / "leaks.json").exists()


def test_on_windows_the_entry_point_imports(tmp_path):
    """Path: plugin.py and _inactive.py import nothing Linux-only. A plain interpreter faking
    Windows (sys.platform "win32", and none of signal.SIGKILL, os.getuid, os.sysconf,
    os.pidfd_open, fcntl) imports the entry point, gets the reason, and has loaded no other
    module of the plugin.

    Ablation: import any of the plugin's Linux modules at the top of plugin.py: red."""
    out = tmp_path / "fake-platform.json"
    fake = FAKE_PLATFORM.format(platform="win32", out=str(out))
    code = fake + (
        "\nimport pytest_stoplatency.plugin as plugin, pytest_stoplatency._inactive\nprint(plugin.inactive_reason())\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{_options.NEEDS_LINUX} 'win32'"
    assert json.loads(out.read_text()) == {"proc": [], "modules": MODULES_OFF_LINUX}
