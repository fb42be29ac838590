"""Fuzzing with Hypothesis: hostile specs, run-directory files and argument vectors.

The properties, for every generated input:
- the spec loader raises SpecError (one line) or returns a Spec, nothing else;
- reading a run directory (survey, status) never raises anything but a RunnerError;
- a real `runner` command exits with a documented code, never INTERNAL (70), prints at
  most one line on stderr, and finishes within its bound.

Profiles: "ci" (the default; bounded so `.ci/run` stays well inside its budget) and
"soak" (thousands of examples: HYPOTHESIS_PROFILE=soak, as `make soak` sets).
"""

import io
import json
import os
import subprocess
import time

import pytest
import runs as R
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runner.control import survey
from runner.errors import RunnerError, SpecError
from runner.events import Event
from runner.exitcodes import Exit
from runner.files import spec
from runner.files.rundir import RunDir
from runner.views import logs, overview, render, status

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.register_profile(
    "soak", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

DOCUMENTED = {int(e) for e in Exit} - {int(Exit.INTERNAL)}
COMMAND_BOUND = 20.0  # seconds: a hang fails the property instead of CI

# -- specs --------------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1e308, 3e6, 2**63, 2**64 + 1]),
)
HOSTILE_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40) | st.sampled_from(
    ["\x00", "a\nb", "\x1b[31m", "{item}", "{feedback}", "k" * 300]
)
VALUES = st.recursive(
    st.one_of(NUMBERS, HOSTILE_TEXT, st.booleans()),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner, max_size=4),
    max_leaves=12,
)
KEYS = (
    st.sampled_from(
        [
            "call_timeout",
            "idle_timeout",
            "grace",
            "kill_grace",
            "containment",
            "channel",
            "timeout",
            "fixable",
            "max_attempts",
            "backoff",
            "cap_bytes",
            "command",
        ]
    )
    | HOSTILE_TEXT
)
TABLES = st.sampled_from(["provider", "stop", "repair", "retry", "output"]) | HOSTILE_TEXT


def _toml_string(text):
    escaped = []
    for ch in text:
        if ch in '"\\' or ord(ch) < 0x20 or ord(ch) == 0x7F:
            escaped.append(f"\\u{ord(ch):04x}")
        else:
            escaped.append(ch)
    return '"' + "".join(escaped) + '"'


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


@st.composite
def hostile_specs(draw):
    """A spec that is valid except where a drawn table carries drawn keys and values."""
    items = draw(st.lists(HOSTILE_TEXT, min_size=0, max_size=3) | st.just(["a"]))
    command = draw(st.lists(HOSTILE_TEXT, min_size=0, max_size=3) | st.just(["true", "{item}"]))
    lines = [f"items = {_toml_value(items)}", "[provider]", f"command = {_toml_value(command)}"]
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        table = draw(TABLES)
        entries = draw(st.dictionaries(KEYS, VALUES, max_size=3))
        lines.append(f"[{_toml_string(table)}]")
        lines += [f"{_toml_string(k)} = {_toml_value(v)}" for k, v in entries.items()]
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from(["[" * 200 + "]" * 200, "x = " + "[" * 100 + "]" * 100, "= =", "[["])))
    return "\n".join(lines) + "\n"


NEL_KEY = 'items = []\n[provider]\ncommand = []\n["\x85"]\n'
"""A key holding NEL (U+0085): str.splitlines breaks there, and the message naming the key
was two lines (found by the fuzzer in CI)."""


@example(text=NEL_KEY)
@given(text=hostile_specs())
def test_the_spec_loader_answers_every_spec_with_a_spec_or_one_line(text):
    """Property: spec.loads never raises anything but SpecError, whose message is one
    line of bounded length. (Overflow, recursion and E2BIG used to escape as exit 70.)"""
    try:
        loaded = spec.loads(text, "fuzz.toml")
    except SpecError as exc:
        message = str(exc)
        assert "\n" not in message and "\r" not in message and "\x1b" not in message
        assert len(message.splitlines()) == 1 and not any(0x80 <= ord(c) < 0xA0 for c in message)
        assert len(message) < 1000
    else:
        assert loaded.stop.kill_grace > 0 and loaded.stop.kill_grace <= 30 * 24 * 3600


@settings(max_examples=12)
@example(text=NEL_KEY)
@given(text=hostile_specs())
def test_runner_run_on_a_hostile_spec_is_one_line_and_documented(tmp_path_factory, text):
    """Property, end to end: `runner run --detach` on a hostile spec exits with a
    documented code (BAD_INPUT, or OK for a spec that is valid after all), one line."""
    work = tmp_path_factory.mktemp("spec")
    path = work / "spec.toml"
    path.write_text(text, encoding="utf-8")
    proc = _runner(["run", str(path), "--run-dir", str(work / "run"), "--detach"], cwd=work)
    try:
        assert proc.returncode in (Exit.OK, Exit.BAD_INPUT), (proc.returncode, proc.stderr)
        assert len(proc.stderr.splitlines()) <= 1, proc.stderr
    finally:
        if proc.returncode == Exit.OK:
            R.runner("stop", "--now", "--run-dir", work / "run")
            assert R.tagged(RunDir(work / "run").run_id) == [], "a process of the run was left"


# -- run-directory files --------------------------------------------------------------------

