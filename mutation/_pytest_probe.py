"""Loaded with `-p` into the inner pytest run of a mutation: what was collected, what failed.

Written at session end as pytest.json in MUTATION_PROBE_DIR. Node ids are exact, which the
junit XML's classname/name pair is not.
"""

import json
import os
import sys

_collected: list[str] = []
_outcomes: dict[str, str] = {}
_collect_errors: list[dict[str, str]] = []
_timeouts: list[str] = []  # node ids whose failure was pytest-timeout's, not an assertion


_prefix = ""  # the rootdir, relative to where pytest was started ("" when the same)


def pytest_configure(config):
    # A killer under a directory with its own ini file (examples/pytest.ini) is collected
    # with that directory as rootdir, so pytest's node ids leave it out; the campaign names
    # killers from the tree's root, where it starts pytest. Said from there, always.
    global _prefix
    rel = os.path.relpath(str(config.rootpath), str(config.invocation_params.dir))
    _prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"


def _id(nodeid: str) -> str:
    return _prefix + nodeid if nodeid else nodeid


def _is_pytest_timeout(text: str) -> bool:
    # "Timeout (>90.0s) from pytest-timeout." (2.x); older releases wrote "Timeout >90.0s".
    return "from pytest-timeout" in text or "Failed: Timeout >" in text


def pytest_collectreport(report):
    if report.failed:
        _collect_errors.append({"nodeid": _id(report.nodeid), "longrepr": str(report.longrepr)[-2000:]})


def pytest_collection_finish(session):
    _collected[:] = [_id(item.nodeid) for item in session.items]


def pytest_runtest_logreport(report):
    nodeid = _id(report.nodeid)
    prev = _outcomes.get(nodeid)
    if report.failed:
        if prev is None or not prev.startswith("failed"):
            _outcomes[nodeid] = f"failed:{report.when}"
            # pytest-timeout's signal method fails the test with its own message: a hang, which
            # the campaign must not count as a kill (the project's own timeout is shorter than
            # the campaign's limit, so a hanging mutation would otherwise read "killed"). Its
            # exact words, not any "Timeout": a killer may well assert on a TimeoutExpired.
            if _is_pytest_timeout(str(report.longrepr)):
                _timeouts.append(nodeid)
    elif report.skipped and report.when in ("setup", "call"):
        if prev is None:
            _outcomes[nodeid] = "skipped"
    elif report.passed and report.when == "call":
        if prev is None:
            _outcomes[nodeid] = "passed"


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("MUTATION_PROBE_DIR")
    # An xdist worker sees only its share; the controller receives every worker's reports
    # (the suite's own run, read as CI's baseline) and alone writes the file: workers
    # writing it too would race each other on the one temporary name.
    if not out or hasattr(session.config, "workerinput"):
        return
    target = os.environ.get("MUTATION_TARGET_MODULE")
    mod = sys.modules.get(target) if target else None
    data = {
        "exitstatus": int(exitstatus),
        "pid": os.getpid(),
        "invocation_dir": str(session.config.invocation_params.dir),
        "site_probe": bool(getattr(sys, "_mutation_site_probe", False)),
        "collected": list(_collected),
        "outcomes": dict(_outcomes),
        "collect_errors": list(_collect_errors),
        "timeouts": list(_timeouts),
        "target_file": getattr(mod, "__file__", None) if mod else None,
    }
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, "pytest.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, os.path.join(out, "pytest.json"))
