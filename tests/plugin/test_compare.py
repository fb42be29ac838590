"""The latency gate (--stop-latency-compare, --stop-latency-compare-fail): a stop that got
slower than the threshold fails the session naming its label; the same speed passes."""

import json

import pytest

from pytest_stoplatency import _options

# The stop waits DELAY seconds, then kills: its latency is DELAY plus the kill and the
# death's detection. 1.0 s against 2.5 s is a 2.5x slower stop; the same DELAY twice
# differs only by that noise, far below 20% of a second on a busy machine.
TEST = """
import os, signal, time, pytest

@pytest.mark.stop_latency(bound=60, label="delayed kill")
def test_stop(victim, stop_latency):
    v = victim("trap-term")
    with stop_latency.measure(None, v):
        time.sleep({delay})
        os.kill(v.pid, signal.SIGKILL)
"""


def run(pytester, *args):
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "--stop-latency", *args, timeout=120
    )


def _baseline(pytester, delay):
    pytester.makepyfile(test_gate=TEST.format(delay=delay))
    first = run(pytester, "--stop-latency-json", "old.json")
    first.assert_outcomes(passed=1)
    return json.loads((pytester.path / "old.json").read_text())["labels"]["delayed kill"]["median"]


def test_a_stop_2_5_times_slower_fails_the_gate_naming_its_label(pytester):
    """Path: _compare.regressed against the previous file's median: 1.0 s -> 2.5 s fails
    `median:20%` (exit 1, the label named, old and new side by side), though every test
    passed. Ablation compare-threshold (never slower) turns it red."""
    old = _baseline(pytester, 1.0)
    pytester.makepyfile(test_gate=TEST.format(delay=2.5))
    result = run(pytester, "--stop-latency-compare", "old.json", "--stop-latency-compare-fail", "median:20%")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "stoplatency: compared with old.json:",
            "*delayed kill*SLOWER than 20%",
            "stoplatency: gate failed: delayed kill: median*",
        ]
    )
    assert f"{old:.4f}" in result.stdout.str()


def test_the_same_speed_passes_the_gate(pytester):
    """Path: the same stop twice stays within `median:20%`: exit 0, both medians shown."""
    _baseline(pytester, 1.0)
    result = run(pytester, "--stop-latency-compare", "old.json", "--stop-latency-compare-fail", "median:20%")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["stoplatency: compared with old.json:", "*delayed kill*"])
    assert "gate failed" not in result.stdout.str()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--stop-latency-compare", "old.json", "--stop-latency-compare-fail", "mean:20"], "STAT:PCT"),
        (["--stop-latency-compare-fail", "median:20"], "needs --stop-latency-compare"),
        (["--stop-latency-compare", "nosuch.json"], "--stop-latency-compare nosuch.json"),
    ],
)
def test_a_bad_gate_is_a_usage_error_before_any_test(pytester, args, message):
    """Path: _options.compare_fail and _compare.load at configure: exit 4, nothing run."""
    pytester.makepyfile(test_gate=TEST.format(delay=0))
    (pytester.path / "old.json").write_text(json.dumps({"labels": {}}))
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_help_texts_are_the_options(pytester):
    result = pytester.runpytest_subprocess("--help")
    flat = " ".join(result.stdout.str().split())
    for text in (_options.HELP_COMPARE, _options.HELP_COMPARE_FAIL):
        assert " ".join(text.split()) in flat
