"""One real pytest run of a demo suite, kept as the documents show it (docgen/leak_demo.py,
docgen/latency_demo.py): the suite copied into a scratch directory, run by a plain
`pytest` (80 columns, no xdist, no cache), and the JSON that keeps the command, the
machine, the exit status and the lines picked from what the terminal showed."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path


def run(suite: Path, command: list[str], pick: Callable[[str], list[str]], prefix: str) -> tuple[dict, str]:
    """Run `command` (pytest's argv, without the interpreter) beside a copy of `suite`;
    returns the record and what the run printed (stdout and stderr), for a caller that
    refuses a failed run. `prefix`: the scratch directory's."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        shutil.copy(suite, tmp)
        env = {**os.environ, "COLUMNS": "80", "PYTEST_ADDOPTS": ""}
        env.pop("PYTEST_XDIST_AUTO_NUM_WORKERS", None)
        argv = [sys.executable, "-m", *command[:1], "-p", "no:cacheprovider", "-p", "no:xdist", *command[1:]]
        done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    record = {
        "command": " ".join(command),
        "exit_status": done.returncode,
        "report": pick(done.stdout),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"kernel": platform.release(), "python": platform.python_version(), "cpus": os.cpu_count()},
    }
    return record, done.stdout + done.stderr


def main(prog: str, doc: str, default_out: Path, make: Callable[[], dict], argv: list[str] | None) -> int:
    """The demo's command line: `--out FILE` (default `default_out`), the record written
    there, its report's lines printed."""
    ap = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out)
    args = ap.parse_args(argv)
    record = make()
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(record["report"]))
    return 0
