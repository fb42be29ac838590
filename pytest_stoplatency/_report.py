"""The summary table, the JSON file, and the xdist hand-over of samples."""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import subprocess
from datetime import UTC, datetime
from pathlib import Path

SCHEMA = 2
"""Version of --stop-latency-json: a new key keeps it, a renamed or re-typed one bumps it (2: a
sample whose tree was not gone at the bound is marked "stopped": false and left out of its
label's min, median, p95 and max, which are null when no sample stopped; "failed" counts them)."""
WORKEROUTPUT_KEY = "stoplatency"
# Below this many samples the nearest-rank p95 is simply the maximum: the table shows "-".
P95_MIN_N = 20
P95_FOOTNOTE = f"p95: shown only for n >= {P95_MIN_N} (below that it is the max); the JSON keeps the value"
FAILED_FOOTNOTE = (
    "failed: samples whose tree was still alive at the bound; they have no stop time and are left out of "
    "min, median, p95 and max"
)


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    s = sorted(values)
    return s[max(math.ceil(0.95 * len(s)) - 1, 0)]


def summarize(samples: list[dict]) -> dict[str, dict]:
    """Per label: the statistics of its stop times. A failed sample (some process of the tree
    still alive at the bound: "stopped" false) has no stop time, only the bound it outlived: it
    is counted in "failed" and left out of min, median, p95 and max (None when nothing stopped)."""
    by_label: dict[str, list[dict]] = {}
    for s in samples:
        by_label.setdefault(s["label"], []).append(s)
    out = {}
    for label in sorted(by_label):
        rows = by_label[label]
        lat = [r["latency"] for r in rows if r.get("stopped", True)]  # ablate: report-failed-apart
        bounds = [r["bound"] for r in rows if r["bound"] is not None]
        out[label] = {
            "n": len(rows),
            "failed": sum(1 for r in rows if not r.get("stopped", True)),
            "min": min(lat) if lat else None,
            "median": statistics.median(lat) if lat else None,
            "p95": p95(lat) if lat else None,
            "max": max(lat) if lat else None,
            "bound": min(bounds) if bounds else None,
            "verdict": "pass" if all(r["ok"] for r in rows) else "fail",
        }
    return out


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def table(labels: dict[str, dict]) -> list[str]:
    head = ("label", "n", "failed", "min", "median", "p95", "max", "bound", "verdict")
    p95_cell = lambda s: _cell(s["p95"]) if s["n"] - s["failed"] >= P95_MIN_N else "-"  # noqa: E731
    rows = [head] + [
        (
            label,
            str(s["n"]),
            str(s["failed"]),
            _cell(s["min"]),
            _cell(s["median"]),
            p95_cell(s),
            _cell(s["max"]),
            "-" if s["bound"] is None else f"{s['bound']:g}",
            s["verdict"],
        )
        for label, s in labels.items()
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]

    def fmt(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    lines = [fmt(rows[0]), fmt(tuple("-" * w for w in widths))] + [fmt(r) for r in rows[1:]]
    if any(s["n"] - s["failed"] < P95_MIN_N for s in labels.values()):
        lines.append(P95_FOOTNOTE)
    if any(s["failed"] for s in labels.values()):
        lines.append(FAILED_FOOTNOTE)
    return lines


def git_commit(cwd: Path) -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def git_dirty(cwd: Path) -> bool | None:
    """Whether the code differs from the commit (docs excluded: `make measure` rewrites them)."""
    try:
        r = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", ":!docs"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(r.stdout.strip()) if r.returncode == 0 else None


def machine() -> dict:
    """The machine's fingerprint, the same keys as the kit's (kit/gate.py): a baseline from
    another kernel, CPU count or Python is named when compared."""
    return {
        "kernel": platform.release(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "hostname": socket.gethostname(),
    }


def document(samples: list[dict], *, missing_workers: list[str], swept: int, rootdir: Path) -> dict:
    return {
        "schema": SCHEMA,
        "machine": machine(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(rootdir),
        "git_dirty": git_dirty(rootdir),
        "samples": samples,
        "labels": summarize(samples),
        "missing_workers": missing_workers,
        "swept": swept,
    }


def write_json(path: Path, doc: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
