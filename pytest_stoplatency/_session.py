"""The pytest sessions open in this process, innermost last: a number each, no I/O.

A test that runs pytest in its own process (pytester.runpytest(), the way a plugin tests
itself) opens a second session inside the first. Whatever a session keeps on disk (its
record directory, _records; its cgroup, _cgroup) is named after the session, not after
the process, so that the inner session's end removes its own and never the outer's.
Imported by the entry point at every configure: nothing here reads /proc or the disk.
"""

from __future__ import annotations

import itertools

_numbers = itertools.count(1)
_open: list[int] = []


def begin() -> int:
    """A new session of this process (plugin.pytest_configure): its number."""
    n = next(_numbers)
    _open.append(n)
    return n


def end(n: int) -> None:
    """The session's end (plugin.pytest_unconfigure); by number, whichever order they end in."""
    if n in _open:
        _open.remove(n)


def current() -> int | None:
    """The innermost open session (None: no pytest session, the plugin used as a library)."""
    return _open[-1] if _open else None


def outermost(n: int | None) -> bool:
    """Whether no other session of this process is open around (or inside) session n."""
    return _open == [n] or (n is None and not _open)
