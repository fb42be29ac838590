"""pytest-stoplatency: prove how fast and how cleanly a stop reaches a whole process tree.

Public API: ``Victim`` and ``PreparedVictim`` (the handles the ``victim`` fixture
returns), ``ProcessLeakWarning`` (what ``--process-leaks=warn`` reports), and
``sweep_ownerless_victims()`` for a harness that kills pytest sessions itself; and the
module ``pytest_stoplatency.hold`` (``guard``, ``Hold``) for a harness that is not pytest
(the conformance kit): what it starts held, and a guardian should it die. They are
imported lazily: ``python -m pytest_stoplatency.victim`` runs this file first, and the
victim program must not pay for psutil or pytest.
"""

__all__ = ["Victim", "PreparedVictim", "ProcessLeakWarning", "sweep_ownerless_victims"]


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
