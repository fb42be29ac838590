"""README.md's "A stopped run in one minute" is a tested example (issue 42, item 1): its
spec and its four commands, run as they are in a scratch directory, print the lines the
README shows (the run id, directories, times and column widths aside), the stop exits 0
and leaves nothing of the run alive. docs/pypi.md, the index's page, shows the same spec
and commands."""

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
SECTION = "## A stopped run in one minute"
RUNNER = [sys.executable, "-m", "runner"]


def section(doc):
    text = (ROOT / doc).read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text[start : end if end > 0 else len(text)])]


def commands(blocks):
    (sh,) = [body for lang, body in blocks if lang == "sh" and "runner run" in body]
    return [raw.split("  #")[0].strip() for raw in sh.splitlines() if raw.strip().startswith("runner ")]


def shown(blocks):
    """The text block: `$ command` lines, each followed by what it printed."""
    (text,) = [body for lang, body in blocks if lang == "text"]
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("$ "):
            current = out.setdefault(line[2:], [])
        else:
            current.append(line)
    return out


def normal(line):
    """What a line says, without what differs from run to run: the run id, a directory,
    a number, column padding, and what containment the machine gives (cgroup v2 or not)."""
    line = re.sub(r"\d{8}-\d{6}-[0-9a-f]{6}", "ID", line)
    line = re.sub(r"(?<![\w.])/\S*", "PATH", line)
    line = re.sub(r"\d+(\.\d+)?", "N", line)
    if line.strip().startswith("containment:"):
        line = "  containment:"  # a cgroup of its own, or process groups: the machine's
    return " ".join(line.split())


@pytest.fixture
def scratch(tmp_path):
    (spec,) = [body for lang, body in section("README.md") if lang == "toml"]
    (tmp_path / "spec.toml").write_text(spec)
    yield tmp_path
    # Whatever happened, nothing of the run outlives the test.
    subprocess.run([*RUNNER, "stop", "--now"], cwd=tmp_path, capture_output=True, timeout=60)


def test_the_readme_commands_print_what_the_readme_shows(scratch):
    """Path: the README's spec through `runner run --detach`, `list`, `stop`, `status`
    (the real CLI, the real engine). Ablation: a README line that no longer matches what
    the runner prints (a changed word, a new column) fails here with both lines."""
    blocks = section("README.md")
    want = shown(blocks)
    argvs = commands(blocks)
    assert argvs == list(want), (argvs, list(want))
    env = {**os.environ, "COLUMNS": "200"}
    got = {}
    for line in argvs:
        argv = shlex.split(line)
        done = subprocess.run([*RUNNER, *argv[1:]], cwd=scratch, capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        got[line] = (done.stdout + done.stderr).rstrip("\n").splitlines()
        if argv[1] == "run":
            run_dir = Path(got[line][0])
            # The engine is up; wait for the first item's session so that `list` shows it
            # running with its items (an event, not a moment: its journal line).
            journal = run_dir / "journal.jsonl"
            for _ in range(600):
                if journal.exists() and '"session-start"' in journal.read_text():
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the README's run never started its first session")
    for line in argvs:
        assert [normal(x) for x in got[line]] == [normal(x) for x in want[line]], (line, got[line])
    state = (run_dir / "state.json").read_text()
    assert '"stopped"' in state


def test_the_index_page_shows_the_readme_s_spec_and_commands():
    """docs/pypi.md (the long description) shows the same spec and the same commands."""
    readme, pypi = section("README.md"), section("docs/pypi.md")
    assert [b for lang, b in readme if lang == "toml"] == [b for lang, b in pypi if lang == "toml"]
    assert commands(readme) == commands(pypi)


def test_the_index_page_has_no_link_into_the_repository():
    """An index shows docs/pypi.md with no repository beside it: no relative link or
    image (the README's would be dead there)."""
    text = (ROOT / "docs" / "pypi.md").read_text()
    targets = re.findall(r"\]\(([^)]*)\)", text)
    assert all(re.match(r"https://", t) for t in targets), targets
