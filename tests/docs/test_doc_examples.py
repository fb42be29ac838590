"""Every code block of README.md and docs/plugin.md is something that runs: a Python
block is (a part of) a file of examples/ (`make examples` runs every one), a TOML block
is a spec the runner loads, a shell block's commands are make targets, `runner`
commands its parser accepts, or pytest options that exist; the guide's other blocks are
rendered from the code or from a real run (their template holds a placeholder)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from runner.files import spec

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
EXAMPLES = {p: p.read_text() for p in (ROOT / "examples").rglob("*.py")}


def blocks(path):
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text())]


def test_python_blocks_are_example_files():
    """Path: a Python block of README.md or docs/plugin.md is found whole in a file of
    examples/; the guide's one signature block is rendered from the code. Ablation: the
    old `my_reaper(v.pgid)` block, defined nowhere, is in no example file."""
    seen = 0
    for doc in (ROOT / "README.md", ROOT / "docs" / "plugin.md"):
        for lang, body in blocks(doc):
            if lang != "python":
                continue
            if body.startswith("with stop_latency.measure("):  # {{signature:measure}}
                continue
            seen += 1
            where = [p for p, text in EXAMPLES.items() if body.strip() in text]
            assert where, f"{doc.name}: a Python block that is no file of examples/:\n{body}"
            for p in where:
                assert p.name.startswith("test_"), p  # collected by `make examples`
    assert seen >= 3


def test_examples_have_no_undefined_names_or_unused_imports():
    """Path: ruff's pyflakes checks (F401 unused import, F821 undefined name) on the
    files the blocks come from: a reader can paste them as they are."""
    files = [str(p) for p in EXAMPLES if p.parent.name == "guide"]
    assert files
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "F401,F811,F821,F841", *files],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_guides_other_blocks_come_from_the_code_or_a_run():
    """Path: every fenced block of docs/plugin.template.md holds a placeholder (an example
    file, a real run, a signature), but for the shell blocks checked below."""
    template = (ROOT / "docs" / "plugin.template.md").read_text()
    for lang, body in blocks(ROOT / "docs" / "plugin.template.md"):
        if lang == "sh":
            continue
        assert "{{" in body, f"a block typed into the template:\n{body}"
    assert "{{example:" in template and "{{latency_demo}}" in template


@pytest.mark.parametrize("doc", ["README.md", "docs/pypi.md"])
def test_toml_blocks_are_specs_the_runner_loads(doc):
    """Path: the README's (and the index page's) spec blocks load with the runner's own
    parser (the example of every key, in docs/spec.md, has its own test)."""
    found = [body for lang, body in blocks(ROOT / doc) if lang == "toml"]
    assert found
    for body in found:
        spec.loads(body, doc)


def _install_line(part):
    """`pip install .`, `python3 -m pip install .`, `pipx install .` or the published
    name, with an extra that pyproject.toml defines."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    words = shlex.split(part)
    at = words.index("install")
    assert words[:at] in (["pip"], ["pipx"], ["python3", "-m", "pip"]), part
    (target,) = words[at + 1 :]
    name, _, extras = target.partition("[")
    assert name in (".", project["name"]), part
    for extra in filter(None, extras.rstrip("]").split(",")):
        assert extra in project["optional-dependencies"], part


def _make_targets():
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, re.M))


def _runner_argv(line):
    """A synopsis line (`runner stop [--now|--graceful] [--run-dir DIR]`) as one command
    line: brackets opened, the first of each alternative."""
    line = re.sub(r"\[([^\]]*)\]", r"\1", line)
    line = re.sub(r"(--[\w-]+)\|--[\w-]+", r"\1", line)
    return shlex.split(line)[1:]


def _pytest_options():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=ROOT
    )
    return set(re.findall(r"(--[\w-]+)", done.stdout))


@pytest.mark.parametrize("doc", ["README.md", "docs/plugin.md", "docs/pypi.md"])
def test_shell_blocks_are_commands_that_exist(doc, monkeypatch, tmp_path):
    """Path: each command of a shell block: `make T` names a target of the Makefile,
    `runner ...` parses with the runner's own parser, `python -m pytest_stoplatency
    conformance ...` with the kit's, `pytest` options exist, `touch`
    names a control file of the run directory. A `--compare` baseline the blocks name is read
    (the kit's parser reads it up front): one, empty, stands in the working directory."""
    from runner import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "baseline.json").write_text('{"labels": {}}')

    options = None
    checked = 0
    for lang, body in blocks(ROOT / doc):
        if lang != "sh":
            continue
        for raw in body.splitlines():
            line = raw.split("  #")[0].strip()
            if not line or line.startswith("#"):
                continue
            checked += 1
            for part in (p.strip() for p in line.split(";")):
                if not part or part.startswith("#"):
                    continue
                word = part.split()[0]
                if word == "make":
                    assert part.split()[1] in _make_targets(), part
                elif word == "runner":
                    args = cli._parser().parse_args(_runner_argv(part))
                    assert args.command, part
                elif word == "pytest":
                    options = options or _pytest_options()
                    for opt in re.findall(r"(--[\w-]+)", part):
                        assert opt in options, opt
                elif part.startswith(("python -m pytest_stoplatency conformance", "PYTHONPATH=")):
                    from pytest_stoplatency.kit import cli as kit_cli

                    if part.startswith("PYTHONPATH="):  # the guide's adapter example, importable
                        monkeypatch.syspath_prepend(str(ROOT / part.split()[0].split("=", 1)[1]))
                    argv = shlex.split(part.split("conformance", 1)[1])
                    kit_cli.parse(argv)  # a usage error exits 2: the test fails
                elif "install" in part.split()[:4]:
                    _install_line(part)
                elif word == "touch":
                    assert re.fullmatch(r"touch \w+/(STOP|PAUSE)", part), part
                else:
                    raise AssertionError(f"{doc}: a shell command this test cannot check: {part}")
    assert checked
