"""`python -m pytest_stoplatency conformance ...`: the stop-conformance kit (kit/cli.py)."""

import sys

USAGE = "usage: python -m pytest_stoplatency conformance [--help] ..."


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "conformance":
        print(USAGE, file=sys.stderr)
        return 2
    from .kit import cli

    return cli.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
