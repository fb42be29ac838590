"""The latency gate, one for the kit's command line (`--compare`, `--compare-fail`) and the
plugin (`--stop-latency-compare`, `--stop-latency-compare-fail`): this run's labels beside a
baseline's, and the labels whose statistic got slower than the threshold allows.

Both write one format: a JSON document with ``machine`` (the fingerprint a baseline is
checked against) and ``labels`` (per label: n, failed, min, median, p95, max in seconds,
bound, verdict), so that either's file is a baseline for the other. A kit label is
``STOPPER / KIND``, the same as `pytest --stop-conformance STOPPER`'s.

A threshold says its unit: relative (``median:20%``: slower than the baseline by more
than 20 %) or absolute (``median:5ms``, ``max:+50ms``: more than 50 ms slower); a bare
number is refused, as are NaN, infinite and negative ones.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATS = ("min", "median", "p95", "max")
DEFAULT_STAT = "median"
"""The statistic the gate compares by default: the median of a label's N samples, which one
sample slowed down by a busy machine moves by one rank, not by its delay."""
DEFAULT_REPEAT = 5
"""The samples per label the gate's default was measured with (`--repeat`, `--stop-latency-repeat`)."""
DEFAULT_THRESHOLD = "25%"
"""The default threshold: a label fails when its median is more than this slower than the baseline's."""
DEFAULT_RULE = f"{DEFAULT_STAT}:{DEFAULT_THRESHOLD}"

GATE_FAILED = 5
"""The kit's exit code when every kind was stopped whole but a label is slower than the gate allows."""
NO_LABEL_IN_COMMON = 6
"""The exit code (the kit's and pytest's) of a compare where no label of this run is in the baseline."""
EXIT_CODES = {
    GATE_FAILED: "the gate failed: a label slower than --compare-fail allows",
    NO_LABEL_IN_COMMON: "--compare: no label in common with the baseline (--compare-allow-new passes it)",
}
FINGERPRINT = ("kernel", "cpus", "python")
"""What makes two machines' latencies comparable, as far as a file can say."""

