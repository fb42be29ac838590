"""What a fork of pytest that never called exec runs, for the leak report.

Such a process (multiprocessing's fork start method, a ProcessPoolExecutor on Linux before
Python 3.14, os.fork() in the code under test) shows pytest's own command line and
pytest's initial environment in /proc: both are the memory of the image pytest was
started with, which the fork shares. The tag the plugin sets with os.environ is in the
fork's memory but not in that region, so /proc cannot show it. It is told apart from a
new program by its argument and environment addresses (/proc/<pid>/stat fields 48 to
51): a fork keeps pytest's, an exec'd image gets its own (the stack is laid out again,
and randomised).

What it runs can be read only from pytest's side: multiprocessing keeps each child it
started, with its name and class (a subclass's run() names the code; a plain Process's
target is dropped once it starts). Read without importing anything (an import may set off
a garbage collection in the middle of the leak check).
"""

from __future__ import annotations

import sys


def describe(pid: int, comm: str) -> str:
    """'(fork of pytest, no exec) <what it runs>', as far as pytest can tell."""
    return f"(fork of pytest, no exec) {_target(pid) or comm}"


def _target(pid: int) -> str | None:
    mp_process = sys.modules.get("multiprocessing.process")
    for child in list(getattr(mp_process, "_children", None) or ()):
        popen = getattr(child, "_popen", None)
        if getattr(popen, "pid", None) != pid:
            continue
        # Process.start() drops its target (bpo-30775): what is left is its name, and the run()
        # of a Process subclass.
        cls = type(child)
        base = getattr(mp_process, "BaseProcess", None)
        if base is None or cls.run is base.run:
            return f"multiprocessing {child.name}"
        return f"multiprocessing {child.name}: {cls.__module__}.{cls.__qualname__}.run"
    return None
