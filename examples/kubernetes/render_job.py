"""examples/kubernetes/job.yaml from job.template.yaml, never typed:

- terminationGracePeriodSeconds is what `runner bound --container spec.toml` prints (the
  hard stop's worst case for this spec, DERIVED from its [stop] keys and the code's
  defaults, plus the start-up margin);
- podFailurePolicy names every exit the entrypoint can give (EXITS): the codes that
  docs/exit-codes.md documents for `runner run` and `runner resume` (its "By command"
  table, which tests/runner/test_exit_codes_doc.py holds to runner/exitcodes.py's Exit),
  the entrypoint's own, and tini's 128+N; each with its action and why. A code without
  an action stops the render;
- the image is IMAGE: one name, tagged with the package's version (pyproject.toml); the
  oldest Kubernetes it is for, OLDEST_KUBERNETES.

`--check` fails (with a diff) when the committed job.yaml is stale; `make docs` and
`make docs-check` run it."""

from __future__ import annotations

import argparse
import difflib
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from runner.exitcodes import Exit  # noqa: E402

NAME = "localhost/runner-job"
"""The image's name, fully qualified: podman names a local build localhost/..., and
Kubernetes would read a bare name as docker.io/library/..., so only a full name is the
same image for podman, docker, kind and k3d."""
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"{NAME}:{VERSION}"
"""The one image name and tag of the recipe (Containerfile, job.yaml, README); a test
reads every file and checks."""
OLDEST_KUBERNETES = "1.30"
"""The oldest Kubernetes the recipe supports (README); job.yaml is validated against its
schema and the newest that kubernetes-validate carries."""
CONTAINER = "runner"

FAIL, IGNORE, COUNT = "FailJob", "Ignore", "Count"
ACTIONS = {
    FAIL: "a retry cannot help: the Job fails at once, with this code in its condition",
    IGNORE: "the pod was stopped, not failed: a new pod resumes the run, and it does not count toward backoffLimit",
    COUNT: "a later pod may succeed: it counts toward backoffLimit",
}
"""What each podFailurePolicy action means for this run (the rules' comments)."""

EXITS: dict[int, tuple[str, str]] = {
    Exit.FAILED: (FAIL, "the run completed, but items failed (also on a start after that)"),
    Exit.STOPPED: (IGNORE, "the run was stopped (pod deletion, node drain, `runner stop`), the stop recorded"),
    Exit.BAD_INPUT: (FAIL, "a bad spec or flag, or a control file that cannot be acted on"),
    Exit.NO_LIVE_RUN: (FAIL, "no run to resume in the run directory"),
    Exit.REFUSED: (COUNT, "another engine holds the run directory"),
    Exit.DAMAGED: (FAIL, "a file of the run directory is damaged: repair it, then apply the Job again"),
    Exit.CRASHED: (COUNT, "the run's engine died without recording an end (out of memory): resumed"),
    Exit.COPY: (FAIL, "the run directory is a copy of a run"),
    Exit.FOREIGN_DIR: (FAIL, "the run directory, or the one it is made in, is not this user's alone"),
    Exit.NOT_PERMITTED: (FAIL, "this user may not act on the run directory"),
    Exit.INTERRUPTED: (IGNORE, "a signal while `runner` still loaded, before it started anything"),
    Exit.NOT_RECORDED: (COUNT, "the volume is full or read-only"),
    Exit.UNSUPPORTED: (FAIL, "the node cannot run the runner (not Linux >= 5.3)"),
    Exit.INTERNAL: (FAIL, "a bug of the runner: its traceback is in engine.log or the named file"),
    128 + signal.SIGTERM: (IGNORE, "tini: SIGTERM before `runner`'s first instruction; nothing was started"),
    128 + signal.SIGKILL: (COUNT, "tini: `runner` was SIGKILLed (out of memory): the run reads crashed, resumed"),
}
"""Every exit the entrypoint can give but 0 (the run completed, now or before), and
what the Job does with it."""

ENTRYPOINT_OWN = {Exit.OK, Exit.FAILED, Exit.FOREIGN_DIR}
"""What entrypoint.sh itself exits with: 0 or 3 for a run that had already completed
(so that applying the Job again is harmless), 13 for a link planted where its own
directory goes."""
TINI = {128 + signal.SIGTERM, 128 + signal.SIGKILL}
"""What tini exits with when a signal ended its child (128 + the signal)."""


def documented_exits(commands: tuple[str, ...] = ("runner run", "runner resume")) -> set[int]:
    """The codes docs/exit-codes.md's "By command" table lists for `commands`."""
    text = (ROOT / "docs" / "exit-codes.md").read_text()
    table = text.split("\n## By command\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].strip("`") in commands:
            names |= {n.strip() for n in cells[1].split(",")}
    return {int(Exit[n]) for n in names}


def entrypoint_exits() -> set[int]:
    """Every exit the entrypoint can give: runner's, its own, tini's."""
    return documented_exits() | {int(c) for c in ENTRYPOINT_OWN} | TINI


def _name(code: int) -> str:
    return Exit(code).name if code in Exit._value2member_map_ else f"128+{signal.Signals(code - 128).name}"


def pod_failure_rules(indent: str) -> str:
    """The exit-code rules of podFailurePolicy, one per action, each code named in a comment."""
    codes = sorted(entrypoint_exits() - {0})
    missing = [c for c in codes if c not in EXITS]
    if missing:
        raise SystemExit(f"render_job.py: no podFailurePolicy action for exit {missing}: add it to EXITS")
    lines = []
    for action in (IGNORE, FAIL, COUNT):
        mine = [c for c in codes if EXITS[c][0] == action]
        if not mine:
            continue
        lines.append(f"# {action}: {ACTIONS[action]}.")
        lines += [f"#   {c} {_name(c)}: {EXITS[c][1]}" for c in mine]
        lines += [
            f"- action: {action}",
            "  onExitCodes:",
            f"    containerName: {CONTAINER}",
            "    operator: In",
            f"    values: [{', '.join(map(str, mine))}]",
        ]
    return "\n".join(indent + line for line in lines)


def grace_period() -> int:
    out = subprocess.run(
        [sys.executable, "-m", "runner", "bound", "--container", str(HERE / "spec.toml")],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def render() -> str:
    text = (HERE / "job.template.yaml").read_text()
    rules = re.search(r"^( *){{pod_failure_rules}}$", text, re.M)
    assert rules is not None, "job.template.yaml: no {{pod_failure_rules}} line"
    text = text.replace(rules.group(0), pod_failure_rules(rules.group(1)))
    text = text.replace("{{termination_grace_period}}", str(grace_period()))
    text = text.replace("{{image}}", IMAGE).replace("{{oldest_kubernetes}}", OLDEST_KUBERNETES)
    return text.replace(
        "{{generated}}",
        "Generated by render_job.py from job.template.yaml, spec.toml and docs/exit-codes.md:"
        " edit those (or EXITS), then `make docs`.",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail when job.yaml is stale")
    args = ap.parse_args()
    target = HERE / "job.yaml"
    text = render()
    if args.check:
        old = target.read_text() if target.exists() else ""
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), "job.yaml", "new"))
            print(f"{target}: stale; run `make docs`", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
