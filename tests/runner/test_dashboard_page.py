# ruff: noqa: F811  (the fixtures imported above are parameters of the tests)
"""What the dashboard's page shows, in a real browser (Playwright driving Debian's
chromium) over real runs: the "stopping" state from the click until the run has
stopped, a held PAUSE on the item, items in queue order, a hostile item name (5,000
characters, control characters, a right-to-left override) that neither widens the card
nor reorders the text after it, failed items in red on the progress bar, and
300 runs (40 live) as compact lines, counted and filtered by state and by name, each
card opened on demand."""

import http.client
import json
import os
import signal
import subprocess
import time

import pytest

# The browser tests' own fixtures (chromium for the module, a fresh context per test).
from dashboard_browser import status_is
from test_dashboard_browser import browser, button, open_dashboard, page, row  # noqa: F401

from runner.dashboard.snapshot import COMPACT_AFTER
from runner.exitcodes import Exit
from runner.files import identity_file

STOPPING_SHOWN = 0.3
"""The page shows "stopping" (badge, buttons disabled) this soon after the click."""
RED = "rgb(185, 28, 28)"  # page.css --bad


def api_runs(dash):
    host, port = dash.origin.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/api/runs", headers={"X-Runner-Token": dash.token})
        return {r["name"]: r for r in json.loads(conn.getresponse().read())["runs"]}
    finally:
        conn.close()


def statuses_recorder(page, name):
    """Record every text the run's status badge takes from now on (window.__statuses)."""
    page.evaluate(
        """(name) => {
          const s = document.querySelector(`section[data-run-id="${name}"] [data-field=status]`);
          window.__statuses = [s.textContent];
          new MutationObserver(() => window.__statuses.push(s.textContent))
            .observe(s, { childList: true, characterData: true, subtree: true });
        }""",
        name,
    )


def deduped(seq):
    return [x for i, x in enumerate(seq) if i == 0 or seq[i - 1] != x]


def test_stopping_shows_within_300_ms_of_the_click_until_stopped(runs, victim, dashboard, page, request):
    """Path: page.js act() puts the run in "stopping" at the click (badge, buttons but
    "Stop now" disabled, a counter), and the server's `stopping` (snapshot._stopping:
    the dashboard's stop still at work) keeps it there until the run has stopped. The
    provider traps SIGTERM and the stop is held in its kill grace (runs.HELD_STOP) until
    the test has seen the stopping state everywhere, then the test ends the provider: the
    badge goes running -> stopping -> stopped, never back to running. Ablation
    dashboard-stopping-on-click (only the server's flag, a poll later) turns it red: the
    state must be there at the click itself, before any answer."""
    rd, v = runs.live_trap_term(victim, stop=runs.HELD_STOP)
    request.addfinalizer(v.kill)  # first at teardown: a red test's held stop ends at once
    dash = dashboard()
    open_dashboard(page, dash, "run")
    button(page, "run", "Stop").wait_for(state="visible")
    statuses_recorder(page, "run")
    at_click, shown_ms = page.evaluate(
        """async (name) => {
          const sec = document.querySelector(`section[data-run-id="${name}"]`);
          const b = sec.querySelector('button[data-action="stop"]');
          const s = sec.querySelector("[data-field=status]");
          const t0 = performance.now();
          b.click();
          const atClick = s.textContent === "stopping" && b.disabled;
          while (!(s.textContent === "stopping" && b.disabled)) {
            if (performance.now() - t0 > 5000) return [atClick, null];
            await new Promise((r) => setTimeout(r, 5));
          }
          return [atClick, performance.now() - t0];
        }""",
        "run",
    )
    assert at_click, "the click itself did not show the stopping state"
    assert shown_ms is not None and shown_ms < STOPPING_SHOWN * 1000, shown_ms
    section = row(page, "run")
    for label in ("Stop", "Stop gracefully", "Pause"):
        assert button(page, "run", label).is_disabled(), label
    assert button(page, "run", "Stop now").is_enabled()  # the escalation stays offered
    page.locator('#summary button[data-filter="stopping"]').get_by_text("1 stopping").wait_for()
    first = section.locator(".head .muted").text_content()
    assert "stopping for" in first, first
    time.sleep(0.5)
    assert section.locator(".head .muted").text_content() != first  # the counter ticks
    assert api_runs(dash)["run"]["stopping"] is True  # the server says so too
    v.kill()  # seen stopping everywhere: the kill grace need not be sat out
    runs.wait_event(rd, "run-stop", timeout=30)
    section.locator('[data-field=status]:text-is("stopped")').wait_for(timeout=30_000)
    seen = deduped(page.evaluate("window.__statuses"))
    assert seen == ["running", "stopping", "stopped"], seen
    runs.wait_engine_exit(rd)
    assert not runs.tagged(rd.run_id)


