"""A scratch copy of the tree, with one edit applied; the working tree is never touched."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

# Copied into the scratch root under these names: the root is first on PYTHONPATH, so
# every Python process that inherits the environment imports the site probe, and the
# pytest process loads the plugin probe with `-p`.
PROBE_FILES = {
    "_site_probe.py": "sitecustomize.py",
    "_pytest_probe.py": "_mutation_pytest_probe.py",
}
PYTEST_PROBE_MODULE = "_mutation_pytest_probe"

# Every scratch copy not yet removed: an interrupted campaign removes what its threads
# did not get to (remove_all).
_made: set[Path] = set()
_made_lock = threading.Lock()


class StaleMutation(Exception):
    """The marker is missing or doubled: the mutation no longer fits the code."""


class DoesNotCompile(Exception):
    """The mutated Python file is a syntax error: any test would fail, which proves nothing."""


def tree_files(root: Path) -> list[str]:
    """Tracked files plus untracked ones that are not ignored, as the working tree has them.

    Untracked-but-not-ignored files are included because pytest in the working tree would
    see them too; the baseline runs on the same copy, so both sides agree.
    """
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    return sorted({p for p in out.decode().split("\0") if p})


def copy_tree(root: Path, dest: Path) -> None:
    for rel in tree_files(root):
        src = root / rel
        if not src.exists() and not src.is_symlink():
            continue  # tracked but deleted in the working tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)
    for name, as_name in PROBE_FILES.items():
        if (dest / as_name).exists():
            raise RuntimeError(f"{as_name} exists in the tree; the probe would shadow it")
        shutil.copy2(Path(__file__).with_name(name), dest / as_name)


MARKER = re.compile(r"#\s*ablate:\s*([A-Za-z0-9_.-]+)\s*$")
"""An ablation site: a line of code ending in `# ablate: <mutation-id>`. The marker, not
the text of the line, says where a mutation applies, so reformatting the code never
makes a mutation stale silently; a missing or doubled marker is an error."""


def apply(dest: Path, file: str, marker: str, replace: str) -> None:
    """Replace the one line marked `# ablate: <marker>` in the scratch copy's `file` by
    `replace` (at the line's indentation, the marker kept as `# ABLATED`)."""
    path = dest / file
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StaleMutation(f"{file}: no such file") from None
    lines = text.splitlines(keepends=True)
    hits = [n for n, line in enumerate(lines) if (m := MARKER.search(line)) and m.group(1) == marker]
    if len(hits) != 1:
        raise StaleMutation(f"{file}: marker '# ablate: {marker}' found {len(hits)} times (expected exactly 1)")
    line = lines[hits[0]]
    indent = line[: len(line) - len(line.lstrip())]
    lines[hits[0]] = f"{indent}{replace}  # ABLATED {marker}\n"
    text = "".join(lines)
    if file.endswith(".py"):
        try:
            compile(text, file, "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise DoesNotCompile(f"{file}: does not compile: {exc.msg} (line {exc.lineno})") from None
    path.write_text(text, encoding="utf-8")


def module_name(file: str) -> str | None:
    """The dotted module a .py path imports as (None for files that are not Python)."""
    if not file.endswith(".py"):
        return None
    parts = file[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or None


def make(root: Path, prefix: str) -> Path:
    dest = Path(tempfile.mkdtemp(prefix=f"mutate-{prefix}-"))
    with _made_lock:
        _made.add(dest)
    try:
        copy_tree(root, dest)
    except BaseException:
        remove(dest)
        raise
    return dest


def remove(dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    with _made_lock:
        _made.discard(dest)


def remove_all() -> list[Path]:
    """Remove every scratch copy still on disk; return them."""
    with _made_lock:
        left = sorted(_made)
    for d in left:
        remove(d)
    return left
