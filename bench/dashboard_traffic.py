"""The dashboard's traffic with many runs (issue 42): what one open page costs on the
wire, and how soon it gets its first answer on a busy machine.

- **first poll, loaded**: RUNS real finished runs under one directory; with two CPU hogs
  beside it (`while True: pass`, as tools/loaded.py runs them), the first `/api/runs` of a
  dashboard just started, request to last byte (bench/many_runs.first_poll: the median of
  its servers), and the size of that whole answer, plain and gzip-compressed;
- **live**: LIVE runs beside them whose items change every few hundred milliseconds (a
  provider of `sleep`, many items), and the real page (Debian's chromium through
  Playwright, a 1280 px window) open on the dashboard: every byte of its `/api/runs`
  answers (headers and body as received, Chrome's encodedDataLength) over `seconds`,
  after a warm-up that its first answer falls in;
- **idle**: the same page once the live runs are stopped: its polls per second and bytes
  per second while nothing is live.

    python -m bench.dashboard_traffic [--runs 500] [--seconds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pytest_stoplatency.kit import runs
from runner.files.rundir import RunDir

from . import many_runs

ROOT = Path(__file__).resolve().parent.parent
RUNS = 500
LIVE = 3
HOGS = 2
SECONDS = 20.0
IDLE_SECONDS = 10.0
WARMUP = 4.0
LIVE_SPEC = 'items = [{items}]\n\n[provider]\ncommand = ["sleep", "0.3"]\n\n[stop]\nkill_grace = 0.3\n'
CPU_HOG = "while True: pass"


def _hogs(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", CPU_HOG], stdin=subprocess.DEVNULL) for _ in range(n)]


def _end(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def first_poll_loaded(base: Path, work: Path) -> dict[str, Any]:
    """The first /api/runs beside HOGS CPU hogs, and the whole answer's size."""
    hogs = _hogs(HOGS)
    try:
        time.sleep(1.0)  # the hogs are running
        load = list(os.getloadavg())
        out = many_runs.first_poll(base, None, work)
    finally:
        _end(hogs)
    server = many_runs.Server(base, None, work / "dashboard.err")
    try:
        server.conn.request("GET", "/api/runs", headers={"X-Runner-Token": server.token})
        plain = server.conn.getresponse().read()
    finally:
        server.close()
    return {
        **out,
        "hogs": HOGS,
        "loadavg": load,
        "answer_bytes": len(plain),
        "answer_gzip_bytes": len(gzip.compress(plain, compresslevel=5, mtime=0)),
    }