def test_a_held_pause_shows_paused_on_the_item(runs, dashboard, page):
    """Path: snapshot._run_row passes status_of's `pause_held` on; page.js shows the
    held item's chip as "paused" with no clock, and the badge "paused". Unpaused, the
    run goes on and completes. The first call is held until the PAUSE file is there
    (runs.gated), so the click lands while the run is running however slow the machine
    is."""
    items = [f"i{n}" for n in range(8)]
    gate = runs.tmp_path / "gate"
    rd = runs.start(runs.spec(items=items, provider=runs.gated(gate)))
    dash = dashboard()
    open_dashboard(page, dash, "run")
    button(page, "run", "Pause").click()
    runs.wait_file(rd.pause_file)
    gate.touch()
    held = runs.wait_event(rd, "paused")
    item = held["item"]
    section = row(page, "run")
    chip = section.locator('.items li[data-status="paused"]')
    chip.wait_for(timeout=10_000)
    assert chip.count() == 1 and chip.locator(".name").text_content() == item
    text = chip.text_content()
    assert text == f"{item}: paused (1 att.)", text  # no clock while held
    assert section.locator(".badge.paused").text_content() == "paused"
    assert api_runs(dash)["run"]["pause_held"] is True
    time.sleep(0.6)
    assert chip.text_content() == text
    assert "(held at the pause)" in section.locator('[data-field="now"]').text_content()
    button(page, "run", "Unpause").click()
    runs.wait_event(rd, "unpaused")
    section.locator('[data-field=status]:text-is("completed")').wait_for(timeout=60_000)
    assert api_runs(dash)["run"]["pause_held"] is False
    runs.wait_engine_exit(rd)


def test_items_are_in_queue_order_and_pending_ones_show_no_time(runs, victim, dashboard, page):
    """Path: the items as the state lists them (the spec's order, not sorted) and
    page.js renderItems: a pending item shows no duration ("(0.0 s)" before); the
    running item's clock ticks on the page between bodies (sinceRead)."""
    prepared = victim.prepare("trap-term")
    order = ["zeta", "alpha", "mid", "beta"]
    spec = runs.spec(items=order, provider=prepared.argv, stop={"kill_grace": 0.3})
    rd = runs.start(spec)
    runs.wait_event(rd, "phase-start", phase="session")
    prepared.adopt(timeout=10)
    dash = dashboard()
    open_dashboard(page, dash, "run")
    chips = row(page, "run").locator(".items li")
    page.wait_for_function(
        "() => document.querySelector('section[data-run-id=run] .items li[data-status=running]') !== null"
    )
    assert chips.locator(".name").all_text_contents() == order
    texts = chips.all_text_contents()
    assert texts[0].startswith("zeta: running (1 att., ") and texts[0].endswith(" s)"), texts
    assert texts[1:] == ["alpha: pending", "mid: pending", "beta: pending"], texts
    time.sleep(0.6)  # polls answered 304 meanwhile: the page ticks the running item's clock
    assert chips.first.text_content() != texts[0]
    assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    runs.wait_engine_exit(rd)


