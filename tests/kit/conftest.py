"""The kit's tests: run the kit as a user does, and prove it left nothing."""

import os
import subprocess

import pytest
from kit_helpers import KIT, left_under

from pytest_stoplatency.kit import zoo


@pytest.fixture
def kit(tmp_path):
    """Runs the kit with its work directory under tmp_path; after the test, whatever a
    failed run left there is killed, and the test fails had anything been left."""
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "TMPDIR": str(work)}

    def run(*args, **kw):
        return subprocess.run([*KIT, *map(str, args)], env=env, capture_output=True, text=True, timeout=300, **kw)

    run.env, run.work = env, work
    yield run
    left = left_under(work)
    zoo.sweep(work)
    assert left == [], f"the kit left processes behind: {left}"