class PageTraffic:
    """The page in chromium, its /api/runs answers counted from Chrome's own network
    events (bytes received, headers included)."""

    def __init__(self, url: str) -> None:
        sys.path.insert(0, str(ROOT / "tests" / "runner"))
        from dashboard_browser import chromium, launch
        from playwright.sync_api import sync_playwright

        path, why = chromium()
        if path is None:
            raise RuntimeError(why)
        self._pw = sync_playwright().start()
        self.browser = launch(self._pw, path)
        context = self.browser.new_context(viewport={"width": 1280, "height": 1000})
        self.page = context.new_page()
        self._lock = threading.Lock()
        self._urls: dict[str, str] = {}
        self.answers: list[tuple[float, int, int]] = []  # (when, status, bytes received)
        self._status: dict[str, int] = {}
        self._headers: dict[str, int] = {}
        cdp = context.new_cdp_session(self.page)
        cdp.on("Network.requestWillBeSent", self._sent)
        cdp.on("Network.responseReceived", self._received)
        cdp.on("Network.loadingFinished", self._finished)
        # A 304's fetch, whose empty body the page never reads, ends as "canceled": its
        # bytes are its headers, as its response event counted them.
        cdp.on("Network.loadingFailed", self._failed)
        cdp.send("Network.enable")
        self.page.goto(url)

    def _sent(self, event: dict[str, Any]) -> None:
        if "/api/runs" in event["request"]["url"] and event["request"]["method"] == "GET":
            self._urls[event["requestId"]] = event["request"]["url"]

    def _received(self, event: dict[str, Any]) -> None:
        if event["requestId"] in self._urls:
            self._status[event["requestId"]] = event["response"]["status"]
            self._headers[event["requestId"]] = int(event["response"].get("encodedDataLength") or 0)

    def _failed(self, event: dict[str, Any]) -> None:
        if event["requestId"] in self._status:
            with self._lock:
                status = self._status[event["requestId"]]
                self.answers.append((time.monotonic(), status, self._headers.get(event["requestId"], 0)))

    def _finished(self, event: dict[str, Any]) -> None:
        if event["requestId"] in self._urls:
            with self._lock:
                status = self._status.get(event["requestId"], 0)
                self.answers.append((time.monotonic(), status, int(event["encodedDataLength"])))

    def window(self, seconds: float) -> dict[str, Any]:
        """The page's answers over `seconds` from now (the page keeps polling)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            self.page.wait_for_timeout(200)  # lets Playwright dispatch the events
        t1 = time.monotonic()
        with self._lock:
            inside = [a for a in self.answers if t0 <= a[0] < t1]
        sent = sum(b for _, _, b in inside)
        return {
            "seconds": round(t1 - t0, 1),
            "polls": len(inside),
            "polls_per_s": round(len(inside) / (t1 - t0), 2),
            "not_modified": sum(1 for _, s, _ in inside if s == 304),
            "bytes": sent,
            "bytes_per_s": round(sent / (t1 - t0)),
            "largest_answer_bytes": max((b for _, _, b in inside), default=0),
        }

    def first(self) -> int:
        with self._lock:
            return self.answers[0][2] if self.answers else 0

    def close(self) -> None:
        try:
            self.browser.close()
        finally:
            self._pw.stop()


def run(n_runs: int = RUNS, seconds: float = SECONDS) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="dash-traffic-"))
    base = work / "runs"
    live: list[Path] = []
    out: dict[str, Any] = {"runs": n_runs, "live": LIVE}
    try:
        many_runs.make_runs(base, n_runs, work, None)
        out["first_poll_loaded"] = first_poll_loaded(base, work)
        spec = work / "live.toml"
        spec.write_text(LIVE_SPEC.format(items=", ".join(f'"item-{i:04d}"' for i in range(2000))))
        for i in range(LIVE):
            rd = base / f"zlive-{i}"
            runs.start(spec, rd)
            live.append(rd)
        server = many_runs.Server(base, None, work / "dashboard.err")
        try:
            url = f"http://{server.conn.host}:{server.conn.port}/?token={server.token}"
            try:
                page = PageTraffic(url)
            except Exception as exc:  # no chromium or no playwright: said, not measured
                out["error"] = f"the page could not be opened: {exc}"
                return out
            try:
                page.window(WARMUP)
                out["first_answer_bytes"] = page.first()
                out["live_window"] = page.window(seconds)
                for rd in live:
                    runs.runner("stop", "--now", "--run-dir", rd)
                    runs.finish(RunDir(rd))
                live = []
                page.window(3.0)  # the page has seen them stopped and slowed down
                out["idle_window"] = page.window(IDLE_SECONDS)
            finally:
                page.close()
        finally:
            server.close()
    finally:
        for rd in live:
            runs.runner("stop", "--now", "--run-dir", rd)
            runs.finish(RunDir(rd))
        shutil.rmtree(work, ignore_errors=True)
    return out


def table(part: dict[str, Any]) -> str:
    if "error" in part and "live_window" not in part:
        return f"not measured: {part['error']}"
    f, lw, iw = part["first_poll_loaded"], part["live_window"], part["idle_window"]
    return "\n".join(
        [
            "| what | figure |",
            "|---|---|",
            f"| first /api/runs beside {f['hogs']} CPU hogs "
            f"| {f['seconds'] * 1000:.0f} ms ({f['cpu_s'] * 1000:.0f} ms CPU) |",
            f"| the whole answer | {f['answer_bytes']:,} B ({f['answer_gzip_bytes']:,} B gzip) |",
            f"| the page, {part['live']} runs live | {lw['bytes_per_s']:,} B/s, {lw['polls_per_s']} polls/s |",
            f"| the page, nothing live | {iw['bytes_per_s']:,} B/s, {iw['polls_per_s']} polls/s |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dashboard_traffic", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--seconds", type=float, default=SECONDS)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    part = run(args.runs, args.seconds)
    print(table(part))
    if args.json:
        args.json.write_text(json.dumps(part, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
