"""Handing a prepared victim to a shell or a Makefile: `p.argv` is a list of arguments, one of
which may hold a space or a `$`; quoted with shlex.join for a shell, and with each `$` doubled
again for make, which expands `$` before its shell sees the line."""

import os
import shlex
import shutil
import signal
import subprocess

import pytest


@pytest.mark.stop_latency(bound=5.0)
def test_a_shell_starts_it(victim, stop_latency):
    p = victim.prepare("trap-term")
    line = shlex.join(p.argv)  # one shell word per argument, whatever it holds
    job = subprocess.Popen(["sh", "-c", f"exec {line}"], start_new_session=True, stdin=subprocess.DEVNULL)
    v = p.adopt(timeout=10.0, process=job)  # process: an early exit of `job` ends the wait at once
    with stop_latency.measure("sh -c / kill", v):
        job.kill()
        job.wait()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
@pytest.mark.stop_latency(bound=5.0)
def test_a_makefile_starts_it(victim, stop_latency, tmp_path):
    p = victim.prepare("trap-term")
    recipe = shlex.join(p.argv).replace("$", "$$")  # make reads $$ as one $
    (tmp_path / "Makefile").write_text(f"victim:\n\texec {recipe}\n")
    job = subprocess.Popen(["make", "-s", "-C", str(tmp_path), "victim"], start_new_session=True)
    v = p.adopt(timeout=10.0)
    with stop_latency.measure("make / killpg", v):
        os.killpg(job.pid, signal.SIGKILL)  # make and its recipe, in make's session
        job.wait()
