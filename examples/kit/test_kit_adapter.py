"""A Python adapter for the conformance kit: the stop path of your own code, as a Stopper.

    PYTHONPATH=examples/kit python -m pytest_stoplatency conformance --stopper test_kit_adapter:GroupReaper

Here the code under test is a group reaper (TERM to the process group, the grace, KILL
to the group): the kit's table shows what it misses (whatever leaves the group).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_stoplatency.kit import Stopper


class GroupReaper(Stopper):
    how = "killpg(SIGTERM), sleep(kill_grace), killpg(SIGKILL)"

    def start(self, tree):
        # As your code starts work; tree.argv is the victim (tree.shell: quoted for a shell).
        return subprocess.Popen(tree.argv, start_new_session=True, stdin=subprocess.DEVNULL)

    def stop(self, proc):
        # The timed part: your stop, from its first action until it returns.
        os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(self.kill_grace)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return {}

    def cleanup(self, proc):
        # Reap what the stopper itself started; the kit kills what is left of the tree.
        proc.kill()
        proc.wait()


def test_the_kit_shows_what_the_group_reaper_misses(tmp_path):
    """The kit's table for this adapter: a forker stopped whole, the setsid escapee orphaned."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    out = tmp_path / "kit.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest_stoplatency", "conformance", "--stopper", "test_kit_adapter:GroupReaper"]
        + ["--kinds", "python-trap-kids,setsid-escapee", "--kill-grace", "0.2", "--bound", "60", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    rows = {r["kind"]: r for r in json.loads(out.read_text())["stoppers"][0]["rows"]}
    assert rows["python-trap-kids"]["verdict"] == "whole"
    assert rows["setsid-escapee"]["verdict"] == "orphaned"
