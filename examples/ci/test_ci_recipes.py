"""The CI recipes (github-actions.yml, gitlab-ci.yml) hold: each is valid against the
workflow schema that check-jsonschema ships (offline: its vendored copies of GitHub's and
GitLab's schemas), each command in them parses with the plugin's and the kit's own options,
and each gate uses the default the guide measured (kit/gate.py)."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_stoplatency.kit import cli, gate

HERE = Path(__file__).resolve().parent
RECIPES = {"github-actions.yml": "vendor.github-workflows", "gitlab-ci.yml": "vendor.gitlab-ci"}


def _validate(path: Path, schema: str) -> subprocess.CompletedProcess:
    pytest.importorskip("check_jsonschema", reason="the examples extra (make examples installs it)")
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_is_valid_against_its_vendored_schema(name):
    """Path: check-jsonschema's own copy of the CI system's schema, no network."""
    got = _validate(HERE / name, RECIPES[name])
    assert got.returncode == 0, got.stdout + got.stderr


@pytest.mark.parametrize(
    "name, broken",
    [
        ("github-actions.yml", ("runs-on: ubuntu-24.04", "runs-on: 5")),
        ("gitlab-ci.yml", ("when: always", "when: maybe")),
    ],
)
def test_the_validator_refuses_a_broken_recipe(tmp_path, name, broken):
    """The check is not vacuous: the same recipe with one key made invalid is refused."""
    text = (HERE / name).read_text()
    assert broken[0] in text
    bad = tmp_path / name
    bad.write_text(text.replace(broken[0], broken[1]))
    assert _validate(bad, RECIPES[name]).returncode != 0


def _commands(name: str) -> list[str]:
    """The shell lines of a recipe's steps (GitHub: `run`; GitLab: `script`), folded."""
    yaml = pytest.importorskip("ruamel.yaml", reason="the examples extra (check-jsonschema brings it)")
    doc = yaml.YAML(typ="safe").load((HERE / name).read_text())
    if name == "github-actions.yml":
        lines = [s["run"] for job in doc["jobs"].values() for s in job["steps"] if "run" in s]
    else:
        lines = [line for job in doc.values() if isinstance(job, dict) for line in job.get("script", [])]
    return [" ".join(line.split()).removesuffix(" || status=$?") for line in lines]


@pytest.mark.parametrize("name", RECIPES)
def test_the_recipes_commands_parse_and_use_the_measured_default(name, tmp_path, monkeypatch):
    """Path: each `pytest` option is one the plugin registers; each `conformance` command
    parses with the kit's parser (its baseline read from ci/, as in the recipe); both gates
    use gate.DEFAULT_RULE with gate.DEFAULT_REPEAT samples per label."""
    commands = _commands(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ci").mkdir()
    for baseline in ("stop-latency-baseline.json", "conformance-baseline.json"):
        (tmp_path / "ci" / baseline).write_text('{"labels": {}}')
    helped = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, timeout=120)
    pytest_cmds = [c for c in commands if c.startswith("pytest ")]
    kit_cmds = [c for c in commands if c.startswith("python -m pytest_stoplatency conformance ")]
    assert len(pytest_cmds) == 1 and len(kit_cmds) == 1, commands
    argv = shlex.split(pytest_cmds[0])
    for opt in (a for a in argv if a.startswith("--")):
        assert opt in helped.stdout, opt
    assert argv[argv.index("--stop-latency-compare-fail") + 1] == gate.DEFAULT_RULE
    assert argv[argv.index("--stop-latency-repeat") + 1] == str(gate.DEFAULT_REPEAT)
    args, _, _ = cli.parse(shlex.split(kit_cmds[0].split("conformance", 1)[1]))
    assert args.compare_fail == gate.DEFAULT_RULE and args.repeat == gate.DEFAULT_REPEAT
    assert args.json and args.svg  # what the recipe uploads
