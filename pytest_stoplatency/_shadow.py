"""Whether `runner` would be this distribution's runner package: the conformance kit
imports runner.defaults, runner.proc and runner.files, and a module of the same name
first on sys.path (a `runner.py` in the current directory under `python -m`) shadows it
(python -m pytest_stoplatency conformance says so on one line)."""

import sys
from pathlib import Path


def runner_shadowed() -> str | None:
    """The file Python would import as `runner` when it is not this distribution's runner
    package (installed beside this package), else None. The kit imports runner.defaults,
    runner.proc (identity, reaper) and runner.files.rundir: a `runner.py` in the current
    directory, first on sys.path under `python -m`, would break it with an error about
    runner.proc that names neither file."""
    import importlib.util

    ours = Path(__file__).resolve().parents[1] / "runner" / "__init__.py"
    loaded = sys.modules.get("runner")
    try:
        found = (
            getattr(loaded, "__file__", None) if loaded else getattr(importlib.util.find_spec("runner"), "origin", None)
        )
    except (ImportError, ValueError):
        found = None
    if found is None:
        return f"no module named runner (this distribution's is {ours.parent})"
    if Path(found).resolve() != ours:
        return str(found)
    return None
