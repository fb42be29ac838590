"""Run a command with the machine kept busy beside it: `make test-loaded` (issue 29).

    python tools/loaded.py [--cpu N] [--io N] -- COMMAND...

N CPU hogs (`while True: pass`, as a busy CI runner or a developer's laptop has beside
the suite) and N I/O hogs (64 MiB written and fsync'ed over and over, in a directory of
their own under the temp dir) run for as long as the command does. They are always
ended when it ends, when it fails, and when this script is interrupted: killed by pid
in a `finally`, and each dies with this script even if it is SIGKILLed (PR_SET_PDEATHSIG).
SIGTERM and SIGHUP are passed on to the command (CI's `timeout`), which then ends as it
would; a terminal's Ctrl-C reaches the command itself (the same process group), so it is
not sent twice. Exits with the command's code.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile

CPU_HOG = "while True: pass"
IO_HOG = r"""
import os, sys
path, block = sys.argv[1], b"\0" * (1 << 20)
while True:
    with open(path, "wb") as f:
        for _ in range(64):
            f.write(block)
            f.flush()
            os.fsync(f.fileno())
"""
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Between fork and exec of a hog (this script has no threads): whatever kills this
    # script, a hog does not outlive it.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _hog(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent, start_new_session=True
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/loaded.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", type=int, default=2, help="CPU hogs (default 2)")
    ap.add_argument("--io", type=int, default=1, help="I/O hogs (default 1)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given")
    hogs: list[subprocess.Popen[bytes]] = []
    work = tempfile.mkdtemp(prefix="test-loaded-io-")
    child: subprocess.Popen[bytes] | None = None

    def pass_on(signum: int, frame: object) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, pass_on)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C reaches the command itself
    try:
        hogs += [_hog([sys.executable, "-c", CPU_HOG]) for _ in range(args.cpu)]
        hogs += [_hog([sys.executable, "-c", IO_HOG, os.path.join(work, f"io-{i}")]) for i in range(args.io)]
        print(
            f"test-loaded: {args.cpu} CPU hog(s) and {args.io} I/O hog(s) (pids {' '.join(str(h.pid) for h in hogs)})"
            f" beside: {' '.join(command)}",
            file=sys.stderr,
            flush=True,
        )
        child = subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        return child.wait()
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
        shutil.rmtree(work, ignore_errors=True)
        if hogs:
            print(f"test-loaded: hogs {' '.join(str(h.pid) for h in hogs)} killed", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
