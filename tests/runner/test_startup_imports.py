"""The stop commands' start-up: what `runner stop` and `runner stop --now` import.

Every stop is a new interpreter, and its start-up is part of the stop's latency (the
cost is measured in runner/values.py's docstring). `dataclasses`, `typing`, `logging` and
`contextlib` cost milliseconds each; the stop path avoids them on purpose (runner/log.py,
runner/values.py, the `TYPE_CHECKING = False` idiom). This test holds the code to that,
so that the rule is kept by a test and not by copied comments. It reads Python's own
`-X importtime` tree of a real stop of a real run, and blames a forbidden module only
where a runner module imported it: the interpreter's own start-up (runpy imports
contextlib for `python -m`) is not the runner's doing.
"""

import os

import pytest

FORBIDDEN = frozenset({"dataclasses", "typing", "logging", "contextlib"})


def runner_imports_of(stderr: str, forbidden=FORBIDDEN) -> list[tuple[str, list[str]]]:
    """(module, its importers innermost first) for each forbidden module that a runner
    module imported, from the `import time:` lines of PYTHONPROFILEIMPORTTIME. Each line
    is printed when its import ends, so a module's importer is the next line one level
    shallower."""
    rows = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            name = line.rsplit("|", 1)[1]
            rows.append(((len(name) - len(name.lstrip(" "))) // 2, name.strip()))
    found = []
    for i, (depth, name) in enumerate(rows):
        if name not in forbidden:
            continue
        chain, want = [], depth - 1
        for d, importer in rows[i + 1 :]:
            if d == want:
                chain.append(importer)
                want -= 1
        if any(m == "runner" or m.startswith("runner.") for m in chain):
            found.append((name, chain))
    return found


def test_the_parser_blames_a_runner_importer_and_not_the_interpreter():
    """The check itself: a forbidden module under a runner module is found, one under
    runpy is not (a parser that finds nothing would let every import through)."""
    tree = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:        10 |         10 |     contextlib",
            "import time:        10 |         20 |   runpy",
            "import time:        10 |         10 |       dataclasses",
            "import time:        10 |         20 |     runner.files.spec",
            "import time:        10 |         30 |   runner.cli",
        ]
    )
    assert runner_imports_of(tree) == [("dataclasses", ["runner.files.spec", "runner.cli"])]


@pytest.mark.parametrize("flags", [(), ("--now",)], ids=["stop", "stop-now"])
def test_a_stop_imports_no_dataclasses_typing_logging_or_contextlib(runs, flags):
    """Path: `runner stop` / `runner stop --now` of a live run, end to end, as a new
    interpreter (the start-up a stop's latency includes). Red when any module on the stop
    path imports dataclasses, typing, logging or contextlib at start-up."""
    rd = runs.start(runs.spec(provider=["sleep", "60"]))
    runs.wait_event(rd, "phase-start", phase="session")
    proc = runs.runner("stop", *flags, "--run-dir", rd.path, env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"))
    assert proc.returncode == 0, proc.stderr
    assert "import time:" in proc.stderr  # the tree was recorded: an empty one proves nothing
    assert runner_imports_of(proc.stderr) == []
