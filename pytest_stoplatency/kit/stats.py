"""The summary of a list of samples, written beside them into the benchmark's JSON."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile of an already sorted list (0 < q <= 1)."""
    rank = max(1, -(-len(sorted_values) * q // 1))  # ceil(n * q), at least the first
    return sorted_values[int(rank) - 1]


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, median, p95 and max of some durations (None for each figure of an empty list)."""
    v = sorted(values)
    if not v:
        return {"n": 0, "median_s": None, "p95_s": None, "max_s": None}
    return {"n": len(v), "median_s": statistics.median(v), "p95_s": percentile(v, 0.95), "max_s": v[-1]}


def seconds(x: float | None) -> str:
    """A duration for the printed tables: ms below a second, s with ms above."""
    if x is None:
        return "-"
    if x < 0.01:
        return f"{x * 1000:.1f} ms"
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.3f} s"
