# ruff: noqa: F811  (the fixtures imported below are parameters of the tests)
"""The dashboard and `runner status` in every state of a run, from one description.

STATES is the table of states and buttons: for each state a run can be in, the buttons
offered and usable (`on`), offered but not usable now (`off`), and every other button
absent. Each state is reached by events on real runs (a journal record, a file, the
model's own say), never by a moment; then the one row drives both sides: the page's
buttons in chromium (Playwright's waiting expectations), and the CLI's `runner status
--json` `actions` and `runner status`'s `actions:` line; the escalations the table
offers during a stop are then used, from the CLI (`runner stop` after a graceful stop)
and the page ("Stop now" after "Stop"). Also: the sentence each way of stopping is said
with, alike on the page and in `runner status`; the focus after each button pressed from
the keyboard; the header's counts adding up to the runs; a run whose directory is
removed while live shows no engine pid."""

import json
import os
import shutil
import signal
import time

import pytest
from playwright.sync_api import expect

# The browser tests' own fixtures (chromium for the module, a fresh context per test).
from test_dashboard_browser import browser, button, page, row  # noqa: F401

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.views import controls

expect.set_options(timeout=30_000)

LABELS = controls.LABELS  # action -> the button's accessible name
BY_LABEL = {label: action for action, label in LABELS.items()}
HELD = {"kill_grace": 0.3, "grace": 120.0}
"""The stop settings of the run whose hard stop is held under way: its engine is frozen
(SIGSTOP) before the dashboard's "Stop", which lodges its request and then waits up to
`grace` for an engine that cannot answer; "Stop now" ends it (a SIGKILL reaches a frozen
process)."""

STATES = {
    "running": {"on": {"Stop", "Stop now", "Stop gracefully", "Pause"}, "off": set()},
    "paused": {"on": {"Stop", "Stop now", "Stop gracefully", "Unpause"}, "off": set()},
    "stopping gracefully": {"on": {"Stop", "Stop now"}, "off": {"Stop gracefully", "Pause"}},
    "stopping (hard)": {"on": {"Stop now"}, "off": {"Stop", "Stop gracefully", "Pause"}},
    "stopped": {"on": {"Resume"}, "off": set()},
    "crashed": {"on": {"Resume"}, "off": set()},
    "completed": {"on": set(), "off": set()},
    "failed": {"on": set(), "off": set()},
    "copy": {"on": set(), "off": set()},
    "gone": {"on": set(), "off": set()},
}
"""The one description: state -> the buttons usable now (`on`) and offered but not
usable now (`off`); every other button is not offered."""
SHOWN = {
    "running": "running",
    "paused": "paused",
    "stopping gracefully": "stopping",
    "stopping (hard)": "stopping",
    "stopped": "stopped",
    "crashed": "crashed",
    "completed": "completed",
    "failed": "failed",
    "copy": "copy",
    "gone": "gone",
}
"""The state's word on the page's badge."""


def open_page(page, dash, name, shown):
    page.goto(dash.url)
    expect(row(page, name).locator("[data-field=status]")).to_have_text(shown)


def expect_buttons(page, name, state):
    """The page offers exactly the table's buttons, usable or not as it says."""
    want = STATES[state]
    for label in LABELS.values():
        b = button(page, name, label)
        if label in want["on"]:
            expect(b).to_be_enabled()
        elif label in want["off"]:
            expect(b).to_be_visible()
            expect(b).to_be_disabled()
            assert b.get_attribute("title"), label  # says why it is off
        else:
            expect(b).to_have_count(0)  # not offered (hidden buttons are out of the accessibility tree)


def cli_actions(runs, rd):
    proc = runs.runner("status", "--json", "--run-dir", rd.path)
    assert proc.returncode in (Exit.OK, Exit.DAMAGED), proc.stderr
    return json.loads(proc.stdout)


def expect_cli(runs, rd, state):
    """`runner status --json`'s actions and `runner status`'s line are the table's `on`."""
    want = [a for a in controls.ACTIONS if LABELS[a] in STATES[state]["on"]]
    info = cli_actions(runs, rd)
    assert info["actions"] == want, (state, info["actions"], info["words"])
    text = runs.runner("status", "--run-dir", rd.path).stdout
    line = next((ln for ln in text.splitlines() if ln.startswith("  actions: ")), None)
    if want:
        assert line == "  actions: " + ", ".join(f"`{controls.COMMANDS[a]}`" for a in want), text
    else:
        assert line is None, text
    return info


