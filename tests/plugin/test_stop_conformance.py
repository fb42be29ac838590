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
    assert set(labels) == {"runner-stop / setsid-escapee", "runner-stop / env-scrubber"}  # the kit's label


def test_an_unknown_stopper_is_a_usage_error(pytester):
    result = run(pytester, "-p", "no:xdist", "--stop-conformance", "nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--stop-conformance: unknown stopper 'nosuch'" in result.stderr.str()


def test_a_stop_command_and_its_start_as_the_kits(pytester):
    """Path: --stop-conformance-stop/--stop-conformance-start (_options.conformance_command) run
    the kit's Command stopper, labelled 'command / KIND' as the kit's --stop is: a group kill
    of an `env` start stops the python forker whole, with --stop-latency-repeat 2
    honoured (two tests, n = 2)."""
    result = run(pytester, "-p", "no:xdist", "--stop-conformance-start", "env {argv}",
                 "--stop-conformance-stop", "kill -KILL -{pgid}", "--stop-latency-repeat", "2",
                 "-k", "python-trap-kids", "--stop-latency-json", "lat.json")  # fmt: skip
    result.assert_outcomes(passed=2)
    labels = json.loads((pytester.path / "lat.json").read_text())["labels"]
    assert set(labels) == {"command / python-trap-kids"} and labels["command / python-trap-kids"]["n"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--stop-conformance-start", "x {argv}"], "--stop-conformance-start needs --stop-conformance-stop"),
        (["--stop-conformance", "popen", "--stop-latency-repeat", "0"], "--stop-latency-repeat: at least 1"),
    ],
)
def test_conformance_usage_errors(pytester, args, message):
    """Path: _options.conformance_command and _conformance.Conformance at configure: exit 4."""
    result = run(pytester, "-p", "no:xdist", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_help_text_is_the_option(pytester):
    flat = " ".join(pytester.runpytest_subprocess("--help").stdout.str().split())
    for text in (_options.HELP_CONFORMANCE, _options.HELP_CONFORMANCE_START, _options.HELP_CONFORMANCE_STOP):
        assert " ".join(text.split()) in flat


def test_an_adapter_whose_import_raises_is_a_usage_error_in_one_line(pytester):
    """Path: kit/load.stopper_class from _conformance.Conformance: whatever the user's module
    raises on import is a usage error naming it, not a traceback of the session."""
    pytester.makepyfile(broken_adapter="raise RuntimeError('no config here')\n")
    result = run(pytester, "-p", "no:xdist", "--stop-conformance", "broken_adapter:Stop")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--stop-conformance: --stopper broken_adapter:Stop: cannot load it: RuntimeError: no config here" in err
    assert "Traceback" not in err
