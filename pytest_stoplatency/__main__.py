"""`python -m pytest_stoplatency conformance ...`: the stop-conformance kit (kit/cli.py);
`python -m pytest_stoplatency --version`."""

import sys
from pathlib import Path

USAGE = "usage: python -m pytest_stoplatency {conformance [--help] ... | --version}"
PROG = "python -m pytest_stoplatency"


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pytest-stoplatency")
    except metadata.PackageNotFoundError:
        return f"(not installed: {Path(__file__).resolve().parents[1]})"


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


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"] and len(argv) == 1:
        print(f"pytest-stoplatency {version()}")
        return 0
    if not argv or argv[0] != "conformance":
        print(USAGE, file=sys.stderr)
        return 2
    shadow = runner_shadowed()
    if shadow is not None:  # ablate: kit-names-runner-shadow
        print(
            f"{PROG}: `runner` is shadowed by {shadow}, not this distribution's runner package: the kit imports "
            "runner.defaults, runner.proc and runner.files; rename that module or run from another directory",
            file=sys.stderr,
        )
        return 2
    from .kit import cli

    return cli.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
