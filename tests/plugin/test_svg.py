"""--stop-latency-svg: the latency distribution per label, drawn by matplotlib (the plots
extra), imported only when a picture is asked for; refused up front, naming how to install
it, where it is missing."""

import importlib.util
import sys

import pytest

from pytest_stoplatency import pictures

TEST = """
import os, signal, pytest

@pytest.mark.stop_latency(bound=7, label="kill one")
def test_stop(victim, stop_latency):
    v = victim("trap-term")
    with stop_latency.measure(None, v):
        os.kill(v.pid, signal.SIGKILL)
"""


def test_the_svg_draws_each_label_with_its_bound(pytester):
    """Path: StopLatency.pytest_sessionfinish -> pictures.samples_svg: the SVG names the
    label, and a session without the option never imports matplotlib (the runtime stays
    free of it)."""
    if importlib.util.find_spec("matplotlib") is None:  # found, not imported: drawing runs in a subprocess
        pytest.skip("the plots extra (make venv installs it)")
    pytester.makepyfile(test_pic=TEST)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "--stop-latency", "--stop-latency-svg", "pic.svg", timeout=120
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["stoplatency: wrote pic.svg"])
    svg = (pytester.path / "pic.svg").read_text()
    assert "<svg" in svg and "kill one" in svg
    pytester.makeconftest(
        "import sys\n"
        "def pytest_unconfigure():\n"
        "    print('matplotlib loaded:', 'matplotlib' in sys.modules)\n"
    )  # fmt: skip
    plain = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--stop-latency", "-s")
    plain.stdout.fnmatch_lines(["*matplotlib loaded: False*"])


def test_without_matplotlib_the_svg_is_refused_with_the_install_line(pytester, monkeypatch):
    """Path: _options.svg_path: matplotlib missing (hidden from import) is a usage error before
    any test runs, whose one line says how to install the extra."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    pytester.makepyfile(test_pic=TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--stop-latency-svg", "p.svg")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert pictures.INSTALL in result.stderr.str()
    assert not (pytester.path / "p.svg").exists()
