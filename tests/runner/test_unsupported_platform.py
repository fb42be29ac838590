"""Where the runner cannot run, every command says so in one line with UNSUPPORTED.

The runner is a Linux program (pidfd, /proc, cgroup v2, inotify, prctl). Off Linux, or on
a kernel without pidfd_open (Linux < 5.3), each command is refused by `cli.unsupported`
before it reads, starts or signals anything; before it, such a machine got exit 70 and
a ModuleNotFoundError (fcntl), or "engine exited with 70 before it was up". Each case is
a real `python -m runner` interpreter whose platform is faked at its start."""

import subprocess
import sys

import pytest

from runner.exitcodes import Exit

# Fakes applied in the new interpreter before the runner is imported, then the real CLI.
FAKES = {
    "darwin": "import sys; sys.platform = 'darwin'",
    "win32": "import sys; sys.platform = 'win32'",
    "python-without-pidfd_open": "import os; del os.pidfd_open",
    "kernel-without-pidfd_open (ENOSYS)": (
        "import errno, os\n"
        "def pidfd_open(pid, flags=0):\n"
        "    raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))\n"
        "os.pidfd_open = pidfd_open"
    ),
}


def _runner(fake: str, *argv: str) -> subprocess.CompletedProcess[str]:
    code = f"{fake}\nimport sys\nfrom runner.cli import main\nsys.exit(main({list(argv)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("fake", FAKES)
@pytest.mark.parametrize(
    "argv", [("stop", "--run-dir", "/nonexistent"), ("stop", "--now"), ("run", "spec.toml"), ("list",)]
)
def test_an_unsupported_machine_gets_one_line_and_unsupported(fake, argv, tmp_path):
    """Path: cli.unsupported, first thing in cli.main. Red without it: `stop` on a
    non-Linux platform answers NO_LIVE_RUN (6) as if it had looked, and `run` fails late."""
    proc = _runner(FAKES[fake], *argv)
    assert proc.returncode == Exit.UNSUPPORTED, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("runner needs Linux >= 5.3"), proc.stderr
    assert proc.stdout == ""


def test_this_machine_is_supported():
    """The check answers None here (Linux with pidfd_open): it never refuses a machine
    the rest of this suite runs on."""
    from runner.cli import unsupported

    assert unsupported() is None
