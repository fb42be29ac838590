"""Which runs the dashboard shows and acts on: the directories under its base directory.

A run is named in a URL by its directory's name under the base, and nothing else: the
name must have the shape of a run id (no '/', no leading '.'), so that no name leaves the
base, and the directory must be a real one (a symlink is refused, never followed) that
holds a frozen spec. The base directory and everything in it are untrusted input.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from runner.files.rundir import RUN_ID_SHAPE, RunDir, RunEntry, run_entries

Entry = RunEntry
"""One row of the page: a run, or what is wrong with an entry that looks like one."""


class NotARun(Exception):
    """A name in a URL that is not a run under the base directory (one line: why)."""


class Base:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.abspath(path))
        # A RunDir is only paths: made once per name, not at every poll (pathlib's cost
        # was half a poll's CPU with sixty runs).
        self._rundirs: dict[str, RunDir] = {}

    def entries(self) -> list[RunEntry]:
        """Every run under the base (rundir.run_entries: the rule `list` and `stop --all`
        use too), sorted by name. An entry named like a run that is a symlink is shown as
        an error row; anything else that holds no spec is not a run and not shown."""
        return run_entries(self.path, self._rundirs)

    def run(self, name: str) -> RunDir:
        """The run a URL names; NotARun when the name is not one of the base's runs."""
        if not RUN_ID_SHAPE.fullmatch(name):
            raise NotARun("not a run name (letters, digits, '.', '_', '-'; at most 128)")
        path = self.path / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise NotARun("no such run") from None
        except OSError as exc:
            raise NotARun(f"cannot look at it ({exc.strerror or exc})") from None
        if stat.S_ISLNK(st.st_mode):
            raise NotARun("a symlink (never followed)")
        if not stat.S_ISDIR(st.st_mode) or not os.path.lexists(path / "spec.toml"):
            raise NotARun("no run there (no spec.toml)")
        return RunDir(path)
