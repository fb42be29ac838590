"""Run examples/guide/test_first_stop.py with --stop-latency and keep the summary it printed.

    python docgen/latency_demo.py [--out docs/stop-latency-demo.json]     (make leak-demo)

docs/plugin.md shows what the session summary looks like with this output: pasted from
a real run, never typed. The run is a plain `pytest --stop-latency test_first_stop.py`
in a scratch directory (80 columns, no xdist); the JSON keeps the command, the machine,
the exit status and the lines of the "stop latency" section and pytest's closing line.
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
    with tempfile.TemporaryDirectory(prefix="latency-demo-") as tmp:
        shutil.copy(SUITE, tmp)
        env = {**os.environ, "COLUMNS": "80", "PYTEST_ADDOPTS": ""}
        env.pop("PYTEST_XDIST_AUTO_NUM_WORKERS", None)
        argv = [sys.executable, "-m", *COMMAND[:1], "-p", "no:cacheprovider", "-p", "no:xdist", *COMMAND[1:]]
        done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"latency_demo: the run failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return {
        "command": " ".join(COMMAND),
        "exit_status": done.returncode,
        "report": summary_lines(done.stdout),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"kernel": platform.release(), "python": platform.python_version(), "cpus": os.cpu_count()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="latency_demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "stop-latency-demo.json")
    args = ap.parse_args(argv)
    doc = run()
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print("\n".join(doc["report"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
