"""Stop-latency rows for the plugin's own stop routes (collected by `make measure`).

Each test stops an adversarial victim (one that traps or ignores SIGTERM) by one
route alone and records the latency from the start of the stop until the whole
tree is gone (re-scanned by token while waiting).
"""

import os
import signal

import pytest

from pytest_stoplatency import _cleanup


@pytest.mark.parametrize("lang", ["python", "bash"])
@pytest.mark.stop_latency(bound=3.0)
def test_killpg_sigkill_forker(victim, stop_latency, lang):
    """Path: os.killpg SIGKILL reaches every member of a group of trapping processes.

    Ablation: send SIGTERM instead and the bound fails with the survivors named.
    """
    v = victim("forker", lang=lang, children=3)
    with stop_latency.measure(f"os.killpg SIGKILL / forker ({lang})", v) as m:
        os.killpg(v.pgid, signal.SIGKILL)
    assert m.ok and not v.tree()


@pytest.mark.parametrize("lang", ["python", "bash"])
@pytest.mark.stop_latency(bound=3.0)
def test_plugin_cleanup_trap_term(victim, stop_latency, lang):
    """Path: the per-test cleanup (kill_lineage, by token) alone stops a trap-term victim.

    Ablation: delete the per-test cleanup SIGKILL line in _cleanup.py -> the bound fails.
    """
    v = victim("trap-term", lang=lang)
    with stop_latency.measure(f"plugin cleanup / trap-term ({lang})", v):
        found, survivors = _cleanup.kill_lineage(*victim.lineage())
    assert found and not survivors


@pytest.mark.stop_latency(bound=3.0, label="plugin cleanup / env-scrubber")
def test_plugin_cleanup_env_scrubber(victim, stop_latency):
    """Path: the cleanup reaches the env-scrubber's token-less grandchild through its recorded extra.

    Ablation: drop the extras from VictimFactory.lineage -> the grandchild survives, the bound fails.
    """
    v = victim("env-scrubber")
    with stop_latency.measure(None, v):
        _cleanup.kill_lineage(*victim.lineage())
    assert not v.tree()
