"""Run docgen/leak_demo/test_app.py under --process-leaks and keep what the terminal showed.

    python docgen/leak_demo.py [--out docs/process-leaks-demo.json]     (make leak-demo)

docs/plugin.md opens with this report: pasted from a real run, never typed. The run is a
plain `pytest --process-leaks test_app.py` in a scratch directory (80 columns, no xdist);
the JSON keeps the command, the machine, the exit status and the report's lines (the
teardown errors, the leak summary and pytest's closing line).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

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
    with tempfile.TemporaryDirectory(prefix="leak-demo-") as tmp:
        shutil.copy(SUITE, tmp)
        env = {**os.environ, "COLUMNS": "80", "PYTEST_ADDOPTS": ""}
        env.pop("PYTEST_XDIST_AUTO_NUM_WORKERS", None)
        argv = [sys.executable, "-m", *COMMAND[:1], "-p", "no:cacheprovider", "-p", "no:xdist", *COMMAND[1:]]
        done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    return {
        "command": " ".join(COMMAND),
        "exit_status": done.returncode,
        "report": report_lines(done.stdout),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"kernel": platform.release(), "python": platform.python_version(), "cpus": os.cpu_count()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="leak_demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "process-leaks-demo.json")
    args = ap.parse_args(argv)
    doc = run()
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print("\n".join(doc["report"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
