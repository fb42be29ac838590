"""Testing code that starts processes itself: the victim is prepared, handed to the code
under test as a command line, then adopted once it is armed."""

import os
import signal
import subprocess

import pytest


class Supervisor:
    """The code under test: starts a command in a session of its own and stops it with
    SIGKILL to its process group."""

    def start(self, argv):
        return subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)

    def stop(self, proc):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.stop_latency(bound=5.0)
def test_supervisor_stops_what_it_started(victim, stop_latency):
    supervisor = Supervisor()
    p = victim.prepare("forker")  # not started: p.argv is a self-contained command line
    job = supervisor.start(p.argv)  # the code under test starts it, however it does
    v = p.adopt()  # waits until it is armed; a handle as victim() returns
    with stop_latency.measure("Supervisor.stop / forker", v):
        supervisor.stop(job)
