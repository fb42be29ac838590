"""The journal's vocabulary is defined once (runner/events.py) and documented once
(docs/architecture.md, "Journal events"): every event the code writes is documented,
every documented event is written, and no journal write spells an event by hand."""

import ast
import re
from pathlib import Path

from runner.events import Event

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "runner"
DOC = ROOT / "docs" / "architecture.md"


def _documented() -> set[str]:
    text = DOC.read_text()
    section = text.split("### Journal events", 1)[1].split("\n### ", 1)[0]
    names = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([a-z-]+)`", first))
    return names


def _used_members() -> set[str]:
    """Event members the runner's code refers to (Event.RUN_STOP and the like)."""
    used = set()
    for path in RUNNER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Event":
                used.add(node.attr)
    return used


def _hand_spelled_writes() -> list[str]:
    """journal.append("...") or _journal_quietly("...") with a string literal event."""
    found = []
    for path in RUNNER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in ("append", "_journal_quietly") or not node.args:
                continue
            receiver = ast.unparse(node.func.value)
            if "journal" not in receiver and node.func.attr == "append":
                continue
            if isinstance(node.args[0], (ast.Constant, ast.JoinedStr)):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_every_written_event_is_documented_and_every_documented_one_written():
    """Ablation: journal a new Event member without a row in the table (red), or leave
    a row whose event nothing writes (red)."""
    written = {Event[name].value for name in _used_members()}
    documented = _documented()
    assert written - documented == set(), "written but not documented"
    assert documented - written == set(), "documented but never written"
    assert documented == {e.value for e in Event}


def test_no_journal_write_spells_an_event_by_hand():
    assert _hand_spelled_writes() == []
