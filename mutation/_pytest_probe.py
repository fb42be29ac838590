"""Loaded with `-p` into the inner pytest run of a mutation: what was collected, what failed.

Written at session end as pytest.json in MUTATION_PROBE_DIR. Node ids are exact, which the
junit XML's classname/name pair is not.
"""

import json
import os
import sys

_collected = []
_outcomes = {}
_collect_errors = []


def pytest_collectreport(report):
    if report.failed:
        _collect_errors.append({"nodeid": report.nodeid, "longrepr": str(report.longrepr)[-2000:]})


def pytest_collection_finish(session):
    _collected[:] = [item.nodeid for item in session.items]


def pytest_runtest_logreport(report):
    prev = _outcomes.get(report.nodeid)
    if report.failed:
        if prev is None or not prev.startswith("failed"):
            _outcomes[report.nodeid] = f"failed:{report.when}"
    elif report.skipped and report.when in ("setup", "call"):
        if prev is None:
            _outcomes[report.nodeid] = "skipped"
    elif report.passed and report.when == "call":
        if prev is None:
            _outcomes[report.nodeid] = "passed"


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("MUTATION_PROBE_DIR")
    if not out:
        return
    target = os.environ.get("MUTATION_TARGET_MODULE")
    mod = sys.modules.get(target) if target else None
    data = {
        "exitstatus": int(exitstatus),
        "pid": os.getpid(),
        "site_probe": bool(getattr(sys, "_mutation_site_probe", False)),
        "collected": list(_collected),
        "outcomes": dict(_outcomes),
        "collect_errors": list(_collect_errors),
        "target_file": getattr(mod, "__file__", None) if mod else None,
    }
    tmp = os.path.join(out, "pytest.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, os.path.join(out, "pytest.json"))
