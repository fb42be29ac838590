"""--process-leaks in a suite that runs pytest inside its tests (issue 39, item 1): records
belong to a session, not to a pid. A plugin tests itself with pytester.runpytest(), which
runs a whole pytest session in the test's own process; that inner session's end must
remove only its own records, and the outer session's check goes on working.

Each suite's processes carry a number unique to the run (plugin_helpers.sleep_marks), so
that the outer test finds whatever survived by its command line and kills it itself.
"""

import json
import os

import pytest
from plugin_helpers import all_marked, kill_identified, sleep_marks, sleepers

from pytest_stoplatency import _records
from pytest_stoplatency._guardian import ENV_DISABLE as ENV_NO_GUARDIAN


@pytest.fixture
def marks():
    m = sleep_marks("outer", "inner")
    yield m
    kill_identified(all_marked(m))


NESTED_SUITE = """
import os, subprocess

pytest_plugins = ["pytester"]

INNER_TEST = (
    "import subprocess\\n"
    "def test_inner():\\n"
    "    subprocess.Popen(['sleep', '{inner}'])\\n"
)


def test_a_runs_pytest_inside(pytester):
    pytester.makepyfile(test_inner=INNER_TEST if {inner_checked} else "def test_inner():\\n    pass\\n")
    result = pytester.{run}("-p", "no:cacheprovider", *{inner_args!r})
    # The inner session's own leak is its own: reported there, killed at its end.
    result.assert_outcomes(passed=1, errors=1 if {inner_checked} else 0)


def test_b_leaves_a_process():
    with open("outer.pid", "w") as f:
        f.write(str(os.getpid()))
    subprocess.Popen(["sleep", "{outer}"])
"""


@pytest.mark.parametrize("inner_args", [(), ("--process-leaks",)], ids=["inner-unchecked", "inner-checked"])
@pytest.mark.parametrize("run", ["runpytest_inprocess", "runpytest_subprocess"], ids=["in-process", "subprocess"])
def test_a_pytest_session_inside_a_test_leaves_the_outer_check_working(pytester, marks, monkeypatch, run, inner_args):
    """Path: each session's records are its own (_session.py, _records.session_dir): the
    outer suite's first test runs pytest inside (in its own process, as pytester.runpytest()
    does, or in a subprocess), the next leaves `sleep N` alive. That leak is reported at the
    second test's teardown, named after it ("2 passed, 1 error"), no FileNotFoundError, no
    "no process leaks"; it is killed at the session's end, and the outer session's record
    directory is gone after its clean end. An inner session with the check on reports its
    own leak and kills it; the outer never reports it.

    Ablation: `session-owned-records` (the directory named after the process, as before
    issue 39): the inner session's end removes the outer's records, the leak's record
    crashes the check: red [in-process-*]."""
    monkeypatch.setenv(ENV_NO_GUARDIAN, "1")  # only the session's own end may kill the leak
    checked = bool(inner_args)
    pytester.makepyfile(
        test_nested=NESTED_SUITE.format(
            run=run, inner_args=inner_args, inner_checked=checked, inner=marks["inner"], outer=marks["outer"]
        )
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json", timeout=120
    )
    alive = sleepers(marks)
    out = result.stdout.str()
    assert "FileNotFoundError" not in out, out
    result.assert_outcomes(passed=2, errors=1)
    doc = json.loads((pytester.path / "leaks.json").read_text())
    assert [(x["nodeid"], x["kind"], x["cmdline"]) for x in doc["leaks"]] == [
        ("test_nested.py::test_b_leaves_a_process", "test", f"sleep {marks['outer']}")
    ], doc["leaks"]
    assert doc["leaks"][0]["killed"] and doc["leaks"][0]["alive_at_end"], doc["leaks"]
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_b_leaves_a_process*", f"*sleep {marks['outer']}*"])
    assert "no process leaks" not in out, out
    assert not alive, f"outlived the session: {alive}"
    outer = (pytester.path / "outer.pid").read_text()
    left = [d.name for d in _records.BASE.iterdir() if d.name.startswith(f"{outer}.")] if _records.BASE.is_dir() else []
    assert left == [], f"the outer session's records outlived its clean end: {left}"
    assert os.path.exists(pytester.path / "leaks.json")
