"""pytest-stoplatency: prove how fast and how cleanly a stop reaches a whole process tree.

Public API: ``Victim`` and ``PreparedVictim`` (the handles the ``victim`` fixture
returns). They are imported lazily: ``python -m pytest_stoplatency.victim`` runs
this file first, and the victim program must not pay for psutil or pytest.
"""

__all__ = ["Victim", "PreparedVictim"]


def __getattr__(name):
    if name in __all__:
        from . import _handle

        return getattr(_handle, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
