"""The process-leak summary: terminal lines and the versioned JSON (merged across xdist workers)."""

from __future__ import annotations

import os
import platform
import socket
from datetime import UTC, datetime
from pathlib import Path

from . import _report

SCHEMA = 1
"""Version of the "process_leaks" object: {"schema", "checked", "leaking_tests", "leaks"},
each leak {"nodeid", "scope", "worker", "pid", "start_ticks", "cmdline", "age", "route",
"killed"}. A new key keeps the version; a renamed or re-typed one bumps it."""


def by_test(leaks: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for leak in leaks:
        out.setdefault(leak.get("nodeid") or "(session teardown)", []).append(leak)
    return out


def section(leaks: list[dict], *, checked: int) -> dict:
    return {
        "schema": SCHEMA,
        "checked": checked,
        "leaking_tests": sorted(by_test(leaks)),
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
    tests = by_test(leaks)
    if not tests:
        return [f"stoplatency: no process leaks ({checked} test(s) checked)"]
    lines = [f"stoplatency: {len(tests)} leaking test(s), {len(leaks)} process(es) killed ({checked} checked):"]
    for nodeid, group in sorted(tests.items()):
        routes = ", ".join(sorted({x["route"] for x in group}))
        scopes = sorted({x["scope"] for x in group} - {nodeid})
        extra = f" from {', '.join(scopes)}" if scopes else ""
        lines.append(f"  {nodeid}: {len(group)} process(es){extra} ({routes})")
    return lines
