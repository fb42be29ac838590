"""spec.py: every default from runner.defaults; every kind of mistake is one line naming
the file, the dotted key and what was expected."""

import os
import re

import pytest

from runner import defaults
from runner.errors import BadInput, SpecError
from runner.files import spec

MINIMAL = 'items = ["a", "b"]\n[provider]\ncommand = ["agent", "--task", "{item}"]\n'

FULL = """
items = ["a", "b", "c"]
[provider]
command = ["agent", "{item}"]
call_timeout = 30
idle_timeout = 0
[stop]
grace = 2.5
kill_grace = 0.3
containment = "group"
channel = "file"
[[hooks.post_session]]
command = ["hook1"]
[[hooks.post_session]]
command = ["hook2", "{item}"]
timeout = 4
[[hooks.post_run]]
command = ["final"]
timeout = 1.5
[[verify]]
command = ["pytest", "-x"]
[[verify]]
command = ["lint"]
timeout = 60
fixable = false
[repair]
max_attempts = 0
[retry]
backoff = 0
[output]
cap_bytes = 1024
"""


def write(tmp_path, text, name="spec.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_minimal_spec_takes_every_default_from_defaults_module(tmp_path, monkeypatch):
    """Path: defaults are read from runner.defaults at load time, never copied.
    Ablation: hard-code a number in spec.py and the monkeypatched default is missed."""
    monkeypatch.setattr(defaults, "CALL_TIMEOUT", 123.0)
    monkeypatch.setattr(defaults, "KILL_GRACE", 0.7)
    monkeypatch.setattr(defaults, "REPAIR_MAX_ATTEMPTS", 9)
    s = spec.load(write(tmp_path, MINIMAL))
    assert s.items == ("a", "b")
    assert s.provider == spec.ProviderSpec(("agent", "--task", "{item}"), 123.0, defaults.IDLE_TIMEOUT)
    assert s.stop == spec.StopSpec(defaults.STOP_GRACE, 0.7, defaults.CONTAINMENT, defaults.STOP_CHANNEL)
    assert (s.post_session, s.post_run, s.verify) == ((), (), ())
    assert s.repair_max_attempts == 9
    assert s.retry_backoff == defaults.RETRY_BACKOFF
    assert s.output_cap_bytes == defaults.OUTPUT_CAP_BYTES
    assert s.source == str(tmp_path / "spec.toml")


def test_full_spec(tmp_path, monkeypatch):
    """Path: every table is parsed; entry defaults (hook and verify timeouts, fixable)."""
    monkeypatch.setattr(defaults, "HOOK_TIMEOUT", 11.0)
    monkeypatch.setattr(defaults, "VERIFY_TIMEOUT", 22.0)
    s = spec.load(write(tmp_path, FULL))
    assert s.provider.call_timeout == 30.0 and s.provider.idle_timeout == 0.0
    assert s.stop == spec.StopSpec(2.5, 0.3, "group", "file")
    assert s.post_session == (spec.CommandSpec(("hook1",), 11.0), spec.CommandSpec(("hook2", "{item}"), 4.0))
    assert s.post_run == (spec.CommandSpec(("final",), 1.5),)
    assert s.verify == (spec.CommandSpec(("pytest", "-x"), 22.0, True), spec.CommandSpec(("lint",), 60.0, False))
    assert (s.repair_max_attempts, s.retry_backoff, s.output_cap_bytes) == (0, 0.0, 1024)
    with pytest.raises(AttributeError):  # as a frozen dataclass's FrozenInstanceError is one
        s.items = ()  # frozen


# (description, spec text, dotted key expected in the message, a word of the expectation)
MISTAKES = [
    ("toml syntax", 'items = ["a"\n', "(toml)", "valid TOML"),
    ("unknown top key", "extra = 1\n" + MINIMAL, "extra", "unknown key"),
    ("unknown provider key", MINIMAL + "timeout = 1\n", "provider.timeout", "unknown key"),
    ("unknown stop key", MINIMAL + "[stop]\ngrace_period = 1\n", "stop.grace_period", "unknown key"),
    (
        "unknown verify key",
        MINIMAL + '[[verify]]\ncommand = ["v"]\n[[verify]]\ncommand = ["w"]\nretries = 1\n',
        "verify[1].retries",
        "unknown key",
    ),
    ("unknown hooks table", MINIMAL + '[[hooks.pre_run]]\ncommand = ["x"]\n', "hooks.pre_run", "unknown key"),
    ("missing items", '[provider]\ncommand = ["x"]\n', "items", "required"),
    ("empty items", 'items = []\n[provider]\ncommand = ["x"]\n', "items", "non-empty list"),
    ("items not a list", 'items = "a"\n[provider]\ncommand = ["x"]\n', "items", "non-empty list"),
    ("empty item", 'items = ["a", ""]\n[provider]\ncommand = ["x"]\n', "items[1]", "non-empty string"),
    ("item not a string", 'items = ["a", 3]\n[provider]\ncommand = ["x"]\n', "items[1]", "non-empty string"),
    ("duplicate item", 'items = ["a", "b", "a"]\n[provider]\ncommand = ["x"]\n', "items[2]", "duplicate"),
    ("missing provider", 'items = ["a"]\n', "provider", "required"),
    ("provider not a table", 'items = ["a"]\nprovider = "x"\n', "provider", "a table"),
    ("missing provider.command", 'items = ["a"]\n[provider]\ncall_timeout = 1\n', "provider.command", "required"),
    (
        "command is a string",
        'items = ["a"]\n[provider]\ncommand = "agent --x"\n',
        "provider.command",
        "list of strings",
    ),
    ("empty command", 'items = ["a"]\n[provider]\ncommand = []\n', "provider.command", "non-empty list"),
    ("command arg not a string", 'items = ["a"]\n[provider]\ncommand = ["x", 1]\n', "provider.command[1]", "a string"),
    ("empty program", 'items = ["a"]\n[provider]\ncommand = ["", "x"]\n', "provider.command[0]", "program"),
    ("negative call_timeout", MINIMAL + "call_timeout = -1\n", "provider.call_timeout", ">= 0"),
    ("bool idle_timeout", MINIMAL + "idle_timeout = true\n", "provider.idle_timeout", "a number"),
    ("string timeout", MINIMAL + 'call_timeout = "10"\n', "provider.call_timeout", "a number"),
    ("nan timeout", MINIMAL + "call_timeout = nan\n", "provider.call_timeout", "a number"),
    ("zero grace", MINIMAL + "[stop]\ngrace = 0\n", "stop.grace", "> 0"),
    ("zero kill_grace", MINIMAL + "[stop]\nkill_grace = 0\n", "stop.kill_grace", "> 0"),
    ("bad containment", MINIMAL + '[stop]\ncontainment = "docker"\n', "stop.containment", '"cgroup"'),
    ("bad channel", MINIMAL + '[stop]\nchannel = "pipe"\n', "stop.channel", '"file"'),
    ("verify not an array of tables", 'verify = ["x"]\n' + MINIMAL, "verify[0]", "a table"),
    ("verify table not array", MINIMAL + '[verify]\ncommand = ["x"]\n', "verify", "array of tables"),
    ("verify missing command", MINIMAL + "[[verify]]\ntimeout = 3\n", "verify[0].command", "required"),
    ("verify zero timeout", MINIMAL + '[[verify]]\ncommand = ["v"]\ntimeout = 0\n', "verify[0].timeout", "> 0"),
    (
        "verify fixable not bool",
        MINIMAL + '[[verify]]\ncommand = ["v"]\nfixable = "yes"\n',
        "verify[0].fixable",
        "true or false",
    ),
    (
        "hook bool timeout",
        MINIMAL + '[[hooks.post_run]]\ncommand = ["h"]\ntimeout = false\n',
        "hooks.post_run[0].timeout",
        "a number",
    ),
    (
        "hook fixable not allowed",
        MINIMAL + '[[hooks.post_session]]\ncommand = ["h"]\nfixable = true\n',
        "hooks.post_session[0].fixable",
        "unknown key",
    ),
    ("float max_attempts", MINIMAL + "[repair]\nmax_attempts = 1.5\n", "repair.max_attempts", "an integer"),
    ("negative max_attempts", MINIMAL + "[repair]\nmax_attempts = -1\n", "repair.max_attempts", ">= 0"),
    ("negative backoff", MINIMAL + "[retry]\nbackoff = -0.5\n", "retry.backoff", ">= 0"),
    ("zero cap", MINIMAL + "[output]\ncap_bytes = 0\n", "output.cap_bytes", "> 0"),
    ("unknown output key", MINIMAL + "[output]\ncap = 1\n", "output.cap", "unknown key"),
]


@pytest.mark.parametrize("text,key,expected", [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_one_line_naming_file_and_key(tmp_path, text, key, expected):
    """Path: validation of each key kind. Ablation: drop any one check and its case loads."""
    p = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        spec.load(p)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}: {key}: expected "), msg
    assert expected in msg, msg
    assert info.value.key == key
    assert isinstance(info.value, BadInput)


def test_unreadable_file(tmp_path):
    """Path: a missing file and a directory are SpecErrors, not tracebacks."""
    for p in (tmp_path / "nope.toml", tmp_path):
        with pytest.raises(SpecError) as info:
            spec.load(p)
        assert str(info.value).startswith(f"{p}: (file): expected a re")  # readable file / regular file
        assert "\n" not in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file anyway")
def test_unreadable_permissions(tmp_path):  # pragma: no cover - the machine runs as root
    p = write(tmp_path, MINIMAL)
    p.chmod(0)
    with pytest.raises(SpecError, match="readable file"):
        spec.load(p)


def test_not_utf8(tmp_path):
    p = tmp_path / "spec.toml"
    p.write_bytes(b'items = ["\xff"]\n')
    with pytest.raises(SpecError, match=r"\(file\): expected UTF-8"):
        spec.load(p)


def test_long_value_stays_short_and_on_one_line(tmp_path):
    p = write(tmp_path, MINIMAL + '[stop]\nchannel = "' + "x" * 500 + '"\n')
    with pytest.raises(SpecError) as info:
        spec.load(p)
    assert len(str(info.value)) < 300 and "\n" not in str(info.value)


def test_loads_names_its_source():
    with pytest.raises(SpecError, match=r"^<inline>: provider: "):
        spec.loads('items = ["a"]\n', "<inline>")


def test_substitute_is_plain_replacement_not_format():
    """Path: substitute. Ablation: str.format would raise on `{0}` / expand `{item.__class__}`;
    sequential replace would expand `{feedback}` inside the item's value."""
    argv = ["agent", "--task={item}", "{item}", "--fb", "{feedback}", "{0}", "{item.__class__}", "{{item}}"]
    out = spec.substitute(argv, item="{feedback} $(rm -rf /)", feedback="/tmp/fb.txt")
    assert out == [
        "agent",
        "--task={feedback} $(rm -rf /)",
        "{feedback} $(rm -rf /)",
        "--fb",
        "/tmp/fb.txt",
        "{0}",
        "{item.__class__}",
        "{{feedback} $(rm -rf /)}",
    ]
    # A placeholder with no value given stays as it is.
    assert spec.substitute(["{feedback}"], item="a") == ["{feedback}"]
    with pytest.raises(TypeError):
        spec.substitute(["x"], other="y")


def test_a_400_digit_number_is_not_echoed_in_full(tmp_path):
    """Path: _show clips an integer past 64 bits to a description of its size (the one
    line stays one short line). Ablation: echo the value and the line holds 400 digits."""
    p = write(tmp_path, MINIMAL.replace("[provider]\n", "[provider]\ncall_timeout = " + "9" * 400 + "\n"))
    with pytest.raises(SpecError) as info:
        spec.load(p)
    msg = str(info.value)
    assert "provider.call_timeout" in msg and "9" * 30 not in msg, msg
    assert "an integer of 400 digits" in msg and len(msg) < 300, msg


def _schema_sample(key: spec.Key) -> str:
    """A spec that sets `key` just past its limit (or to a value of the wrong kind)."""
    if key.kind == "seconds":
        value = f"{key.maximum_value() * 2:g}"
    elif key.kind == "integer":
        value = str(int(key.maximum_value()) + 1)
    else:
        value = {"choice": '"none-of-them"', "boolean": '"yes"', "argv": "[]"}[key.kind]
    if key.table in spec.ARRAYS:
        entry = {"command": '["x"]', key.name: value}
        return MINIMAL + f"[[{key.table}]]\n" + "".join(f"{k} = {v}\n" for k, v in entry.items())
    if key.table == "provider":
        return (
            'items = ["a"]\n[provider]\n'
            + ("" if key.name == "command" else 'command = ["x"]\n')
            + f"{key.name} = {value}\n"
        )
    return MINIMAL + f"[{key.table}]\n{key.name} = {value}\n"


@pytest.mark.parametrize("key", [k for k in spec.SCHEMA if k.kind != "items"], ids=lambda k: k.dotted)
def test_every_schema_key_is_validated_by_the_schema(tmp_path, key):
    """Path: the parser reads each key through spec.SCHEMA (_read), so the limit that
    docs/spec.md prints (rendered from the same table) is the one enforced. Ablation:
    a key read past the schema (its own constant, or no check) loads this value."""
    p = write(tmp_path, _schema_sample(key))
    with pytest.raises(SpecError) as info:
        spec.load(p)
    dotted = f"{key.table}[0].{key.name}" if key.table in spec.ARRAYS else key.dotted
    assert info.value.key == dotted, str(info.value)


def test_the_schema_is_every_key_the_parser_accepts(tmp_path):
    """Path: the allowed keys of every table come from spec.SCHEMA: a key the schema
    does not list is refused, and FULL (every key set) loads. Ablation: a hand-kept set
    of allowed keys that drifts from SCHEMA fails one side."""
    full = spec.load(write(tmp_path, FULL))
    assert full.output_cap_bytes == 1024 and full.post_run[0].timeout == 1.5
    for table in ("provider", "stop", "repair", "retry", "output"):
        text = MINIMAL + ("not_a_key = 1\n" if table == "provider" else f"[{table}]\nnot_a_key = 1\n")
        with pytest.raises(SpecError, match=f"{table}.not_a_key: .*unknown key"):
            spec.loads(text, "<s>")
    listed = {k.dotted for k in spec.SCHEMA}
    for key in re.findall(r"^([a-z_]+) =", FULL, re.M):
        assert any(d.endswith("." + key) or d == key for d in listed), key


@pytest.mark.parametrize("digits", [5000, 100_000])
def test_an_integer_past_pythons_digit_limit_is_a_spec_error(tmp_path, digits):
    """Path: tomllib's int() refuses an integer past sys.get_int_max_str_digits with a
    ValueError that is no TOMLDecodeError; loads() makes it the one-line SpecError
    (BAD_INPUT), not an internal error (exit 70, found by a hostile trial)."""
    p = write(tmp_path, MINIMAL.replace("[provider]\n", "[provider]\ncall_timeout = " + "9" * digits + "\n"))
    with pytest.raises(SpecError) as info:
        spec.load(p)
    msg = str(info.value)
    assert "(toml): expected integers of at most" in msg and len(msg) < 300, msg
