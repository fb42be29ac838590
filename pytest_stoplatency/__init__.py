"""pytest-stoplatency: prove how fast and how cleanly a stop reaches a whole process tree.

Public API: ``Victim`` and ``PreparedVictim`` (the handles the ``victim`` fixture
returns), ``ProcessLeakWarning`` (what ``--process-leaks=warn`` reports), and
``sweep_ownerless_victims()`` for a harness that kills pytest sessions itself; and the
module ``pytest_stoplatency.hold`` (``guard``, ``Hold``) for a harness that is not pytest
(the conformance kit): what it starts held, and a guardian should it die. They are
imported lazily: ``python -m pytest_stoplatency.victim`` runs this file first, and the
victim program must not pay for psutil or pytest.

PYTEST_DONT_REWRITE: pytest's assertion rewriter takes every module of a pytest11 plugin's
distribution, and loads it from source (parse, rewrite, compile) in every session that cannot
write its own cached copy (PYTHONDONTWRITEBYTECODE=1, a read-only install): this package's
modules assert nothing a user needs explained, so the finder below loads them the ordinary
way, from their byte code.
"""

import importlib.machinery
import sys

__all__ = ["Victim", "PreparedVictim", "ProcessLeakWarning", "sweep_ownerless_victims"]


class _PlainImport:
    """A meta path finder placed before pytest's rewriter: this package's submodules are
    found by the ordinary path finder (their .pyc is used), never rewritten. This module
    itself, imported before the finder exists, is the one pytest takes (its docstring
    says PYTEST_DONT_REWRITE)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if path is None or not name.startswith(f"{__name__}."):
            return None
        return importlib.machinery.PathFinder.find_spec(name, path)


def _installed() -> bool:
    """Already in place (this module run twice: importlib.reload, a copy under another path)."""
    return any(
        getattr(f, "__module__", None) == __name__ and getattr(f, "__name__", None) == "_PlainImport"
        for f in sys.meta_path
    )


if not _installed():
    sys.meta_path.insert(0, _PlainImport)  # ablate: plugin-no-rewrite


def sweep_ownerless_victims() -> int:
    """Kill every victim whose owning pytest session is dead (as a new session does at
    start); never a live session's. Returns how many processes were killed. For a
    harness that kills pytest sessions itself (the mutation campaign on SIGTERM)."""
    from . import _cleanup

    return _cleanup.sweep_ownerless()


def __getattr__(name):
    if name == "ProcessLeakWarning":
        from . import _options

        return _options.ProcessLeakWarning
    if name in __all__:
        from . import _handle

        return getattr(_handle, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