def wait_model(runs, rd, timeout=30.0, **want):
    """`runner status --json` once the model says `want` (a state reached by events the
    model reads: a request file, the journal)."""
    deadline = time.monotonic() + timeout
    while True:
        info = cli_actions(runs, rd)
        if all(info.get(k) == v for k, v in want.items()):
            return info
        assert time.monotonic() < deadline, (want, {k: info.get(k) for k in want})
        time.sleep(0.05)


def finished(runs, name, provider):
    rd = runs.start(runs.spec(name=f"{name}.toml", items=["a", "b"], provider=provider), name=name)
    runs.wait_engine_exit(rd)
    return rd


@pytest.mark.parametrize("state", list(STATES))
def test_every_state_offers_the_tables_buttons_on_the_page_and_in_the_cli(
    state, runs, victim, dashboard, page, tmp_path
):
    """Path: views/controls.controls (the rule), read by the dashboard's rows
    (snapshot._fragment) and by status_of's `actions` (runner status): in each state of
    STATES, reached by events on a real run, the page offers exactly the table's
    buttons, usable or not, and `runner status` lists exactly the usable ones. During a
    graceful stop, Stop and Stop now stay usable and `runner stop` escalates it to a hard
    stop; during a hard stop, Stop now stays usable and ends it at once. Ablation
    dashboard-escalation (no stop offered during a stop) turns the two stopping rows red."""
    name = "run"
    if state == "running":
        rd, v = runs.live_trap_term(victim, stop={"kill_grace": 0.3})
    elif state == "paused":
        rd = runs.start(runs.spec(items=[f"i{n}" for n in range(60)], provider=["sh", "-c", "sleep 0.2"]))
        rd.pause_file.touch()
        runs.wait_event(rd, "paused")
    elif state == "stopping gracefully":
        rd = runs.start(runs.spec(items=["a", "b"], provider=["sleep", "3600"], stop={"kill_grace": 0.3}))
        runs.wait_event(rd, "session-start", item="a")
        assert runs.runner("stop", "--graceful", "--run-dir", rd.path).returncode == Exit.OK
        wait_model(runs, rd, stopping_kind="graceful")  # lodged; the phase in flight never ends
    elif state == "stopping (hard)":
        rd, v = runs.live_trap_term(victim, stop=HELD)
        os.kill(identity_file.read(rd.engine_identity).pid, signal.SIGSTOP)
    elif state == "stopped":
        rd, v = runs.live_trap_term(victim, stop={"kill_grace": 0.3})
        assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
        runs.wait_engine_exit(rd)
    elif state == "crashed":
        rd, v = runs.live_trap_term(victim, stop={"kill_grace": 0.3})
        os.kill(identity_file.read(rd.engine_identity).pid, signal.SIGKILL)
        runs.wait_engine_exit(rd)
    elif state == "completed":
        rd = finished(runs, name, ["true"])
    elif state == "failed":
        rd = finished(runs, name, ["false"])
    elif state == "copy":
        original = finished(runs, "original", ["true"])
        shutil.copytree(original.path, tmp_path / name, symlinks=True)
        rd = type(original)(tmp_path / name)
    else:  # gone
        rd = finished(runs, name, ["true"])
    dash = dashboard()
    if state == "stopping (hard)":
        open_page(page, dash, name, "running")
        button(page, name, "Stop").click()  # the dashboard's hard stop: it waits for the frozen engine
        wait_model(runs, rd, stopping_kind="hard")  # its request lodged: the model's own say
        expect(row(page, name).locator("[data-field=status]")).to_have_text("stopping")
    elif state == "gone":
        open_page(page, dash, name, "completed")
        shutil.rmtree(rd.path)
    open_page(page, dash, name, SHOWN[state])
    expect_buttons(page, name, state)
    if state != "gone":
        info = expect_cli(runs, rd, state)
        expect(row(page, name).locator("[data-field=words]")).to_have_attribute("title", info["words"])
    # The escalations the table offers during a stop, used.
    if state == "stopping gracefully":
        assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK  # the CLI accepts it
        stop = runs.wait_event(rd, "run-stop")
        assert stop["mode"] == "hard", stop  # escalated: the phase in flight did not complete
        assert runs.events(rd, "session-end", item="a")[0]["outcome"] == "stopped"
    elif state == "stopping (hard)":
        assert v.alive() and not runs.events(rd, "run-stop")  # the stop is still under way
        button(page, name, "Stop now").click()
        assert v.wait_gone(15)
        stop = runs.wait_event(rd, "run-stop")
        assert (stop["origin"], stop["forced"]) == ("dashboard", True), stop
    elif state in ("running", "paused"):
        button(page, name, "Stop now").click()
        runs.wait_event(rd, "run-stop")
    elif state == "crashed":
        assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK  # what the dead engine left
    if state != "gone":
        runs.wait_engine_exit(rd)
        expect(row(page, name).locator("[data-field=status]")).not_to_have_text("stopping")
        assert not runs.tagged(rd.run_id)


