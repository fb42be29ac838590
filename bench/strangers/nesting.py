"""Which pytest sessions of a process the probe of `make leaks-strangers` (leakcheck_probe.py)
watches: the outermost one, in a process that no test or wider fixture of the watched run
started. A session a test runs inside it (pytester's runpytest(), in process) or starts as its
child (runpytest_subprocess(): its environment carries the test's scope) is part of that test.

A module of its own, imported the ordinary way: pytest loads the probe itself (a plugin named
in PYTEST_PLUGINS) through its assertion rewriting, where a mutation campaign's import probe
cannot see it. Standard library only.
"""

_configs: list = []  # this process's sessions, outermost first (pytester nests them)
_inner: list[bool] = [False]  # whether a test or a fixture of the watched run started this process


def configured(config, inherited: str) -> None:
    """A session of this process is configured; `inherited`: the scope tag this process
    started with (empty, or "<run>.<worker>.<kind><n>": t a test, f a fixture, g a gap)."""
    _configs.append(config)
    if len(_configs) == 1:
        # xdist's workers inherit no test's scope (the controller runs no test; a gap's, at
        # most, when it replaces a worker).
        _inner[0] = inherited.rsplit(".", 1)[-1][:1] in ("t", "f")  # ablate: oracle-inner-process


def unconfigured(config) -> None:
    if config in _configs:
        _configs.remove(config)


def watched() -> bool:
    """Whether a hook runs for the watched session."""
    return len(_configs) == 1 and not _inner[0]  # ablate: oracle-outer-session-only
