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
    """Path: kit/gate.Rule.regressed against the previous file's median: 1.0 s -> 2.5 s fails
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
            "*delayed kill*SLOWER by more than 20%",
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
        (["--stop-latency-compare", "old.json", "--stop-latency-compare-fail", "mean:20%"], "STAT:THRESH"),
        (["--stop-latency-compare-fail", "median:20%"], "needs --stop-latency-compare"),
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


@pytest.mark.parametrize(
    "threshold, why",
    [
        ("median:0.001", "say its unit"),  # once read as 0.001 %
        ("median:20", "say its unit"),
        ("max:1e309", "a finite number"),  # infinite once a float
        ("max:inf%", "a finite number"),
        ("median:nan", "a finite number"),
        ("median:NaNms", "a finite number"),
        ("median:-5ms", "a finite number"),
        ("median:-20%", "a finite number"),
        ("median:5 parsecs", "STAT:THRESH"),
        ("median", "STAT:THRESH"),
    ],
)
def test_a_threshold_without_unit_or_not_finite_or_negative_is_refused(pytester, threshold, why):
    """Path: kit/gate.parse_rule through _options.compare_fail: a bare number (relative or
    absolute?), NaN, an infinite (1e309 too) or a negative threshold is a usage error (exit 4)
    naming the value, before any test runs. Ablation none: a refusal is its own branch."""
    pytester.makepyfile(test_gate="def test_x():\n    raise SystemExit('ran')\n")
    (pytester.path / "old.json").write_text(json.dumps({"labels": {}}))
    result = run(pytester, "--stop-latency-compare", "old.json", "--stop-latency-compare-fail", threshold)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    err = result.stderr.str()
    assert f"--stop-latency-compare-fail {threshold!r}" in err and why in err
    assert "ran" not in result.stdout.str()


def test_an_absolute_threshold_fails_a_stop_slower_by_more_than_it(pytester):
    """Path: Rule.limit's absolute branch (median:+300ms): 0.2 s -> 0.9 s is 700 ms slower and
    fails; the same change passes median:+2s. Ablation compare-threshold turns it red."""
    _baseline(pytester, 0.2)
    pytester.makepyfile(test_gate=TEST.format(delay=0.9))
    slow = run(pytester, "--stop-latency-compare", "old.json", "--stop-latency-compare-fail", "median:+300ms")
    assert slow.ret == pytest.ExitCode.TESTS_FAILED, slow.stdout.str()
    slow.stdout.fnmatch_lines(["*delayed kill*SLOWER by more than +300 ms", "stoplatency: gate failed: delayed kill*"])
    lenient = run(pytester, "--stop-latency-compare", "old.json", "--stop-latency-compare-fail", "median:2s")
    assert lenient.ret == pytest.ExitCode.OK, lenient.stdout.str()


def _foreign(pytester, **machine):
    """A baseline with one label this session does not have, from the given machine."""
    doc = {"machine": machine, "labels": {"other label": {"n": 1, "failed": 0, "median": 0.01, "max": 0.01}}}
    (pytester.path / "old.json").write_text(json.dumps(doc))


def test_no_label_in_common_fails_with_its_own_code_unless_allowed(pytester):
    """Path: kit/gate.compare's no-label-in-common refusal: a session none of whose labels is
    in the baseline exits 6 (the gate's documented code), naming it, though every test passed;
    --stop-latency-compare-allow-new passes it. Ablation no-label-in-common-refused turns it red."""
    pytester.makepyfile(test_gate=TEST.format(delay=0))
    _foreign(pytester)
    refused = run(pytester, "--stop-latency-compare", "old.json")
    refused.assert_outcomes(passed=1)
    assert refused.ret == 6, refused.stdout.str()
    refused.stdout.fnmatch_lines(["stoplatency: gate failed: no label in common with the baseline*allow-new*"])
    allowed = run(pytester, "--stop-latency-compare", "old.json", "--stop-latency-compare-allow-new")
    assert allowed.ret == pytest.ExitCode.OK, allowed.stdout.str()
    allowed.stdout.fnmatch_lines(["*delayed kill*new"])


def test_a_baseline_from_another_machine_is_named_on_one_line(pytester):
    """Path: kit/gate.other_machine: both fingerprints (kernel, CPUs, Python) on one line."""
    pytester.makepyfile(test_gate=TEST.format(delay=0))
    _foreign(pytester, kernel="9.9.9-other", cpus=8, python="3.99.0")
    result = run(pytester, "--stop-latency-compare", "old.json", "--stop-latency-compare-allow-new")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["stoplatency: the baseline is from another machine: baseline kernel 9.9.9-other, 8 CPUs, Python 3.99.0;"
         " this run kernel *, * CPUs, Python *"]
    )  # fmt: skip


def test_help_texts_are_the_options(pytester):
    result = pytester.runpytest_subprocess("--help")
    flat = " ".join(result.stdout.str().split())
    for text in (_options.HELP_COMPARE, _options.HELP_COMPARE_FAIL, _options.HELP_COMPARE_ALLOW_NEW):
        assert " ".join(text.split()) in flat
