"""docs/dashboard.png: the dashboard over real runs, taken by Debian's chromium.

    python docgen/dashboard_screenshot.py [--out docs/dashboard.png]     (make screenshot)

Starts three real runs in a scratch directory (one that completed with a failed item,
opened on the page, one stopped from the dashboard's own "Stop" button and left
collapsed, one live in a long provider call), serves them with `runner dashboard`, and
photographs the page. Everything it started is
stopped before it exits, the live run through the dashboard's "Stop" button. Never drawn
by hand: run it again after a change to the page.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "runner")]

import runs as R  # noqa: E402  (the tests' helpers: `runner run --detach`, journal reads)
from dashboard_browser import chromium, launch, status_is  # noqa: E402

from runner.control import stop  # noqa: E402
from runner.files.rundir import RunDir, new_run_id  # noqa: E402
from runner.proc import reaper  # noqa: E402

LONG = "case $0 in test) exec sleep 600;; *) sleep 0.4;; esac"


def _start(base: Path, spec: Path, started: list[RunDir]) -> RunDir:
    rd = R.start(spec, base / new_run_id())
    started.append(rd)
    return rd


def take(out: Path) -> None:
    path, why = chromium()
    if path is None:
        raise SystemExit(f"dashboard_screenshot: {why}")
    from playwright.sync_api import sync_playwright

    started: list[RunDir] = []
    dashboard = None
    with tempfile.TemporaryDirectory(prefix="runner-dashboard-") as tmp:
        base, specs = Path(tmp) / "runs", Path(tmp)
        base.mkdir()
        try:
            failed = _start(
                base,
                R.write_spec(
                    specs / "nightly.toml",
                    items=["lint", "unit", "docs"],
                    provider=["sh", "-c", "sleep 0.2"],
                    verify=[{"command": ["sh", "-c", '[ "$0" != docs ]', "{item}"]}],
                    repair={"max_attempts": 1},
                ),
                started,
            )
            R.wait_engine_exit(failed, timeout=120)
            to_stop = _start(
                base, R.write_spec(specs / "sweep.toml", items=["a", "b", "c"], provider=["sleep", "600"]), started
            )
            R.wait_event(to_stop, "phase-start", phase="session")
            live = _start(
                base,
                R.write_spec(
                    specs / "release.toml",
                    items=["fetch", "build", "test", "package"],
                    provider=["sh", "-c", LONG, "{item}"],
                ),
                started,
            )
            dashboard = subprocess.Popen(
                [*R.RUNNER, "dashboard", "--runs-dir", str(base)], stdout=subprocess.PIPE, text=True
            )
            assert dashboard.stdout is not None
            url = dashboard.stdout.readline().split(" ", 1)[1].strip()
            with sync_playwright() as pw:
                browser = launch(pw, path)
                page = browser.new_page(viewport={"width": 1100, "height": 700})
                page.goto(url)
                status_is(page, to_stop.path.name, "running")
                page.locator(f'section[data-run-id="{to_stop.path.name}"]').get_by_role(
                    "button", name="Stop", exact=True
                ).click()
                status_is(page, to_stop.path.name, "stopped", timeout=30)
                R.wait_event(live, "session-start", item="test", timeout=60)
                status_is(page, failed.path.name, "failed")
                # A finished run is collapsed by default: open the failed one, whose bar
                # shows its failed item in red.
                page.locator(f'section[data-run-id="{failed.path.name}"]').get_by_role("button", name="details").click()
                time.sleep(1.5)  # the live call's runtime ticks past a second; the poll catches up
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out), full_page=True)
                page.locator(f'section[data-run-id="{live.path.name}"]').get_by_role(
                    "button", name="Stop", exact=True
                ).click()
                status_is(page, live.path.name, "stopped", timeout=30)
                browser.close()
        finally:
            if dashboard is not None:
                dashboard.terminate()
                dashboard.wait(timeout=60)
            for rd in started:
                if rd.is_live():
                    stop.stop_now(rd, 0.2)
                reaper.kill_tagged(rd.run_id, 0.2)
    print(f"dashboard_screenshot: wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dashboard_screenshot", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    take(ap.parse_args(argv).out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
