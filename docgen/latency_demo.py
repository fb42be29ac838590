"""Run examples/guide/test_first_stop.py with --stop-latency and keep the summary it printed.

    python docgen/latency_demo.py [--out docs/stop-latency-demo.json]     (make leak-demo)

docs/plugin.md shows what the session summary looks like with this output: pasted from
a real run, never typed. The run is a plain `pytest --stop-latency test_first_stop.py`
in a scratch directory (80 columns, no xdist); the JSON keeps the command, the machine,
the exit status and the lines of the "stop latency" section and pytest's closing line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import demo_run

HERE = Path(__file__).resolve().parent.parent / "docs"  # the documents: templates, data, output
SUITE = HERE.parent / "examples" / "guide" / "test_first_stop.py"
COMMAND = ["pytest", "--stop-latency", "test_first_stop.py"]


def summary_lines(stdout: str) -> list[str]:
    """The "stop latency" section, up to the next section, and pytest's closing line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("=") and " stop latency " in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))
    return lines[start:end] + lines[-1:]


def run() -> dict:
    record, printed = demo_run.run(SUITE, COMMAND, summary_lines, "latency-demo-")
    if record["exit_status"] != 0:
        raise SystemExit(f"latency_demo: the run failed ({record['exit_status']}):\n{printed}")
    return record


def main(argv: list[str] | None = None) -> int:
    return demo_run.main("latency_demo", __doc__ or "", HERE / "stop-latency-demo.json", run, argv)


if __name__ == "__main__":
    sys.exit(main())
