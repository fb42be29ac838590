"""The plugin off Linux: it says once, in the header, that it is inactive and why, and skips
what needs it (stop_latency-marked tests, the victim and stop_latency fixtures). Nothing else
of a session changes. Imports nothing Linux-only (it must import on Windows and macOS)."""

from __future__ import annotations

import pytest

from ._options import INACTIVE_HEADER

PLUGIN_NAME = "stoplatency-inactive"
REASON = pytest.StashKey[str]()


def pytest_report_header(config):
    return [f"{INACTIVE_HEADER} {config.stash[REASON]}"]


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason=config.stash[REASON])
    for item in items:
        if item.get_closest_marker("stop_latency"):
            item.add_marker(skip)


@pytest.fixture
def victim(request):
    pytest.skip(request.config.stash[REASON])


@pytest.fixture
def stop_latency(request):
    pytest.skip(request.config.stash[REASON])