@pytest.mark.parametrize("width", [1280, 420])
def test_a_hostile_item_name_neither_widens_the_card_nor_reorders_the_pid(runs, victim, dashboard, page, width):
    """Path: page.js escaped() (control characters and U+202A-U+202E, U+2066-U+2069 as
    escapes), `unicode-bidi: isolate` on user text, and the clipped chip (its tooltip
    holds the whole name): an item named with ESC, BEL, CR/LF and a right-to-left
    override, and one of 5,000 characters. The card is no wider than the window, the
    override never reaches the page raw, and the child's pid after it reads as written,
    its digits left to right; in a wide window and a phone's. Ablation
    dashboard-bidi-escape turns it red."""
    page.set_viewport_size({"width": width, "height": 900})
    prepared = victim.prepare("trap-term")
    evil = "evil\u202eabc\x1b[31m\x07\r\nx"
    long_name = "y" * 5000
    spec = runs.spec(items=[evil, long_name], provider=prepared.argv, stop={"kill_grace": 0.3})
    rd = runs.start(spec)
    runs.wait_event(rd, "phase-start", phase="session")
    v = prepared.adopt(timeout=10)
    dash = dashboard()
    open_dashboard(page, dash, "run")
    section = row(page, "run")
    now = section.locator('[data-field="now"]')
    now.get_by_text(str(v.pid), exact=True).wait_for()
    text = now.text_content()
    assert "\u202e" not in text and "\\u202e" in text, text
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text), text
    assert "\\x1b" in text and "\\x07" in text and "\\r\\n" in text, text
    # The long name's chip and the card, read in one go once the list is laid out: a poll
    # may redraw the list at any moment, and a node read across two calls may be gone.
    laid_out = page.wait_for_function(
        """() => {
          const sec = document.querySelector('section[data-run-id=run]');
          const li = sec && sec.querySelectorAll('.items li')[1];
          const n = li && li.querySelector('.name');
          if (!n || n.clientWidth === 0) return null;
          return { scroll: n.scrollWidth, client: n.clientWidth, overflow: getComputedStyle(n).textOverflow,
                   title: li.getAttribute('title'), win: window.innerWidth,
                   doc: document.documentElement.scrollWidth, card: sec.getBoundingClientRect().width };
        }"""
    ).json_value()
    assert laid_out["doc"] <= laid_out["win"] and laid_out["card"] <= laid_out["win"], laid_out
    assert laid_out["client"] < laid_out["scroll"] and laid_out["client"] < laid_out["win"], laid_out  # clipped
    assert laid_out["overflow"] == "ellipsis", laid_out
    assert laid_out["title"] == f"{long_name}: pending", laid_out["title"][-40:]
    # The pid's digits, as laid out: each one right of the one before it.
    lefts = now.evaluate(
        """(n, pid) => {
          const walker = document.createTreeWalker(n, NodeFilter.SHOW_TEXT);
          let node;
          while ((node = walker.nextNode()) && node.data !== pid) {}
          if (!node) return null;
          return [...pid].map((_, i) => {
            const r = document.createRange();
            r.setStart(node, i);
            r.setEnd(node, i + 1);
            return r.getBoundingClientRect().left;
          });
        }""",
        str(v.pid),
    )
    assert lefts is not None and lefts == sorted(lefts) and len(set(lefts)) == len(lefts), lefts
    assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    runs.wait_engine_exit(rd)


def test_failed_items_are_red_on_the_progress_bar(runs, dashboard, page):
    """Path: page.js update(): the bar has a done (green) and a failed (red) segment;
    a run whose items all failed shows a bar all red, no green. Ablation
    dashboard-failed-bar turns it red."""
    rd = runs.start(runs.spec(items=["a", "b", "c"], provider=["false"]))
    runs.wait_engine_exit(rd)
    dash = dashboard()
    open_dashboard(page, dash, "run", status="failed")
    section = row(page, "run")
    assert section.locator(".items").is_hidden()  # a finished run is collapsed
    section.get_by_role("button", name="details").click()
    bar = section.locator(".bar")
    bar.wait_for()
    got = bar.evaluate(
        """(b) => {
          const done = b.querySelector(".done"), failed = b.querySelector(".failed");
          return { bar: b.getBoundingClientRect().width, done: done.getBoundingClientRect().width,
                   failed: failed.getBoundingClientRect().width, red: getComputedStyle(failed).backgroundColor };
        }"""
    )
    assert got["done"] == 0 and abs(got["failed"] - got["bar"]) < 1 and got["red"] == RED, got
    assert section.locator(".progress .muted").text_content() == "0/3 items done, 3 failed"