def _frozen_now(runs, rd, gate):
    """`runner stop --now` while the engine is stopped (SIGSTOP): the stopper kills it
    and records the stop itself (origin forced, not a fallback)."""
    os.kill(identity_file.read(rd.engine_identity).pid, signal.SIGSTOP)
    assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK


def _graceful(runs, rd, gate):
    """`runner stop --graceful`, then the phase in flight ends (its gate opens)."""
    assert runs.runner("stop", "--graceful", "--run-dir", rd.path).returncode == Exit.OK
    wait_model(runs, rd, stopping_kind="graceful")
    gate.unlink()


def _killed(runs, rd, gate):
    os.kill(identity_file.read(rd.engine_identity).pid, signal.SIGKILL)


def _stop_dead(runs, rd, gate):
    """`runner stop` of a run whose engine was killed: the stopper records the stop."""
    _killed(runs, rd, gate)
    runs.wait_engine_exit(rd)
    assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK


WAYS = {
    "runner stop --now": (_frozen_now, "stopped with `runner stop --now`"),
    "runner stop of a dead engine": (_stop_dead, "stopped with `runner stop`, after its engine had died"),
    "runner stop --graceful": (_graceful, "stopped gracefully with `runner stop --graceful`"),
    "dashboard Stop gracefully": ("Stop gracefully", "stopped gracefully from the dashboard (Stop gracefully)"),
    "engine killed": (_killed, "crashed: its engine died without recording an end (`runner resume` continues it)"),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_each_way_of_stopping_is_said_in_words_on_the_page_and_in_status(way, runs, dashboard, page, tmp_path):
    """Path: views/words.status/stopped, from the run-stop record (origin, mode, forced,
    fallback, and the stopper's kind: `--now` and a plain stop of a dead engine are both
    `forced`): the page's row (from the journal's last record, snapshot._finished_row)
    and `runner status` (the fold's record, status_of) say the same sentence, never the
    journal's own word ("stopped by forced"). Ablation stop-record-kind (no kind
    journaled) turns the two forced ways red. The run's provider holds its first item's
    session until its gate file is removed."""
    how, sentence = WAYS[way]
    gate = tmp_path / "gate"
    gate.touch()
    provider = runs.sh('while [ -e "$1" ]; do sleep 0.05; done', str(gate))
    rd = runs.start(runs.spec(items=["a", "b"], provider=provider, stop={"kill_grace": 0.3}))
    runs.wait_event(rd, "session-start", item="a")
    dash = dashboard()
    open_page(page, dash, "run", "running")
    if isinstance(how, str):
        button(page, "run", how).click()
        wait_model(runs, rd, stopping_kind="graceful")
        gate.unlink()
    else:
        how(runs, rd, gate)
    runs.wait_engine_exit(rd)
    expect(row(page, "run").locator("[data-field=words]")).to_have_text(sentence)
    text = runs.runner("status", "--run-dir", rd.path).stdout
    assert text.startswith(f"run {rd.run_id}: {sentence} (attempt 1, engine not running)"), text
    assert "forced" not in row(page, "run").text_content()
    if way == "engine killed":  # what the dead engine left (its cgroup, its provider): a stop ends it
        gate.unlink()
        assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
    assert not runs.tagged(rd.run_id)


def test_the_focus_follows_each_button_pressed_from_the_keyboard(runs, dashboard, page):
    """Path: page.js moveFocus: a keyboard user presses each button with Enter; when it
    goes away or turns off, the focus moves to the control that takes its place, never
    to the page's body: Pause -> Unpause -> Pause, Stop gracefully -> (Stop) -> Resume once
    stopped, Resume -> Stop once running again, Stop now -> Resume."""
    rd = runs.start(runs.spec(items=[f"i{n}" for n in range(200)], provider=["sh", "-c", "sleep 0.2"]))
    runs.wait_event(rd, "session-start")
    dash = dashboard()
    open_page(page, dash, "run", "running")

    def press(label):
        b = button(page, "run", label)
        b.focus()
        expect(b).to_be_focused()
        page.keyboard.press("Enter")

    press("Pause")
    runs.wait_event(rd, "paused")
    expect(button(page, "run", "Unpause")).to_be_focused()
    press("Unpause")
    runs.wait_event(rd, "unpaused")
    expect(button(page, "run", "Pause")).to_be_focused()
    press("Stop gracefully")
    runs.wait_event(rd, "run-stop")
    runs.wait_engine_exit(rd)
    expect(button(page, "run", "Resume")).to_be_focused()
    press("Resume")
    runs.wait_event(rd, "run-start", attempt=2)
    expect(button(page, "run", "Stop")).to_be_focused()
    press("Stop now")
    runs.wait_engine_exit(rd)
    expect(button(page, "run", "Resume")).to_be_focused()  # parked on the status until Resume came
    assert page.evaluate("document.activeElement !== document.body")
    assert not runs.tagged(rd.run_id)


def test_the_header_counts_every_run_by_its_state_and_a_vanished_run_shows_no_pid(
    runs, victim, dashboard, page, tmp_path
):
    """Path: page.js renderSummary: every run counted once, under the state it is shown
    in (error and gone rows included), the counts adding up to the runs; and
    snapshot._gone_row: a live run whose directory is removed (its engine stops it:
    origin vanished) stays on the page as `gone`, with no engine pid."""
    finished(runs, "c-done", ["true"])
    finished(runs, "f-failed", ["false"])
    stopped, _ = runs.live_trap_term(victim, stop={"kill_grace": 0.3}, name="s-stopped")
    assert runs.runner("stop", "--run-dir", stopped.path).returncode == Exit.OK
    (tmp_path / "l-link").symlink_to(stopped.path)  # an error row: a symlink is never a run
    doomed, v = runs.live_trap_term(victim, stop={"kill_grace": 0.3}, name="v-vanished")
    engine = identity_file.read(doomed.engine_identity)
    live, _ = runs.live_trap_term(victim, stop={"kill_grace": 0.3}, name="z-live")
    dash = dashboard()
    open_page(page, dash, "v-vanished", "running")
    expect(row(page, "v-vanished").locator("[data-field=words]")).to_contain_text(f"engine pid {engine.pid}")
    shutil.rmtree(doomed.path)
    assert v.wait_gone(30)  # its engine saw the directory gone and stopped the run
    expect(row(page, "v-vanished").locator("[data-field=status]")).to_have_text("gone")
    assert "engine pid" not in row(page, "v-vanished").text_content()
    summary = page.locator("#summary")
    expect(summary.locator('button[data-filter="all"]')).to_have_text("6 runs")
    counts = {}
    for b in summary.locator("button.filter").all():
        f, text = b.get_attribute("data-filter"), b.text_content()
        counts[f] = int(text.split()[0])
    total = counts.pop("all")
    assert counts == {"running": 1, "stopped": 1, "failed": 1, "completed": 1, "error": 1, "gone": 1}, counts
    assert sum(counts.values()) == total == page.locator("section[data-run-id]").count()
    summary.locator('button[data-filter="gone"]').click()
    expect(page.locator("section[data-run-id]:visible")).to_have_count(1)
    assert runs.runner("stop", "--now", "--run-dir", live.path).returncode == Exit.OK
    runs.wait_engine_exit(live)
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{engine.pid}") and time.monotonic() < deadline:
        time.sleep(0.05)  # the vanished run's engine exits once it has stopped it
    assert not runs.tagged(doomed.run_id)


def test_a_ticking_clock_never_moves_a_button(runs, victim, dashboard, page):
    """Path: page.css's run line (fixed columns before the buttons, at 900 px and wider):
    while the line's clocks tick (the phase's, the age, "stopping for"), no button moves
    under the pointer. A click aimed at "Stop gracefully" once landed on "Stop" as the
    phase clock widened the text before it."""
    rd, _ = runs.live_trap_term(victim, stop={"kill_grace": 0.3})
    try:
        dash = dashboard()
        open_page(page, dash, "run", "running")
        boxes = (
            "() => [...document.querySelectorAll('section[data-run-id=run] .head button')].map((b) => {"
            " const r = b.getBoundingClientRect(); return [b.dataset.action || 'toggle', r.x, r.y, r.width]; })"
        )
        before = page.evaluate(boxes)
        first = row(page, "run").locator("[data-field=doing]").text_content()
        # The phase clock goes from "9.9 s" to "10.0 s" and on: wait until it has ticked
        # past a change of its text's length (the width that used to push the buttons).
        page.wait_for_function(
            "(t) => { const d = document.querySelector('section[data-run-id=run] [data-field=doing]').textContent;"
            " return d !== t && d.length !== t.length; }",
            arg=first,
            timeout=60_000,
        )
        assert page.evaluate(boxes) == before
    finally:
        assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
        runs.wait_engine_exit(rd)