RUN_FILES = [
    "engine.json",
    "state.json",
    "stop-request.json",
    "cgroup",
    "run-id",
    "spec.toml",
    "journal.jsonl",
    "output/1-0001-0-session.log",
]
CONTENTS = st.one_of(
    st.binary(max_size=200),
    VALUES.map(lambda v: __import__("json").dumps(v, allow_nan=True).encode()),
    st.sampled_from([b"", b"[" * 10_000 + b"]" * 10_000, b'{"pid": 1}', b"\xff\xfe"]),
)


@settings(max_examples=40)
@given(name=st.sampled_from(RUN_FILES), content=CONTENTS)
def test_reading_a_run_directory_never_crashes(tmp_path_factory, runs, name, content):
    """Property: with any bytes in any file of a run directory, survey.of and the
    status reader answer; only RunnerErrors (one line) may escape."""
    work = tmp_path_factory.mktemp("rundir")
    rd = RunDir.create(work / "run", runs.spec(name=f"{work.name}.toml", provider=["true"]))
    (rd.path / name).write_bytes(content)
    view = survey.of(rd, wait_for_engine=False)
    assert all("\n" not in d for d in view.damaged)
    try:
        info = status.status_of(rd)
    except RunnerError as exc:
        assert "\n" not in str(exc)
    else:
        json.dumps(info, allow_nan=False)  # strict JSON: no NaN or infinity got through
        render.status_view(info)
    try:
        logs.show(rd, None, follow=False, out=io.BytesIO(), err=lambda line: None)
    except RunnerError as exc:
        assert "\n" not in str(exc)


RECORDS = st.lists(
    st.fixed_dictionaries(
        {"event": st.sampled_from([e.value for e in Event]), "t": NUMBERS | VALUES},
        optional={
            k: VALUES | st.sampled_from(["a", "b", 0, 1, None, "failed", "passed", "timeout", "verify"])
            for k in ("item", "phase", "outcome", "rc", "index", "items", "attempt", "kind", "reason", "hook")
        },
    ),
    max_size=30,
)


@settings(max_examples=200)
@given(records=RECORDS)
@example(
    records=[
        {"event": "phase-start", "t": float("-inf"), "item": "a", "phase": "session"},
        {"event": "item-done", "t": 0, "item": "a"},
    ]
)
@example(records=[{"event": "phase-start", "t": -1e308, "item": "b"}, {"event": "run-stop", "t": 1e308}])
def test_folding_any_journal_never_crashes(records):
    """Property: any sequence of journal records (every event name, any JSON in every
    field, non-finite times) folds (overview.Fold), gives item rows in strict JSON and
    renders as the summary and the status table: the foreground display and `runner
    status` never crash on a journal."""
    loaded = spec.loads(
        'items = ["a", "b"]\n[provider]\ncommand = ["true"]\n[[verify]]\ncommand = ["t", "{item}"]\n', "fuzz.toml"
    )
    fold = overview.Fold(loaded)
    for rec in records:
        fold.add(rec)
    rows = status.item_rows(fold, None, live=True, now=time.time())
    json.dumps(rows, allow_nan=False)
    render.summary("r", "failed", 3, rows)
    render.item_table(rows)


# -- argument vectors -------------------------------------------------------------------------

WORDS = st.sampled_from(
    [
        "run",
        "resume",
        "stop",
        "status",
        "wait",
        "_engine",
        "--now",
        "--graceful",
        "--wait",
        "--json",
        "--detach",
        "--run-dir",
        "--run-dir=",
        "logs",
        "list",
        "--follow",
        "--runs-dir",
        "",
        "-",
        "--",
        "spec.toml",
        "/dev/zero",
        "/",
        "nope",
        "--help",
        "-h",
        "\x00x",
        "--lock-fd",
        "3",
        "-1",
        "x" * 300,
    ]
) | HOSTILE_TEXT.filter(lambda t: "\x00" not in t)


@settings(max_examples=25)
@given(argv=st.lists(WORDS, max_size=5).filter(lambda a: "\x00x" not in a))
def test_any_argument_vector_gets_a_documented_code_and_one_line(tmp_path_factory, argv):
    """Property: `runner ARGV...` for any vector: a documented code (never 70), at most
    one line on stderr, within the bound. (`--help` prints its usage on stdout, 0.)"""
    work = tmp_path_factory.mktemp("argv")
    (work / "spec.toml").write_text('items = ["a"]\n[provider]\ncommand = ["true"]\n')
    if argv[:1] == ["run"] and "--detach" not in argv:
        argv = [*argv, "--detach"]  # a foreground run of a valid spec would wait for it
    proc = _runner(argv, cwd=work)
    try:
        assert proc.returncode in DOCUMENTED, (argv, proc.returncode, proc.stderr)
        assert len(proc.stderr.splitlines()) <= 1, (argv, proc.stderr)
    finally:
        for run_dir in (work / ".runner" / "runs").glob("*") if (work / ".runner").exists() else ():
            R.runner("stop", "--now", "--run-dir", run_dir)
            assert R.tagged(RunDir(run_dir).run_id) == [], "a process of the run was left"


def _runner(argv, cwd):
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [*R.RUNNER, *argv],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=COMMAND_BOUND,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`runner {argv}` hung past {COMMAND_BOUND} s")
    assert time.monotonic() - t0 < COMMAND_BOUND
    return proc