def _start_many(runs, specs_and_names, *, detach=False):
    """`runner run` for each (spec, name), a few at a time: in the foreground (the run
    ends), or `--detach` (it returns once the engine is up)."""
    batch = []
    for spec, name in specs_and_names:
        run_dir = runs.tmp_path / name
        runs.started.append(run_dir)
        argv = [*runs.RUNNER, "run", str(spec), "--run-dir", str(run_dir), *(["--detach"] if detach else [])]
        batch.append(
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        if len(batch) == 6:
            for p in batch:
                assert p.wait(timeout=120) in (Exit.OK, Exit.FAILED)
            batch = []
    for p in batch:
        assert p.wait(timeout=120) in (Exit.OK, Exit.FAILED)


FULLY_SHOWN = """() => [...document.querySelectorAll('section[data-run-id]')].filter((s) => {
  const r = s.getBoundingClientRect();
  return !s.hidden && r.top >= 0 && r.bottom <= window.innerHeight;
}).length"""
VISIBLE = "() => [...document.querySelectorAll('section[data-run-id]')].filter((s) => !s.hidden)"


def test_past_compact_after_runs_each_is_one_line_and_its_card_opens_on_demand(runs, dashboard, page):
    """Path: page.js main.compact at its threshold, COMPACT_AFTER + 1 runs (the 300-run test
    below is the acceptance at scale): the page is compact from its first render, every run
    one line, a live run's card (its items and journal) shown only once asked for. Ablation:
    dashboard-compact (`compact = false`) leaves every run a full card."""
    threshold = COMPACT_AFTER  # what /api/runs serves the page as compact_after
    done = runs.spec(name="done.toml", items=["a"], provider=["true"])
    _start_many(runs, [(done, f"c-{n}") for n in range(threshold)])
    sleeping = runs.spec(name="live.toml", items=["a", "b"], provider=["sleep", "3600"], stop={"kill_grace": 0.3})
    _start_many(runs, [(sleeping, "live")], detach=True)
    live = runs.RunDir(runs.tmp_path / "live")
    try:
        runs.wait_event(live, "session-start", item="a")
        page.goto(dashboard().url)
        page.wait_for_function(
            f"() => document.querySelectorAll('section[data-run-id]').length === {threshold + 1}", polling=50
        )
        assert page.evaluate("document.getElementById('runs').classList.contains('compact')")
        heights = page.evaluate(
            "() => [...document.querySelectorAll('section[data-run-id]')].map((s) => s.getBoundingClientRect().height)"
        )
        assert max(heights) <= 48, heights
        line = row(page, "live")
        assert line.locator(".items").is_hidden()
        line.get_by_role("button", name="details").click()
        line.locator('.items li[data-status="running"]').wait_for()
    finally:
        runs.runner("stop", "--now", "--run-dir", live.path, timeout=120)
        runs.wait_engine_exit(live)


@pytest.mark.timeout(900)  # 300 real runs to make: minutes on a busy 2-core machine
def test_three_hundred_runs_forty_live_are_compact_rows_counted_filtered_and_opened_on_demand(
    runs, victim, dashboard, page
):
    """Path: page.js past COMPACT_AFTER runs (main.compact): one line per run (name, state,
    items done of all, current item and phase, age, the buttons), every card closed and
    opened on demand (its details asked for by ?open=, snapshot._detail); the header's
    counts by state add up to the 300 runs and filter them; the name filter. 300 real
    runs: 40 live (a provider that sleeps), one crashed (its engine SIGKILLed), three
    stopped, five failed, the rest completed. A 1280 x 1000 window shows at least 20
    runs whole, nothing wider than it."""
    done = runs.spec(name="done.toml", items=["a"], provider=["true"])
    failed = runs.spec(name="failed.toml", items=["a"], provider=["false"])
    sleeping = runs.spec(name="live.toml", items=["a", "b"], provider=["sleep", "3600"], stop={"kill_grace": 0.3})
    finished = [(done, f"c-{n:03d}") for n in range(251)] + [(failed, f"f-{n}") for n in range(5)]
    _start_many(runs, finished)
    stopped = []
    for n in range(3):
        rd, _ = runs.live_trap_term(victim, stop={"kill_grace": 0.3}, name=f"s-{n}")
        stopped.append(rd)
    for rd in stopped:
        assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    crashed, _ = runs.live_trap_term(victim, stop={"kill_grace": 0.3}, name="x-crashed")
    os.kill(identity_file.read(crashed.engine_identity).pid, signal.SIGKILL)
    runs.wait_engine_exit(crashed)
    _start_many(runs, [(sleeping, f"live-{n:02d}") for n in range(40)], detach=True)
    live = [runs.tmp_path / f"live-{n:02d}" for n in range(40)]
    try:
        for path in live:
            runs.wait_event(runs.RunDir(path), "session-start", item="a")
        page.set_viewport_size({"width": 1280, "height": 1000})
        dash = dashboard()
        page.goto(dash.url)
        page.locator("section[data-run-id]").first.wait_for()  # one render makes every run's line
        # Compact from the first render on (asserted before waiting on the 300: a page of
        # 300 full cards is slow enough to reach the test's time limit, not its assert).
        assert page.evaluate("document.getElementById('runs').classList.contains('compact')")
        page.wait_for_function("() => document.querySelectorAll('section[data-run-id]').length === 300", polling=50)
        summary = page.locator("#summary")
        want = {"all": "300 runs", "running": "40 running", "stopped": "3 stopped", "failed": "5 failed"}
        want |= {"crashed": "1 crashed", "completed": "251 completed"}
        for f, text in want.items():
            summary.locator(f'button[data-filter="{f}"]').get_by_text(text, exact=True).wait_for(timeout=60_000)
        counts = [int(b.text_content().split()[0]) for b in summary.locator("button.filter").all()]
        assert sum(counts[1:]) == counts[0] == 300, counts  # every run counted once
        assert page.evaluate(FULLY_SHOWN) >= 20
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        heights = page.evaluate(
            "() => [...document.querySelectorAll('section[data-run-id]')].map((s) => s.getBoundingClientRect().height)"
        )
        assert max(heights) <= 48, max(heights)  # one line each: no card open by default
        line = row(page, "live-07")
        line.locator("[data-field=doing]").get_by_text("item a · session", exact=False).wait_for()
        assert line.locator(".items").is_hidden()
        line.get_by_role("button", name="details").click()  # the card, on demand
        line.locator('.items li[data-status="running"]').wait_for()
        line.locator(".journal li").first.wait_for()
        line.get_by_role("button", name="details").click()
        line.locator(".items").wait_for(state="hidden")
        for f, n in (("failed", 5), ("crashed", 1), ("running", 40), ("stopped", 3)):
            summary.locator(f'button[data-filter="{f}"]').click()
            page.wait_for_function(f"() => ({VISIBLE})().length === {n}")
            shown = page.evaluate(f"({VISIBLE})().map((s) => s.dataset.status)")
            assert shown == [f] * n, (f, shown)
        summary.locator('button[data-filter="all"]').click()
        page.get_by_label("filter runs by name").fill("live-1")
        page.wait_for_function(f"() => ({VISIBLE})().length === 10")
        assert sorted(page.evaluate(f"({VISIBLE})().map((s) => s.dataset.runId)")) == [f"live-1{n}" for n in range(10)]
        row(page, "live-12").get_by_role("button", name="Stop now", exact=True).click()
        row(page, "live-12").locator('[data-field=status]:text-is("stopped")').wait_for(timeout=60_000)
    finally:
        # Every live run, and the crashed run's provider (stop --all stops what a dead engine left).
        runs.runner("stop", "--all", "--now", "--runs-dir", runs.tmp_path, timeout=300)
        for path in [*live, crashed.path]:
            runs.wait_engine_exit(runs.RunDir(path))


def test_after_its_first_answer_the_page_is_sent_what_changed_and_a_live_row_reads_whole(runs, dashboard, page):
    """Path: page.js's poll with its cursor (?since=) and render's merge of a partial
    answer, over snapshot.Snapshots.answer (issue 42): the page's first answer is whole,
    every later one carries only what changed (a run that comes: its row and the names);
    the page shows the run that came, newest first, and keeps the others. At 1280 px a
    live row's item and phase are shown whole (page.css: the line's flexible column,
    where the sentence gives way first) and end before the buttons. Ablation
    dashboard-page-cursor (the page never sends its cursor: every answer whole) turns it
    red."""
    from playwright.sync_api import expect

    for name in ("done-1", "done-2"):
        rd = runs.start(runs.spec(name=f"{name}.toml", provider=["true"]), name=name)
        runs.wait_engine_exit(rd)
    live = runs.start(
        runs.spec(name="live.toml", items=["alpha"], provider=["sleep", "3600"], stop={"kill_grace": 0.3}), name="live"
    )
    runs.wait_event(live, "phase-start", phase="session")
    try:
        dash = dashboard()
        answers = []
        page.on("response", lambda r: answers.append(r) if "/api/runs" in r.url and r.request.method == "GET" else None)
        open_dashboard(page, dash, "live", "running")
        doing = row(page, "live").locator("[data-field=doing]")
        expect(doing).to_contain_text("item alpha · session")
        clipped = doing.evaluate("(d) => d.scrollWidth > d.clientWidth")
        ends, buttons = doing.evaluate(
            "(d) => [d.getBoundingClientRect().right,"
            " d.closest('.head').querySelector('.buttons').getBoundingClientRect().left]"
        )
        assert not clipped and ends <= buttons, (doing.text_content(), ends, buttons)
        late = runs.start(runs.spec(name="late.toml", provider=["true"]), name="late")
        runs.wait_engine_exit(late)
        status_is(page, "late", "completed")
        order = page.evaluate("() => [...document.querySelectorAll('section.run')].map((s) => s.dataset.runId)")
        assert order == ["live", "late", "done-2", "done-1"], order
        bodies = [(a.url, a.json()) for a in list(answers) if a.status == 200]
        assert bodies[0][1]["full"] is True and "since=" not in bodies[0][0], bodies[0]
        assert all(b["full"] is False and "since=" in url for url, b in bodies[1:]), [u for u, _ in bodies]
        came = [b for _, b in bodies if "names" in b]
        assert came and {r["name"] for r in came[-1]["runs"]} <= {"late", "live"}, came
    finally:
        assert runs.runner("stop", "--now", "--run-dir", live.path).returncode == Exit.OK
        runs.wait_engine_exit(live)


def test_a_card_closed_and_opened_again_shows_its_details_again(runs, dashboard, page):
    """Path: page.js's layout and poll: a closed card drops its details, and opened
    again it asks for them anew (`new=`), since the server sends an open card's details
    after the page's cursor only when they changed (twice: the card's journal each time
    it is open, none while it is closed)."""
    from playwright.sync_api import expect

    for name in ("done-1", "done-2"):
        rd = runs.start(runs.spec(name=f"{name}.toml", provider=["true"]), name=name)
        runs.wait_engine_exit(rd)
    dash = dashboard()
    open_dashboard(page, dash, "done-1", "completed")
    toggle = row(page, "done-1").locator("button.toggle")
    journal = row(page, "done-1").locator("ol.journal li")
    for _ in range(2):
        toggle.click()
        expect(journal.last).to_contain_text("complete")
        toggle.click()
        expect(journal).to_have_count(0)
