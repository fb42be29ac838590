"""`make`'s bootstrap on a machine that lacks something (README.md, "Requirements"): one
line naming what is missing, before anything is created; a failed bootstrap leaves no
.venv that the next `make` would take for a working one. Run against copies of the
Makefile and tools/requirements.sh, with stand-in interpreters."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL = getattr(sys, "_base_executable", None) or sys.executable

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make(1) here")


@pytest.fixture
def tree(tmp_path):
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path)
    shutil.copytree(ROOT / "tools", tmp_path / "tools")
    return tmp_path


def stand_in(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def make(tree, python):
    return subprocess.run(
        ["make", "--no-print-directory", "venv", f"PYTHON={python}"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_and_nothing_made(tree, done, says):
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0], lines[0]
    assert not (tree / ".venv").exists()
    assert done.stdout == ""  # no recipe ran


def test_no_such_python(tree):
    """Path: tools/requirements.sh from the Makefile's parse: no interpreter of that name."""
    done = make(tree, tree / "python-nowhere")
    assert_one_line_and_nothing_made(tree, done, "no '")


def test_a_python_older_than_3_11(tree, tmp_path):
    """Path: the version check names the version found and PYTHON=."""
    old = stand_in(
        tmp_path,
        "python3.10",
        'case "$*" in *version_info*) echo False ;; *platform*) echo Python 3.10.12 ;; *) exit 1 ;; esac\n',
    )
    done = make(tree, old)
    assert_one_line_and_nothing_made(tree, done, "is Python 3.10.12: needs Python 3.11 or later")
    assert "PYTHON=" in done.stderr


def test_a_python_without_venv(tree, tmp_path):
    """Path: Debian's python3 without python3-venv (no ensurepip): named, with the package."""
    bare = stand_in(tmp_path, "python3", f'case "$*" in *ensurepip*) exit 1 ;; esac\nexec {REAL} "$@"\n')
    done = make(tree, bare)
    assert_one_line_and_nothing_made(tree, done, "python3-venv")


def test_a_failed_venv_leaves_nothing_and_a_half_made_one_is_made_again(tree, tmp_path):
    """Path: `python -m venv` that fails after making .venv/bin/python (as one without
    ensurepip does): the recipe removes it; a half-made .venv (a python, no pip) found
    later is removed and made again, never skipped by `test -x`. Ablation: the old
    `test -x $(PY) || $(PYTHON) -m venv` keeps the half-made one."""
    log = tmp_path / "venv.log"
    broken = stand_in(
        tmp_path,
        "python3",
        f'if [ "$1 $2" = "-m venv" ]; then echo "$3" >> {log}; mkdir -p "$3/bin"; '
        f'printf "#!/bin/sh\\nexit 1\\n" > "$3/bin/python"; chmod +x "$3/bin/python"; exit 1; fi\n'
        f'exec {REAL} "$@"\n',
    )
    done = make(tree, broken)
    assert done.returncode != 0 and "failed" in done.stderr
    assert not (tree / ".venv").exists()
    # A half-made one, as an older Makefile or a killed bootstrap left it.
    (tree / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(tmp_path / "python3", tree / ".venv" / "bin" / "python")
    stand_in(tree / ".venv" / "bin", "python", "exit 1\n")
    done = make(tree, broken)
    assert done.returncode != 0
    assert not (tree / ".venv").exists()
    assert log.read_text().split() == [".venv", ".venv"]  # made again, both times
