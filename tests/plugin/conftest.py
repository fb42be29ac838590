"""Fixtures for the plugin's own tests."""

import subprocess

import pytest

# The check's plugin object is imported by inner pytest sessions only, where pytest's assertion
# rewriter (it takes a pytest11 plugin's modules) finds it before the mutation campaign's site
# probe can record it: imported here too, so that an ablation of it is proven to run from the
# campaign's scratch copy.
from pytest_stoplatency import _compare, _leakplugin  # noqa: F401  (the gate's module too)


@pytest.fixture
def start_prepared(victim):
    """Start a prepared victim the way someone else's code would (group leader, not session leader)."""

    def start(kind, *, lang="python", close_fds=False, **popen):
        p = victim.prepare(kind, lang=lang)
        argv = p.argv
        if close_fds:
            # The victim starts with fds 0, 1, 2 CLOSED: the handshake must not need them.
            argv = ["/bin/sh", "-c", 'exec "$@" <&- >&- 2>&-', "sh", *argv]
        popen.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(argv, process_group=0, **popen)
        victim.processes.append(proc)  # the victim fixture's cleanup reaps it
        return p.adopt(10.0, process=proc), proc

    return start
