"""The latency gate: this session's labels beside a previous --stop-latency-json's, and the
labels whose chosen statistic got slower than the threshold allows (as pytest-benchmark's
--benchmark-compare-fail)."""

from __future__ import annotations

import json
from pathlib import Path


class CompareError(ValueError):
    """The previous file is missing, unreadable or not a --stop-latency-json document."""


def load(path: Path, name: str) -> dict[str, dict]:
    """The per-label summary of a previous --stop-latency-json file (`name`: as the user gave it)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CompareError(f"--stop-latency-compare {name}: {getattr(exc, 'strerror', None) or exc}") from exc
    labels = doc.get("labels") if isinstance(doc, dict) else None
    if not isinstance(labels, dict):
        raise CompareError(f"--stop-latency-compare {name}: no 'labels' (not a --stop-latency-json file)")
    return labels


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def regressed(old: float | None, new: float | None, percent: float) -> bool:
    if old is None or new is None:
        return False
    return new > old * (1 + percent / 100)  # ablate: compare-threshold


def compare(
    old: dict[str, dict], new: dict[str, dict], stat: str, percent: float | None
) -> tuple[list[str], list[str]]:
    """(lines of the side-by-side table, the reasons the gate fails: one per label)."""
    head = ("label", f"old {stat}", f"new {stat}", "change", "")
    rows, failures = [head], []
    for label in sorted(set(old) | set(new)):
        o, n = old.get(label, {}).get(stat), new.get(label, {}).get(stat)
        change = f"{(n / o - 1) * 100:+.0f}%" if o and n is not None else "-"
        mark = ""
        if label in new and new[label].get("failed"):
            mark = "FAILED SAMPLE"
            failures.append(f"{label}: {new[label]['failed']} sample(s) not stopped at the bound")
        elif percent is not None and regressed(o, n, percent):
            mark = f"SLOWER than {percent:g}%"
            failures.append(f"{label}: {stat} {_s(o)} -> {_s(n)} s ({change}, more than {percent:g}%)")
        elif label not in new:
            mark = "not run"
        elif label not in old:
            mark = "new"
        rows.append((label, _s(o), _s(n), change, mark))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines, failures
