"""The `Stopper` protocol: what the kit asks of a stop it measures (built-in or a user's).

A stopper has three steps, each called once per sample:

- ``start(tree)``: start the victim tree the way the tool under test starts work, from
  ``tree.argv`` (a list) or ``tree.shell`` (the same, quoted for a shell), and return a
  handle (anything). Not timed. It may wait for the tree itself (``tree.adopt()``, with
  ``process=`` a ``Popen`` of it for an early exit to end the wait); otherwise the kit
  waits for the victim's ready handshake when ``start`` returns.
- ``stop(handle)``: the timed part, from its first action until it returns. Return a
  dict of what the tool said (``{"code": 0}``), or ``{}``.
- ``cleanup(handle)``: not timed; reap what the stopper itself started (never the
  tree: the kit kills whatever of the tree is left, after counting it).

``close()`` runs once after the last sample (a daemon the stopper started once);
``missing()`` says why the stopper cannot run here (a tool not installed), or None.
A user's stopper subclasses this class (or has the same methods) and is named on the
command line as ``--stopper module:Class``; it is built as ``Class(work, kill_grace)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .zoo import Tree


class Stopper:
    id = ""
    label = ""
    how = ""  # one line for the document: what this stopper does
    runner = False  # one of the runner's own stops (the cells where no orphan is allowed)

    def __init__(self, work: Path, kill_grace: float) -> None:
        self.work, self.kill_grace = work, kill_grace

    def missing(self) -> str | None:
        """Why this stopper cannot run here (a tool not installed), or None."""
        return None

    def start(self, tree: Tree) -> Any:
        raise NotImplementedError

    def stop(self, handle: Any) -> dict[str, Any]:
        """The timed part; returns what the stopper said (exit code, output), if anything."""
        raise NotImplementedError

    def cleanup(self, handle: Any) -> None:
        pass

    def close(self) -> None:
        """After the last tree (a daemon the stopper started once)."""
