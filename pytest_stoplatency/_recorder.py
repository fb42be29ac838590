"""The ``stop_latency`` fixture's recorder: ``with rec.measure(label, *victims, bound=None) as m:``."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from . import _cleanup, _procs, _records
from ._handle import check_seconds


@dataclass
class Measurement:
    label: str
    bound: float
    latency: float | None = None  # block entry -> whole lineage gone (or the bound, if not)
    returned: float | None = None  # block entry -> the block's code returned
    ok: bool | None = None
    survivors: list = field(default_factory=list)


def _lineage_of(victims) -> tuple[list[str], list[tuple[int, int]]]:
    tokens, extras = [], []
    for v in victims:
        tokens.append(str(v.token))
        if hasattr(v, "_extra_ids"):
            extras.extend(v._extra_ids())
        else:  # a PreparedVictim: its extras are in its ready file, if it got that far
            extras.extend(_records.extras_of(_records.read_ready(v.ready_path)))
    return tokens, extras


class Recorder:
    def __init__(self, *, nodeid: str, worker: str | None, marker, sink: list):
        self.nodeid, self.worker, self.sink = nodeid, worker, sink
        self.marker_bound = marker.kwargs.get("bound") if marker else None
        self.marker_label = marker.kwargs.get("label") if marker else None
        self.measurements: list[Measurement] = []

    @contextmanager
    def measure(self, label, *victims, bound=None, processes=()):
        """Time from entering the block until every process of ``victims`` is gone (and
        every ``processes`` entry, a (pid, start_ticks) pair: a process that is no victim,
        such as the engine a test stops)."""
        label = label or self.marker_label or self.nodeid
        bound = bound if bound is not None else self.marker_bound
        if bound is None:
            raise pytest.UsageError(
                "stop_latency.measure needs a bound: pass bound=SECONDS or mark the test "
                "@pytest.mark.stop_latency(bound=SECONDS)"
            )
        if not victims and not processes:
            # A block timed against nothing measures nothing: its sample would be a lie.
            raise pytest.UsageError(
                "stop_latency.measure needs at least one victim (or processes=[(pid, start_ticks)]) whose stop it times"
            )
        m = Measurement(label=label, bound=check_seconds("bound", bound))
        t0 = time.monotonic()
        yield m
        m.returned = time.monotonic() - t0
        tokens, extras = _lineage_of(victims)  # extras read late: a prepared victim may be ready now
        extras += [(int(pid), int(ticks)) for pid, ticks in processes]
        survivors = _procs.wait_gone(tokens, extras, timeout=max(m.bound - m.returned, 0.0))
        m.latency = time.monotonic() - t0
        m.ok = not survivors and m.latency <= m.bound
        self.measurements.append(m)
        self.sink.append(
            {
                "label": m.label,
                "nodeid": self.nodeid,
                "latency": m.latency,
                "returned": m.returned,
                "bound": m.bound,
                "ok": m.ok,
                # Not gone at the bound: its latency is the bound it outlived, no stop time.
                "stopped": not survivors,
                "worker": self.worker,
            }
        )
        if survivors:
            m.survivors = [_cleanup.describe(pid) for pid, _ in survivors]
            _cleanup.kill_lineage(tokens, extras)
            pytest.fail(
                f"stop latency {label!r}: {len(survivors)} process(es) still alive at the bound "
                f"({m.bound} s; the stop returned after {m.returned:.3f} s); killed them:\n"
                + _cleanup.format_procs(m.survivors),
                pytrace=False,
            )
        if not m.ok:
            pytest.fail(f"stop latency {label!r}: {m.latency:.3f} s exceeds the bound {m.bound} s", pytrace=False)
