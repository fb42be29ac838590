"""A first stop-latency test: a stop that escalates (SIGTERM to the process group, a
grace, SIGKILL), timed against a victim whose whole tree traps SIGTERM."""

import os
import signal
import time

import pytest


def stop_group(pgid, grace=0.5):
    """The stop under test: SIGTERM to the group, then SIGKILL once `grace` has passed."""
    os.killpg(pgid, signal.SIGTERM)
    time.sleep(grace)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group was already gone


@pytest.mark.stop_latency(bound=3.0, label="stop_group / forker")
def test_stop_group_stops_a_trapping_tree(victim, stop_latency):
    v = victim("forker")  # traps SIGTERM; two children that trap it too
    with stop_latency.measure(None, v):  # label and bound from the marker
        stop_group(v.pgid)
    # timed until the victim's whole tree is gone; a survivor at the bound fails the test
