"""Helpers of the kit's tests: the command and an independent /proc scan by argv marker."""

import os
import sys
from pathlib import Path

KIT = [sys.executable, "-m", "pytest_stoplatency", "conformance"]


def left_under(root: Path) -> list[int]:
    """Living processes whose argv names a path under root (every tree of a kit run there)."""
    needle = os.fsencode(f"{root}/")
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if needle in f.read():
                        out.append(int(entry))
            except OSError:
                pass
    return out
