"""Debian's chromium, driven by Playwright for Python, for the dashboard's browser tests
and `make screenshot`. Never `playwright install`: a browser download cannot work on
these machines; the chromium package is installed by .ci/run and `make test`."""

import os
import shutil

CHROMIUM = "/usr/bin/chromium"
# The machine's network is closed: nothing that phones home, nothing that needs a GPU or
# a sandbox helper (CI runs as root in a container).
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium():
    """(path, None) or (None, why there is none)."""
    path = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if path is None:
        return None, (
            "no chromium on this machine (Debian: apt-get install -y --no-install-recommends chromium; "
            ".ci/run and `make test` install it where they can)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None, "playwright is not installed (pip install -e '.[test]')"
    return path, None


def launch(playwright, path):
    return playwright.chromium.launch(executable_path=path, args=ARGS)


def status_is(page, name, status, timeout=10.0):
    """Wait (polling every 10 ms inside the page) until run `name` shows `status`."""
    page.wait_for_function(
        '([name, status]) => { const s = document.querySelector(`section[data-run-id="${name}"] '
        "[data-field=status]`); return s !== null && s.textContent === status; }",
        arg=[name, status],
        polling=10,
        timeout=timeout * 1000,
    )
