"""atomic.py: the old file survives a crash between writing the temp file and replacing."""

import json
import os
import subprocess
import sys
import time

import pytest

from runner.files import atomic


class Crash(Exception):
    pass


def _crash(tmp, final):
    # The temp file is complete and sits next to the target when the crash lands.
    assert os.path.dirname(tmp) == os.path.dirname(os.path.abspath(final))
    assert os.path.getsize(tmp) > 0
    raise Crash("injected between write and replace")


def test_roundtrip_json_is_sorted_and_newline_terminated(tmp_path):
    """Path: atomic_write_json's format (indent 2, sorted keys, trailing newline)."""
    p = tmp_path / "x.json"
    atomic.atomic_write_json(p, {"b": 1, "a": [1, 2]})
    text = p.read_text()
    assert text.endswith("\n")
    assert text.index('"a"') < text.index('"b"')
    assert json.loads(text) == {"a": [1, 2], "b": 1}


def test_crash_between_write_and_replace_keeps_previous_file(tmp_path, monkeypatch):
    """Path: the temp-then-replace discipline. Ablation: write the target in place
    (open(path, "w")) and the crash leaves a truncated or new file: red."""
    p = tmp_path / "state.json"
    atomic.atomic_write_json(p, {"version": 1})
    monkeypatch.setattr(atomic, "_before_replace", _crash)
    with pytest.raises(Crash):
        atomic.atomic_write_json(p, {"version": 2, "pad": "x" * 100000})
    assert json.loads(p.read_text()) == {"version": 1}
    # No temp litter left next to it.
    assert sorted(os.listdir(tmp_path)) == ["state.json"]


def test_sigkill_mid_write_loop_never_tears(tmp_path):
    """Path: a writer SIGKILLed at an arbitrary moment leaves a loadable file.
    Ablation: a non-atomic write makes some reads fail to parse."""
    p = tmp_path / "s.json"
    code = (
        "import sys; from runner.files.atomic import atomic_write_json\n"
        "i = 0\n"
        "while True:\n"
        "    atomic_write_json(sys.argv[1], {'i': i, 'pad': 'y' * 200000}); i += 1\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(p)])
    try:
        deadline = time.monotonic() + 10
        while not p.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        reads = 0
        while reads < 50 and time.monotonic() < deadline:
            data = json.loads(p.read_text())
            assert len(data["pad"]) == 200000
            reads += 1
    finally:
        proc.kill()
        proc.wait()
    assert json.loads(p.read_text())["i"] >= 0
