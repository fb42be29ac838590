"""runner.files.untrusted: reading the run directory as the untrusted input it is.

Every case is a real file of its kind (a FIFO nobody writes, a symlink to /dev/zero, a
sparse 300 MiB file): the read must refuse it at once with one line naming the file."""

import os
import time

import pytest

from runner.errors import Damaged
from runner.files import journal, untrusted


@pytest.fixture
def spot(tmp_path):
    return tmp_path / "engine.json"


CASES = {
    "fifo": (lambda p: os.mkfifo(p), "a FIFO"),
    "directory": (lambda p: p.mkdir(), "a directory"),
    "symlink-to-dev-zero": (lambda p: os.symlink("/dev/zero", p), "a symlink"),
    "symlink-loop": (lambda p: os.symlink(p.name, p), "a symlink"),
    "symlink-to-a-good-file": (lambda p: (p.with_name("real").write_text("{}"), os.symlink("real", p)), "a symlink"),
    "huge": (lambda p: open(p, "wb").truncate(untrusted.SMALL_CAP + 1), "cap"),
    "binary": (lambda p: p.write_bytes(b"\xff\xfe{"), "UTF-8"),
    "deep": (lambda p: p.write_bytes(b"[" * 20_000 + b"]" * 20_000), "deeper than"),
    "not-json": (lambda p: p.write_bytes(b"{"), "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_kind_of_damage_is_one_line_naming_the_file(spot, case):
    """Path: untrusted.read_json, as every run-directory read uses it. Ablation: drop
    O_NONBLOCK and the FIFO case hangs (pytest-timeout ends it, red); drop O_NOFOLLOW and
    the /dev/zero case reads until the cap (red: it is no longer named a symlink)."""
    make, needle = CASES[case]
    make(spot)
    t0 = time.monotonic()
    with pytest.raises(Damaged) as info:
        untrusted.read_json(spot)
    assert time.monotonic() - t0 < 1.0
    message = str(info.value)
    assert "\n" not in message and str(spot) in message and needle in message, message


def test_a_sound_file_reads_back():
    assert untrusted.parse_json(b'{"a": [1, {"b": "]]]["}]}', "x") == {"a": [1, {"b": "]]]["}]}


def test_depth_skips_brackets_inside_strings():
    assert untrusted.depth(b'{"a": "[[[[[[", "b": [1]}') == 2
    assert untrusted.depth(b'"\\"[[["') == 0


def test_list_dir_refuses_a_symlinked_directory(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "children")
    with pytest.raises(Damaged, match="children"):
        untrusted.list_dir(tmp_path / "children")
    assert untrusted.list_dir(tmp_path / "absent") == []


def test_journal_read_skips_a_deep_line_and_keeps_the_rest(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"event": "a", "t": 1}\n' + b"[" * 10_000 + b"]" * 10_000 + b'\n{"event": "b", "t": 2}\n')
    assert [r["event"] for r in journal.read(path)] == ["a", "b"]


def test_journal_never_appends_through_a_symlink(tmp_path):
    """A journal.jsonl that is a link to someone else's file is refused, not appended to."""
    victim = tmp_path / "someone-elses.log"
    victim.write_text("theirs\n")
    os.symlink(victim, tmp_path / "journal.jsonl")
    with pytest.raises(Damaged, match="symlink"):
        journal.Journal(tmp_path / "journal.jsonl").append("x")
    assert victim.read_text() == "theirs\n"
