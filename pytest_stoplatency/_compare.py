"""The plugin's side of the latency gate (--stop-latency-compare, --stop-latency-compare-fail,
--stop-latency-compare-allow-new): the gate itself is the kit's (kit/gate.py), one for both,
so that the plugin's and the kit's JSON are each a baseline for the other."""

from __future__ import annotations

from pathlib import Path

from .kit.gate import NO_LABEL_IN_COMMON, Baseline, GateError, Result, Rule, compare, load, parse_rule

__all__ = [
    "NO_LABEL_IN_COMMON",
    "Baseline",
    "CompareError",
    "Result",
    "Rule",
    "compare",
    "load",
    "parse_rule",
    "load_baseline",
]

CompareError = GateError


def load_baseline(path: Path, shown: str) -> Baseline:
    return load(path, "--stop-latency-compare", shown)
