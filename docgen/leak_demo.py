"""Run docgen/leak_demo/test_app.py under --process-leaks and keep what the terminal showed.

    python docgen/leak_demo.py [--out docs/process-leaks-demo.json]     (make leak-demo)

docs/plugin.md opens with this report: pasted from a real run, never typed. The run is a
plain `pytest --process-leaks test_app.py` in a scratch directory (80 columns, no xdist);
the JSON keeps the command, the machine, the exit status and the report's lines (the
teardown errors, the leak summary and pytest's closing line).
"""

from __future__ import annotations

import sys
from pathlib import Path

import demo_run

HERE = Path(__file__).resolve().parent.parent / "docs"  # the documents: data, output
SUITE_DIR = Path(__file__).resolve().parent
SUITE = SUITE_DIR / "leak_demo" / "test_app.py"
COMMAND = ["pytest", "--process-leaks", "test_app.py"]


def report_lines(stdout: str) -> list[str]:
    """From the ERRORS section to the leak summary's end, and pytest's closing line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("=") and " ERRORS " in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("=") and "short test summary" in line)
    return lines[start:end] + lines[-1:]


def run() -> dict:
    return demo_run.run(SUITE, COMMAND, report_lines, "leak-demo-")[0]


def main(argv: list[str] | None = None) -> int:
    return demo_run.main("leak_demo", __doc__ or "", HERE / "process-leaks-demo.json", run, argv)


if __name__ == "__main__":
    sys.exit(main())
