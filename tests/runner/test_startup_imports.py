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

from runner.exitcodes import Exit

FORBIDDEN = frozenset({"dataclasses", "typing", "logging", "contextlib"})


def runner_imports_of(stderr: str, forbidden=FORBIDDEN, direct=False) -> list[tuple[str, list[str]]]:
    """(module, its importers innermost first) for each forbidden module that a runner
    module imported, from the `import time:` lines of PYTHONPROFILEIMPORTTIME. Each line
    is printed when its import ends, so a module's importer is the next line one level
    shallower. `direct`: only where a runner module imported it itself (not through a
    standard-library module the runner needs)."""
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
        blamed = chain[:1] if direct else chain
        if any(m == "runner" or m.startswith("runner.") for m in blamed):
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
    assert runner_imports_of(tree, direct=True) == [("dataclasses", ["runner.files.spec", "runner.cli"])]
    through = tree.replace("runner.files.spec", "subprocess")
    assert runner_imports_of(through) == [("dataclasses", ["subprocess", "runner.cli"])]
    assert runner_imports_of(through, direct=True) == []


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


def test_the_engine_starts_without_dataclasses_typing_logging_or_contextlib(runs):
    """Path: the engine's start (`python -m runner _engine DIR`, started by `runner run
    --detach`), from its first import to the first session: its `-X importtime` tree goes
    to engine.log. Red when a runner module the engine imports to start a run imports
    dataclasses, typing, logging or contextlib itself. The standard library's own are not
    the runner's doing: the engine needs subprocess (which imports contextlib) to start
    its commands and tomllib (which imports typing) to read its spec."""
    run_dir = runs.tmp_path / "run"
    runs.started.append(run_dir)  # stopped by the fixture, whatever happens below
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    proc = runs.runner("run", runs.spec(provider=["sleep", "60"]), "--run-dir", run_dir, "--detach", env=env)
    assert proc.returncode == 0, proc.stderr
    rd = runs.RunDir(run_dir)
    try:
        runs.wait_event(rd, "phase-start", phase="session")
        log = rd.engine_log.read_text()
    finally:
        stopped = runs.runner("stop", "--now", "--run-dir", rd.path)
    assert stopped.returncode == 0, stopped.stderr
    assert "runner.engine.main" in log  # the engine's tree was recorded: an empty one proves nothing
    assert runner_imports_of(log, direct=True) == []


WRITERS = frozenset({"runner.files.stopped", "runner.files.reserve"})
"""The stop record's one writer and the engine's reserve: a stopper needs them only when
it writes the record itself (the engine died without recording), never to prove, kill
or confirm."""


def imported(stderr: str) -> set[str]:
    """Every module named in a `-X importtime` tree."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "cumulative" not in line
    }


def test_a_stop_now_that_writes_nothing_loads_no_record_writer(runs):
    """Path: `runner stop --now --run-dir DIR` of a directory that holds no run, as a new
    interpreter: the whole stop pipeline is loaded (control/stop.py and its record step,
    stop_record.py), and the stopper writes nothing, so the record's writer
    (files/stopped.py) and the reserve (files/reserve.py) are never imported: they load
    with the step that writes (issue 26.7: the stopper's start-up is most of its cost).
    Ablation stop-record-writer-lazy (stop_record imports both at module level) turns it
    red."""
    gone = runs.tmp_path / "no-run-here"
    proc = runs.runner("stop", "--now", "--run-dir", gone, env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"))
    assert proc.returncode == Exit.NO_LIVE_RUN, proc.stderr
    assert f"{gone}: no run there" in proc.stderr
    loaded = imported(proc.stderr)
    assert {"runner.control.stop", "runner.control.stop_record"} <= loaded  # loaded: else this proves nothing
    assert loaded & WRITERS == set()


def test_a_stop_exits_without_the_interpreters_teardown(runs):
    """Path: runner/__main__.py's exit of a stop: its lines flushed, then os._exit, with
    no teardown of the modules it loaded (the other end of its start-up). A real `runner
    stop --now` of a live run under PYTHONVERBOSE, where the teardown says itself
    (`# cleanup[...] removing ...`); its stdout is a pipe, block-buffered, so its line
    arrives only through the flush. Ablation `stop-skips-teardown` (no os._exit: red)."""
    rd = runs.start(runs.spec(provider=["sleep", "60"]))
    runs.wait_event(rd, "phase-start", phase="session")
    proc = runs.runner("stop", "--now", "--run-dir", rd.path, env=dict(os.environ, PYTHONVERBOSE="1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("runner: run ") and "stopped" in proc.stdout  # flushed
    assert "# code object from" in proc.stderr  # verbose was on: its silence below proves something
    assert "# cleanup[" not in proc.stderr
