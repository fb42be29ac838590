"""`make leaks-strangers`' rule (bench/strangers): which differences between a session with
--process-leaks and the sessions without it are outcome changes, and which are the suite's own
flakiness. The rule must not excuse what the check did: these are the cases it has met."""

from bench.strangers.__main__ import compare

PORT = ("tests.test_socket.SocketServerError: Could not start socket server", "/src/tests/test_socket.py:95")
GONE = ("OSError: Gateway 'gw0' not-receiving", "/venv/execnet/gateway.py:100")


def _failed(sig):
    message, at = sig
    return {"setup": "passed", "call": "failed", "call-message": message, "call-at": at, "teardown": "passed"}


PASSED = {"setup": "passed", "call": "passed", "teardown": "passed"}


def _sessions(plain, check, again=None):
    none = {"checker": {"leaks": [], "outlived_session": [], "scan_s": 0.0}, "wall_s": 1.0, "exit": 0}
    return {
        "plain": {**none, "outcomes": plain},
        "check": {**none, "outcomes": check, "plugin": {"leaks": [], "excluded": []}},
        "plain-again": {**none, "outcomes": plain if again is None else again},
    }


def _tests(n, failing, sig):
    return {f"t{i}": _failed(sig) if i in failing else PASSED for i in range(n)}


def test_a_failure_that_moves_between_tests_as_often_without_the_check_is_flaky():
    """pexpect's socket tests under -n 2: one port, 3 to 5 of them fail each session,
    whichever start their server second. With the check t5 fails instead of t1 (same message,
    same line, as many tests as in a plain session): flaky, not a change. (t1, which passes
    with the check, passes alone without it: flaky too.)"""
    plain = _tests(8, {0, 1, 2}, PORT)
    check = _tests(8, {0, 2, 5}, PORT)

    calls = []

    def alone(nodeid, want):  # the socket tests pass alone, whatever the check
        calls.append(nodeid)
        return ["=passed" if want[0] == "passed" else "passed"] * 5

    row = compare(_sessions(plain, check), rechecked=alone)
    assert calls == ["t1"]  # a moved failure is judged first: not run alone (it passes there)
    assert row["outcome_changes"] == 0, row["changed"]
    assert "t5" in row["flaky_tests"]
    [moved] = [m for m in row["moved_failures"] if m["nodeid"] == "t5"]
    assert moved["failures"][0]["tests_with_the_check"] == 3 and moved["failures"][0]["most_tests_without"] == 3


def test_a_failure_the_check_brings_to_more_tests_than_ever_failed_so_stays_a_change():
    """execnet's cached gateway killed by the check: every later test that uses it fails with
    "not-receiving". One test of a plain session failing the same way excuses one, not all."""
    plain = _tests(20, {0}, GONE)
    check = _tests(20, set(range(20)), GONE)
    row = compare(_sessions(plain, check))
    assert row["outcome_changes"] == 19
    assert row["moved_failures"] == []


def test_the_same_message_raised_elsewhere_is_another_failure():
    """A failure with the check whose message some plain test failed with, raised at another
    line, is not the suite's flakiness (the message alone was the rule before: too permissive)."""
    plain = _tests(4, {0}, ("AssertionError: assert False", "/src/tests/test_a.py:10"))
    check = _tests(4, {0, 1}, ("AssertionError: assert False", "/src/tests/test_a.py:10"))
    check["t2"] = _failed(("AssertionError: assert False", "/src/tests/test_b.py:77"))
    row = compare(_sessions(plain, check))
    assert sorted(x["nodeid"] for x in row["changed"]) == ["t1", "t2"]


def test_running_alone_reproduces_only_the_same_failure():
    """The alone rerun without the check counts only when it shows the outcome with the check,
    its failure included: a test that fails alone of something else is still a change; one
    that fails alone the same way (execnet's racy test_channel_passing_over_channel) is flaky."""
    plain = _tests(3, set(), PORT)
    check = {"t0": _failed(GONE), "t1": _failed(PORT), "t2": PASSED}
    seen = {}

    def rechecked(nodeid, want):
        seen[nodeid] = want
        return ["passed", "failed"] if nodeid == "t0" else ["passed", "=failed"]

    row = compare(_sessions(plain, check), rechecked=rechecked)
    assert seen["t0"] == ("failed", {GONE}) and seen["t1"] == ("failed", {PORT})
    assert [x["nodeid"] for x in row["changed"]] == ["t0"]
    assert "t1" in row["flaky_tests"]


def test_a_further_plain_session_reproduces_only_the_same_failure():
    plain = _tests(2, set(), PORT)
    check = {"t0": _failed(GONE), "t1": _failed(PORT)}
    more = {"t0": _failed(PORT), "t1": _failed(PORT)}
    row = compare(_sessions(plain, check), more_plain=lambda i: more)
    # t1: reproduced by a further plain session; t0 failed there of something else.
    assert [x["nodeid"] for x in row["changed"]] == ["t0"]
    assert row["more_plain_sessions"] == 3 and "t1" in row["flaky_tests"]
