"""The process-leak summary: terminal lines and the versioned JSON (merged across xdist workers)."""

from __future__ import annotations

import os
import platform
import socket
from datetime import UTC, datetime
from pathlib import Path

from . import _report
from ._leaks import format_leaks, one_line

SCHEMA = 3
"""Version of the "process_leaks" object: {"schema", "checked", "leaking_tests", "culprits",
"leaks", "excluded"}, each leak {"nodeid", "scope", "kind", "worker", "pid", "start_ticks",
"cmdline", "age", "route", "killed", "alive_at_end"} and, where they apply, "started_by" (the
function fixture whose set-up started it) and "kept" (kept alive after the report, until the
session's end). A new key keeps the version; a renamed or re-typed one bumps it (2:
"leaking_tests" holds only the tests that leaked themselves; a fixture's or a session-level
leak is its own culprit, "kind" says which; 3: "killed" is whether the plugin killed it, at
the check or at the session's end, no longer whether the check's own kill worked;
"excluded" lists the processes process_leaks_exclude kept from the report)."""

_KIND_ORDER = {"test": 0, "fixture": 1, "session": 2}


def by_scope(leaks: list[dict]) -> dict[str, list[dict]]:
    """The leaks by culprit: a test, a fixture, or a session-level scope."""
    out: dict[str, list[dict]] = {}
    for leak in leaks:
        out.setdefault(leak["scope"], []).append(leak)
    return out


def _order(leaks: list[dict]) -> list[dict]:
    return sorted(leaks, key=lambda x: (x.get("nodeid") or "", x["scope"], x["pid"]))


def section(leaks: list[dict], *, checked: int, excluded: list[dict]) -> dict:
    return {
        "schema": SCHEMA,
        "checked": checked,
        "leaking_tests": sorted({x["scope"] for x in leaks if x.get("kind", "test") == "test"}),
        "culprits": sorted(by_scope(leaks)),
        "leaks": _order(leaks),
        "excluded": _order(excluded),
    }


def document(leaks: list[dict], *, checked: int, excluded: list[dict], rootdir: Path) -> dict:
    """The --process-leaks-json file: the section plus where and when it was measured."""
    return {
        **section(leaks, checked=checked, excluded=excluded),
        "kind": "process-leaks",
        "machine": {"kernel": platform.release(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "hostname": socket.gethostname(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": _report.git_commit(rootdir),
    }


def session_message(leaks: list[dict]) -> str:
    """The session's own finding, as --process-leaks=warn's warning says it."""
    return "\n".join(
        f"stoplatency: process leaks at the session's end: {label}: {len(group)} process(es); killed:\n"
        + format_leaks(group)
        for label, group in by_scope(leaks).items()
    )


def _names(leaks: list[dict]) -> str:
    return ", ".join(f"pid {x['pid']} ({one_line(x['cmdline'])})" for x in sorted(leaks, key=lambda x: x["pid"]))


def summary_lines(leaks: list[dict], *, checked: int, excluded: list[dict]) -> list[str]:
    """One line for the session, then one per culprit: a test, a fixture (with the test at
    whose teardown it was found), or session level (started between tests, after the last
    one, or after its scope's check); then what the session's end killed of what was
    reported and kept alive, and what process_leaks_exclude kept from the report."""
    groups = by_scope(leaks)
    lines: list[str] = []
    if not groups:
        lines.append(f"stoplatency: no process leaks ({checked} test(s) checked)")
    else:
        killed = sum(1 for x in leaks if x.get("killed", True))
        lines.append(
            f"stoplatency: {len(leaks)} leaked process(es) from {len(groups)} scope(s), {killed} killed "
            f"({checked} test(s) checked):"
        )
        order = sorted(groups.items(), key=lambda kv: (_KIND_ORDER.get(kv[1][0].get("kind", "test"), 0), kv[0]))
        for label, group in order:
            kind = group[0].get("kind", "test")
            routes = ", ".join(sorted({x["route"] for x in group}))
            found = sorted({x["nodeid"] for x in group if x.get("nodeid") and x["nodeid"] != label})
            where = f", found at the teardown of {', '.join(found)}" if found else ""
            head = "session level: " if kind == "session" else ""
            lines.append(f"  {head}{label}: {len(group)} process(es) ({routes}){where}")
    kept = [x for x in leaks if x.get("kept")]
    if kept:
        done = [x for x in kept if x.get("alive_at_end") and x.get("killed")]
        lines.append(
            f"stoplatency: reported process(es) still alive at the session's end, killed then: {len(done)} of "
            f"the {len(kept)} kept alive after their report" + (f" ({_names(done)})" if done else "")
        )
    failed = [x for x in leaks if x.get("killed") is False and (x.get("alive_at_end") or not x.get("kept"))]
    if failed:
        lines.append(f"stoplatency: could NOT kill {len(failed)} process(es): {_names(failed)}")
    if excluded:
        lines.append(
            f"stoplatency: {len(excluded)} leftover process(es) matched process_leaks_exclude: not reported, "
            f"killed at the session's end: {_names(excluded)}"
        )
    return lines
