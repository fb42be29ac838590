"""`pytest --stop-conformance STOPPER`: the conformance kit's zoo as tests in the user's own
session, one per kind, with the stop-latency table and JSON."""

import json

import pytest

from pytest_stoplatency import _options


def run(pytester, *args):
    pytester.makepyfile(test_own="def test_own():\n    pass\n")
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)


def test_timeout_fails_the_escapee_kind_and_passes_the_cooperative_one(pytester):
    """Path: _conformance.KindTest over kit/measure.sample: `timeout` orphans the setsid
    escapee (a failed test naming the orphan, a failed sample in the JSON) and stops the
    cooperative kind (a passed test, a stopped sample); the user's own test runs beside."""
    result = run(pytester, "-p", "no:xdist", "--stop-conformance", "timeout", "-k", "escapee or cooperative or own",
                 "--stop-latency-json", "lat.json")  # fmt: skip
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*timeout / setsid-escapee: 1 process(es) of the tree orphaned (setsid escapee)*"])
    labels = json.loads((pytester.path / "lat.json").read_text())["labels"]
    assert labels["timeout / setsid-escapee"]["failed"] == 1
    assert labels["timeout / cooperative"]["failed"] == 0 and labels["timeout / cooperative"]["verdict"] == "pass"


def test_runner_stops_the_escapees_under_xdist(pytester):
    """Path: the same items on each xdist worker, their samples merged on the controller:
    the runner's own stop passes the escaping kinds."""
    result = run(pytester, "-n", "2", "--stop-conformance", "runner", "-k", "escapee or scrubber",
                 "--stop-latency-json", "lat.json")  # fmt: skip
    result.assert_outcomes(passed=2)
    labels = json.loads((pytester.path / "lat.json").read_text())["labels"]
    assert set(labels) == {"runner / setsid-escapee", "runner / env-scrubber"}


def test_an_unknown_stopper_is_a_usage_error(pytester):
    result = run(pytester, "-p", "no:xdist", "--stop-conformance", "nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--stop-conformance: unknown stopper 'nosuch'" in result.stderr.str()


def test_help_text_is_the_option(pytester):
    flat = " ".join(pytester.runpytest_subprocess("--help").stdout.str().split())
    assert " ".join(_options.HELP_CONFORMANCE.split()) in flat


def test_an_adapter_whose_import_raises_is_a_usage_error_in_one_line(pytester):
    """Path: kit/load.stopper_class from _conformance.Conformance: whatever the user's module
    raises on import is a usage error naming it, not a traceback of the session."""
    pytester.makepyfile(broken_adapter="raise RuntimeError('no config here')\n")
    result = run(pytester, "-p", "no:xdist", "--stop-conformance", "broken_adapter:Stop")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--stop-conformance: --stopper broken_adapter:Stop: cannot load it: RuntimeError: no config here" in err
    assert "Traceback" not in err
