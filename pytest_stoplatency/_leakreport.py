"""The process-leak summary: terminal lines and the versioned JSON (merged across xdist workers)."""

from __future__ import annotations

import os
import platform
import socket
from datetime import UTC, datetime
from pathlib import Path

from . import _report

SCHEMA = 2
"""Version of the "process_leaks" object: {"schema", "checked", "leaking_tests", "culprits",
"leaks"}, each leak {"nodeid", "scope", "kind", "worker", "pid", "start_ticks", "cmdline",
"age", "route", "killed"}. A new key keeps the version; a renamed or re-typed one bumps it
(2: "leaking_tests" holds only the tests that leaked themselves; a fixture's or a session-level
leak is its own culprit, "kind" says which)."""

_KIND_ORDER = {"test": 0, "fixture": 1, "session": 2}


def by_scope(leaks: list[dict]) -> dict[str, list[dict]]:
    """The leaks by culprit: a test, a fixture, or a session-level scope."""
    out: dict[str, list[dict]] = {}
    for leak in leaks:
        out.setdefault(leak["scope"], []).append(leak)
    return out


def section(leaks: list[dict], *, checked: int) -> dict:
    return {
        "schema": SCHEMA,
        "checked": checked,
        "leaking_tests": sorted({x["scope"] for x in leaks if x.get("kind", "test") == "test"}),
        "culprits": sorted(by_scope(leaks)),
        "leaks": sorted(leaks, key=lambda x: (x.get("nodeid") or "", x["scope"], x["pid"])),
    }


def document(leaks: list[dict], *, checked: int, rootdir: Path) -> dict:
    """The --process-leaks-json file: the section plus where and when it was measured."""
    return {
        **section(leaks, checked=checked),
        "kind": "process-leaks",
        "machine": {"kernel": platform.release(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "hostname": socket.gethostname(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": _report.git_commit(rootdir),
    }


def summary_lines(leaks: list[dict], *, checked: int) -> list[str]:
    """One line for the session, then one per culprit: a test, a fixture (with the test at
    whose teardown it was found), or session level (started between tests, after the last
    one, or after its scope's check)."""
    groups = by_scope(leaks)
    if not groups:
        return [f"stoplatency: no process leaks ({checked} test(s) checked)"]
    killed = sum(1 for x in leaks if x.get("killed", True))
    left = f", {len(leaks) - killed} could NOT be killed" if killed < len(leaks) else ""
    lines = [
        f"stoplatency: {len(leaks)} leaked process(es) from {len(groups)} scope(s), {killed} killed{left} "
        f"({checked} test(s) checked):"
    ]
    order = sorted(groups.items(), key=lambda kv: (_KIND_ORDER.get(kv[1][0].get("kind", "test"), 0), kv[0]))
    for label, group in order:
        kind = group[0].get("kind", "test")
        routes = ", ".join(sorted({x["route"] for x in group}))
        found = sorted({x["nodeid"] for x in group if x.get("nodeid") and x["nodeid"] != label})
        where = f", found at the teardown of {', '.join(found)}" if found else ""
        head = "session level: " if kind == "session" else ""
        lines.append(f"  {head}{label}: {len(group)} process(es) ({routes}){where}")
    return lines
