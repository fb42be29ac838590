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


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"] and len(argv) == 1:
        print(f"pytest-stoplatency {version()}")
        return 0
    if not argv or argv[0] != "conformance":
        print(USAGE, file=sys.stderr)
        return 2
    from ._shadow import runner_shadowed

    shadow = runner_shadowed()
    if shadow is not None:
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
