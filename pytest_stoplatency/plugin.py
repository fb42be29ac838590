"""The pytest plugin's entry point: the options (registered from _options.py), the markers, and
the platform guard.

The plugin works on Linux only (/proc, pidfds, prctl, cgroup v2), yet it is installed into
every pytest session of an environment, on a developer's Mac too. So this module imports
nothing Linux-only, and nothing that reads /proc: on Linux it registers one plugin object
per feature, the stop latency's (_linux.py) and, when asked for, the process-leak check's
(_leakplugin.py); anywhere else the inactive one (_inactive.py), which says so once in the
header and skips what needs Linux. The texts and settings live in _options.py, which every
feature module imports instead of this one: the entry point imports the features, never the
reverse.
"""

from __future__ import annotations

import sys

import pytest

from . import _options, _session
from ._options import LEAKS_INI_OFF_LINUX, LEAKS_MARKER_LINE, LEAKS_OFF_LINUX, MARKER_LINE, NEEDS_LINUX


def inactive_reason() -> str | None:
    """Why the plugin is inactive here, or None on Linux. Read at configure time, not at
    import, so that a test can fake another platform before pytest loads the plugin."""
    if sys.platform.startswith("linux"):  # ablate: plugin-platform-guard
        return None
    return f"{NEEDS_LINUX} {sys.platform!r}"


def pytest_addoption(parser):
    _options.add_options(parser)


def _leak_check_asked(config) -> str | None:
    """The option or ini key that asks for the leak check, as the user wrote it."""
    for opt, flag in (
        ("process_leaks", "--process-leaks"),
        ("process_leaks_cgroup", "--process-leaks-cgroup"),
        ("process_leaks_subreaper", "--process-leaks-subreaper"),
        ("process_leaks_json", "--process-leaks-json"),
    ):
        if config.getoption(opt):
            return flag
    for key in ("process_leaks_cgroup", "process_leaks_subreaper"):
        if config.getini(key):
            return f"{key} = true (ini file)"
    if _options.leaks_enabled(config):
        return f"process_leaks = {config.getini('process_leaks')} (ini file)"
    return None


SESSION = pytest.StashKey[int]()


def pytest_configure(config):
    # This session's number in its process: what it keeps on disk is named after it, so that
    # a session run inside a test (pytester.runpytest()) ends without touching the outer's.
    session = config.stash[SESSION] = _session.begin()
    config.add_cleanup(lambda: _session.end(session))
    config.addinivalue_line("markers", MARKER_LINE)
    config.addinivalue_line("markers", LEAKS_MARKER_LINE)
    reason = inactive_reason()
    if reason is None:
        # Two features, two plugin objects (as pytest's own LoggingPlugin, CaptureManager):
        # the stop latency's always; the process-leak check's only when it is on (an
        # unused check reads nothing and changes nothing).
        from . import _linux

        if _options.leaks_enabled(config):
            from . import _leakplugin, _records

            # The owner's record directory marks this process as one whose processes a
            # sweep may have to end (its tagged ones, its session cgroup, the leaks it keeps
            # until the session's end) should it die: created before any test runs,
            # removed at a clean end (_cleanup.drop_own_records).
            _records.session_dir(session)
            # Registered first: of two trylast hooks pluggy calls the first registered
            # last, and the stop latency's session end (which writes the leaks into its
            # JSON and drops the records) must come after the check's (which kills).
            config.pluginmanager.register(_leakplugin.ProcessLeaks(config, session), _leakplugin.NAME)
        latency = _linux.StopLatency(config, session)
        config.pluginmanager.register(latency, _linux.PLUGIN_NAME)
        if _options.conformance_asked(config):
            from . import _conformance

            plugin = _conformance.Conformance(config, latency.samples, latency.worker)
            config.pluginmanager.register(plugin, _conformance.NAME)
        return
    # A check that cannot run must not pass for one that found nothing.
    asked = _leak_check_asked(config)
    if asked is not None:
        hint = LEAKS_INI_OFF_LINUX.format(key=asked.split()[0]) if "(ini file)" in asked else ""
        raise pytest.UsageError(LEAKS_OFF_LINUX.format(what=asked, reason=reason) + hint)
    from . import _inactive

    config.stash[_inactive.REASON] = reason
    config.pluginmanager.register(_inactive, _inactive.PLUGIN_NAME)
