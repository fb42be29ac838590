"""docs/exit-codes.md agrees with runner.exitcodes.Exit: every member documented with its
code, nothing documented that the enum lacks, 1 and 2 unused, and the two tables of the
page (codes -> commands, commands -> codes) say the same thing."""

import re
from pathlib import Path

from runner.exitcodes import Exit

DOC = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"


def _table(section):
    """Rows of the first markdown table under `## section`, as lists of stripped cells."""
    text = DOC.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")]
    assert len(rows) >= 3, f"no table under ## {section}"
    return [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows[2:]]


def _codes_table():
    out = {}
    for name, code, meaning, commands in _table("Codes"):
        name = name.strip("`")
        assert name not in out, f"{name} documented twice"
        out[name] = (int(code), meaning, {c.strip() for c in commands.split(",") if c.strip()})
    return out


def _by_command():
    out = {}
    for command, codes in _table("By command"):
        cmd = command.strip("`").removeprefix("runner ")
        out[cmd] = {c.strip() for c in codes.split(",") if c.strip()}
    return out


def test_every_member_documented_with_its_code():
    """Ablation: add an Exit member (or change a value) without the doc: red."""
    table = _codes_table()
    assert set(table) == {m.name for m in Exit}
    for m in Exit:
        code, meaning, _ = table[m.name]
        assert code == m.value, m.name
        assert len(meaning) > 20, m.name


def test_one_and_two_are_never_used():
    assert not {1, 2} & {m.value for m in Exit}
    assert not {1, 2} & {code for code, _, _ in _codes_table().values()}
    assert len({m.value for m in Exit}) == len(Exit)


def test_by_command_table_names_only_real_codes_and_agrees_with_codes_table():
    by_command = _by_command()
    table = _codes_table()
    known = {m.name for m in Exit}
    for cmd, codes in by_command.items():
        assert codes <= known, (cmd, codes - known)
    # "returned by" of each code == the commands whose row lists it.
    for name, (_, _, commands) in table.items():
        listed = {cmd for cmd, codes in by_command.items() if name in codes}
        assert commands == listed, (name, commands ^ listed)


def test_commands_return_what_the_issues_require():
    """The contract of issues 3 and 4 (the lead's CLI is built to it)."""
    c = _by_command()
    assert {"OK", "FAILED", "STOPPED", "BAD_INPUT", "REFUSED"} <= c["run"]
    assert {"OK", "STOP_FORCED", "UNKILLABLE", "NO_LIVE_RUN", "BAD_INPUT"} <= c["stop"]
    assert {"OK", "UNKILLABLE", "NO_LIVE_RUN"} <= c["stop --now"]
    assert "STOP_FORCED" not in c["stop --now"]  # --now is the forced path itself, not a fallback
    assert "OK" in c["stop --graceful"]
    assert {"OK", "FAILED", "STOPPED"} <= c["stop --graceful --wait"]
    assert {"OK", "FAILED", "STOPPED", "NO_LIVE_RUN"} <= c["wait"]
    assert c["run"] - {"NO_LIVE_RUN"} <= c["resume"] and "REFUSED" in c["resume"]
    assert {"OK", "NO_LIVE_RUN"} <= c["status"]
    assert re.search(r"\b1\b.*\b2\b", DOC.read_text().split("## Codes")[0], re.S)