_UNITS = {"%": None, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_THRESHOLD = re.compile(r"(?P<plus>\+?)(?P<number>[^a-z%]*)(?P<unit>%|us|ms|s)?", re.IGNORECASE)


class GateError(ValueError):
    """A rule or a baseline the gate cannot use: a usage error, said in one line."""


@dataclass(frozen=True)
class Rule:
    """STAT:THRESH: `percent` for a relative threshold, `seconds` for an absolute one."""

    stat: str
    percent: float | None
    seconds: float | None
    text: str

    def limit(self, old: float) -> float:
        if self.percent is not None:
            return old * (1 + self.percent / 100)
        assert self.seconds is not None
        return old + self.seconds

    def regressed(self, old: float | None, new: float | None) -> bool:
        if old is None or new is None:
            return False
        return new > self.limit(old)  # ablate: compare-threshold

    def says(self) -> str:
        if self.percent is not None:
            return f"more than {self.percent:g}%"
        assert self.seconds is not None
        return f"more than +{_ms(self.seconds)}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g} ms"


def parse_rule(text: str, flag: str) -> Rule:
    """`median:20%`, `median:5ms`, `max:+50ms`, `p95:0.2s`; anything else a GateError."""
    usage = (
        f"{flag} {text!r}: STAT:THRESH, STAT one of {', '.join(STATS)}, THRESH relative (20%) or absolute "
        "(5ms, +50ms, 0.2s), a finite number 0 or more"
    )
    stat, colon, threshold = text.partition(":")
    m = _THRESHOLD.fullmatch(threshold.strip())
    if not colon or stat not in STATS or m is None:
        raise GateError(usage)
    if m["unit"] is None:
        raise GateError(f"{usage}: say its unit ({threshold.strip()}% or {threshold.strip()}ms)")
    try:
        number = float(m["number"])
    except ValueError:
        raise GateError(usage) from None
    if not (math.isfinite(number) and number >= 0):  # NaN, inf (1e309 too), negative
        raise GateError(usage)
    scale = _UNITS[m["unit"].lower()]
    if scale is None:
        return Rule(stat, number, None, text)
    return Rule(stat, None, number * scale, text)  # ablate: threshold-absolute-unit


def machine() -> dict[str, Any]:
    return {
        "kernel": platform.release(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "hostname": socket.gethostname(),
    }


def fingerprint(m: dict[str, Any] | None) -> str:
    m = m or {}
    return f"kernel {m.get('kernel', '?')}, {m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}"


def other_machine(old: dict[str, Any] | None, new: dict[str, Any]) -> str | None:
    """One line naming both fingerprints when the baseline came from another machine."""
    if not old or all(old.get(k) == new.get(k) for k in FINGERPRINT):
        return None
    return f"the baseline is from another machine: baseline {fingerprint(old)}; this run {fingerprint(new)}"


def kit_labels(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A kit document's rows as labels (`STOPPER / KIND`), in the plugin's label format."""
    out = {}
    for s in doc.get("stoppers", []):
        if s.get("skipped"):
            continue
        for r in s["rows"]:
            out[f"{s['id']} / {r['kind']}"] = {
                "n": r["n"],
                "failed": r["n"] - r["stopped"],
                "min": r["min_s"],
                "median": r["median_s"],
                "p95": r["p95_s"],
                "max": r["max_s"],
                "bound": doc["bound_s"],
                "verdict": "pass" if r["verdict"] == "whole" else "fail",
            }
    return out


@dataclass
class Baseline:
    labels: dict[str, dict[str, Any]]
    machine: dict[str, Any] | None


def load(path: Path, flag: str, shown: str | None = None) -> Baseline:
    """A baseline: a --stop-latency-json file or the kit's --json file."""
    where = f"{flag} {shown or path}"
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise GateError(f"{where}: {getattr(exc, 'strerror', None) or exc}") from exc
    if not isinstance(doc, dict):
        raise GateError(f"{where}: not a stop-latency JSON document")
    labels = doc.get("labels")
    if labels is None and isinstance(doc.get("stoppers"), list):
        try:
            labels = kit_labels(doc)  # a kit document written before it carried its labels
        except (KeyError, TypeError) as exc:
            raise GateError(f"{where}: a kit document without {exc}") from None
    if not isinstance(labels, dict) or not all(isinstance(v, dict) for v in labels.values()):
        raise GateError(f"{where}: no 'labels' (neither a --stop-latency-json nor a conformance --json file)")
    m = doc.get("machine")
    return Baseline(labels, m if isinstance(m, dict) else None)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


@dataclass
class Result:
    lines: list[str]
    """The side-by-side table (label, baseline, this run, change, mark)."""
    failures: list[str]
    """One reason per label that fails the gate (or the one reason no label could be compared)."""
    code: int | None
    """None when the gate passed; GATE_FAILED or NO_LABEL_IN_COMMON."""
    machine: str | None
    """The one line naming both machines, when they differ."""


def compare(
    old: Baseline,
    new: dict[str, dict[str, Any]],
    rule: Rule | None,
    *,
    here: dict[str, Any],
    allow_new: bool = False,
    allow_flag: str = "--compare-allow-new",
) -> Result:
    stat = rule.stat if rule else DEFAULT_STAT
    head = ("label", f"baseline {stat}", f"this run {stat}", "change", "")
    rows, failures = [head], []
    for label in sorted(set(old.labels) | set(new)):
        o, n = old.labels.get(label, {}).get(stat), new.get(label, {}).get(stat)
        change = f"{(n / o - 1) * 100:+.0f}%" if o and n is not None else "-"
        mark = ""
        if label in new and new[label].get("failed"):
            mark = "FAILED SAMPLE"
            failures.append(f"{label}: {new[label]['failed']} sample(s) not stopped at the bound")
        elif rule is not None and rule.regressed(o, n):
            mark = f"SLOWER by {rule.says()}"
            failures.append(f"{label}: {stat} {_s(o)} -> {_s(n)} s ({change}, {rule.says()})")
        elif label not in new:
            mark = "not run"
        elif label not in old.labels:
            mark = "new"
        rows.append((label, _s(o), _s(n), change, mark))
    code = GATE_FAILED if failures else None
    if new and not set(new) & set(old.labels) and not allow_new:  # ablate: no-label-in-common-refused
        code = NO_LABEL_IN_COMMON
        failures.insert(
            0,
            f"no label in common with the baseline ({len(old.labels)} there, {len(new)} here; {allow_flag} passes it)",
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return Result(lines, failures, code, other_machine(old.machine, here))
