"""GNU make -j2 on SIGTERM: a recipe's SIGTERM-ignoring process is left behind, at ppid 1.

make, sent SIGTERM, signals the shells of its running recipes and exits; a process such a
shell started that ignores SIGTERM (SIG_IGN is inherited across fork and exec) is
re-parented to init, alive. The fix: signal make's whole process group (it is
started in a session of its own), then SIGKILL the group after a grace.
"""

import os
import shlex
import shutil
import signal
import subprocess

import pytest

GRACE = 0.5
BOUND = 3.0

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def makefile(tmp_path, *prepared):
    """Each prepared victim in the recipe of a target of its own, as a shell line of two
    commands (so the recipe's shell forks it: make's grandchild); each $ doubled for make."""
    names = [f"t{i}" for i in range(len(prepared))]
    lines = [f"all: {' '.join(names)}", ".PHONY: all " + " ".join(names)]
    for name, p in zip(names, prepared, strict=True):
        lines += [f"{name}:", "\t" + shlex.join(p.argv).replace("$", "$$") + "; true"]
    (tmp_path / "Makefile").write_text("\n".join(lines) + "\n")


def start_make(tmp_path, victim, *prepared):
    makefile(tmp_path, *prepared)
    proc = subprocess.Popen(
        ["make", "-s", "-j2", "-C", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    victim.processes.append(proc)
    return proc, [p.adopt(process=None) for p in prepared]


@pytest.mark.xfail(
    reason="make -j2, sent SIGTERM, exits; a recipe's process that ignores SIGTERM is orphaned, alive",
    strict=True,
)
def test_sigterm_to_make_orphans_a_recipe_that_ignores_it(victim, stop_latency, tmp_path):
    prepared = [victim.prepare("ignore-term"), victim.prepare("ignore-term")]
    proc, victims = start_make(tmp_path, victim, *prepared)
    with stop_latency.measure("SIGTERM to make -j2 / ignore-term", *victims, bound=BOUND):
        proc.send_signal(signal.SIGTERM)
        proc.wait(BOUND)


def test_fixed_signal_makes_group_then_kill_it(victim, stop_latency, tmp_path):
    prepared = [victim.prepare("ignore-term"), victim.prepare("ignore-term")]
    proc, victims = start_make(tmp_path, victim, *prepared)
    with stop_latency.measure("killpg TERM, grace, killpg KILL / make -j2 / ignore-term", *victims, bound=BOUND):
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(GRACE)
        except subprocess.TimeoutExpired:
            pass
        try:
            # Reaped or not, the group id stays the group's while any member lives.
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
