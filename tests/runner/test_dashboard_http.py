"""`runner dashboard` over plain HTTP: the URL line, the token and Origin checks, GET
never changing anything, run names that cannot leave the base directory, and damaged or
vanishing runs shown as error rows while the server goes on. Every run is a real one
(`runner run --detach`); the server is a real `python -m runner dashboard` process."""

import gzip
import http.client
import json
import os
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

from runner import defaults
from runner.exitcodes import Exit
from runner.files import identity_file

KILL_GRACE = 0.3


def request(dash, method, path, headers=None, body=None):
    host, port = dash.origin.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def runs_json(dash):
    status, _, body = request(dash, "GET", "/api/runs", {"X-Runner-Token": dash.token})
    assert status == 200, body
    return {r["name"]: r for r in json.loads(body)["runs"]}


def details_json(dash, *names):
    """The details of the runs named, as the page asks for its open cards (?open=)."""
    status, _, body = request(dash, "GET", f"/api/runs?open={','.join(names)}", {"X-Runner-Token": dash.token})
    assert status == 200, body
    return json.loads(body)["details"]


def post(dash, name, action, **headers):
    return request(dash, "POST", f"/api/runs/{name}/{action}", headers)[0]


def wait_row(dash, name, timeout=30.0, **want):
    deadline = time.monotonic() + timeout
    while True:
        row = runs_json(dash).get(name)
        if row is not None and all(row.get(k) == v for k, v in want.items()):
            return row
        assert time.monotonic() < deadline, f"row {name} never had {want}: {row}"
        time.sleep(0.05)


def wait_action(dash, name, state, timeout=30.0):
    """The run's last action once it is in `state` ("running", "done", "failed")."""
    deadline = time.monotonic() + timeout
    while True:
        action = runs_json(dash)[name].get("action")
        if action is not None and action["state"] == state:
            return action
        assert time.monotonic() < deadline, f"{name}: action never {state}: {action}"
        time.sleep(0.05)


def finished_run(runs, name="done"):
    rd = runs.start(runs.spec(name=f"{name}.toml", provider=["true"]), name=name)
    runs.wait_engine_exit(rd)
    return rd


def test_first_line_names_a_loopback_url_with_a_token(runs, dashboard):
    """Path: serve() prints `dashboard: http://HOST:PORT/?token=TOKEN` first (flushed),
    on 127.0.0.1 by default; the page and its assets need no token and carry a strict
    Content-Security-Policy; the data needs the token; SIGTERM ends it with OK."""
    finished_run(runs)
    dash = dashboard()
    assert dash.url.startswith("http://127.0.0.1:") and len(dash.token) >= 24
    status, headers, body = request(dash, "GET", "/")
    assert status == 200 and b"runner dashboard" in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert request(dash, "GET", "/static/page.js")[0] == 200
    assert request(dash, "GET", "/api/runs")[0] == 403
    assert request(dash, "GET", "/api/runs", {"X-Runner-Token": "x" + dash.token})[0] == 403
    row = runs_json(dash)["done"]
    assert row["status"] == "completed" and row["live"] is False and row["done"] == row["total"] == 1
    assert row["buttons"] == {}  # a completed run offers nothing
    assert any("run-complete" in line for line in details_json(dash, "done")["done"]["journal"])
    dash.proc.terminate()  # SIGTERM: the server closes and exits OK
    assert dash.proc.wait(timeout=30) == Exit.OK
    assert dash.stderr() == ""


def test_refused_posts_and_gets_leave_a_live_run_running(runs, victim, dashboard):
    """Path: security.Guard: a POST without the token, with a wrong one, or with a foreign
    Origin (token or not) is answered 403 and reaches no stop code; a GET on an action's
    URL changes nothing. The run keeps running: no stop request, no run-stop, its
    provider alive. Then a POST from the page's own origin with the token is accepted,
    the server keeps answering while that stop runs (a thread of its own: the trapping
    provider holds it in its kill grace until the test ends the provider), and the stop
    journals its origin as `dashboard`."""
    rd, v = runs.live_trap_term(victim, stop=runs.HELD_STOP)
    try:
        dash = dashboard()
        good = {"X-Runner-Token": dash.token}
        for action in ("stop", "stop-now", "stop-graceful", "pause"):
            assert post(dash, "run", action) == 403
            assert post(dash, "run", action, **{"X-Runner-Token": dash.token[:-1]}) == 403
            assert post(dash, "run", action, Origin="http://evil.example", **good) == 403
            assert post(dash, "run", action, Origin="http://localhost.evil.example:80", **good) == 403
            assert post(dash, "run", action, Origin="null", **good) == 403
            assert post(dash, "run", action, **{"Sec-Fetch-Site": "cross-site"}, **good) == 403
            assert request(dash, "GET", f"/api/runs/run/{action}", good)[0] == 404
        time.sleep(0.5)  # the engine's watchdog polls every 0.1 s: a lodged request would be seen
        assert v.alive() and rd.is_live()
        assert not rd.stop_request.exists() and not rd.pause_file.exists()
        assert not runs.events(rd, "run-stop")
        assert wait_row(dash, "run", status="running")["buttons"]["stop"] == {"enabled": True, "why": None}
        assert post(dash, "run", "stop", Origin=dash.origin, **good) == 202
        assert post(dash, "run", "stop", Origin=dash.origin, **good) == 409  # the same stop is still running
        assert wait_action(dash, "run", "running")["action"] == "stop"  # answered while the stop runs
        v.kill()  # the stop has been seen in flight: its kill grace need not be sat out
        runs.wait_event(rd, "run-stop", origin="dashboard", mode="hard", forced=False)
        runs.wait_engine_exit(rd)
        row = wait_row(dash, "run", status="stopped")
        assert row["words"] == "stopped from the dashboard"
        assert row["buttons"] == {"resume": {"enabled": True, "why": None}}
        action = wait_action(dash, "run", "done")
        assert action["action"] == "stop" and action["code"] == Exit.OK and "from the dashboard" in action["message"]
    finally:
        v.kill()  # a red test's held stop ends at once (the dashboard's teardown waits for it)


def test_run_names_never_leave_the_base_directory(runs, victim, dashboard, tmp_path):
    """Path: runs.Base.run: a name must have a run id's shape and be a real directory
    holding a spec: '..', encoded slashes, a symlink to a live run (refused, never
    followed) and unknown names all get 404 and signal nothing. The symlink is listed
    as an error row."""
    rd, v = runs.live_trap_term(victim, stop={"kill_grace": KILL_GRACE})
    base = tmp_path / "base"
    base.mkdir()
    (base / "alias").symlink_to(rd.path)
    dash = dashboard(base)
    good = {"X-Runner-Token": dash.token}
    for name in ("alias", "..", "%2e%2e", "..%2Frun", "%2E%2E%2Frun", "nope", ".hidden", "a%20b", "%00"):
        assert post(dash, name, "stop-now", **good) == 404, name
    assert post(dash, "alias", "unknown-action", **good) == 404
    listed = runs_json(dash)
    assert listed["alias"]["error"] == "a symlink (never followed)"
    assert listed["alias"]["buttons"] == {} and listed["alias"]["status"] == "error"
    time.sleep(0.3)
    assert v.alive() and not rd.stop_request.exists() and not runs.events(rd, "run-stop")
    assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK


def test_damaged_and_removed_runs_are_error_rows(runs, dashboard, tmp_path):
    """Path: snapshot.Snapshots: a run whose state.json is a FIFO or garbage shows what
    is damaged (status_of's own report), a run removed while shown stays as an error
    row, and the server keeps answering every poll."""
    good = finished_run(runs, "good")
    fifo = finished_run(runs, "fifo")
    garbage = finished_run(runs, "garbage")
    gone = finished_run(runs, "gone")
    fifo.state.unlink()
    os.mkfifo(fifo.state)
    garbage.state.write_bytes(b"\xff{{{" * 100)
    dash = dashboard()
    rows = runs_json(dash)
    assert rows["good"]["status"] == "completed" and rows["good"]["damaged"] == 0
    cards = details_json(dash, "good", "fifo", "garbage")
    assert cards["good"]["damaged"] == []
    for name in ("fifo", "garbage"):
        assert rows[name]["damaged"] and rows[name]["status"] == "unknown", rows[name]
        assert any("state.json" in d for d in cards[name]["damaged"]), cards[name]
    shutil.rmtree(gone.path)
    deadline = time.monotonic() + 10
    while "gone" in runs_json(dash) and runs_json(dash)["gone"].get("error") is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    gone_row = runs_json(dash)["gone"]
    assert "removed while shown" in gone_row["error"] and gone_row["status"] == "gone"
    assert gone_row["buttons"] == {} and "engine_pid" not in gone_row  # a vanished run shows no engine pid
    assert post(dash, "gone", "resume", **{"X-Runner-Token": dash.token}) == 404
    assert runs_json(dash)["good"]["status"] == "completed"
    assert dash.proc.poll() is None
    del good


def test_non_loopback_host_warns(dashboard, tmp_path):
    """Path: serve(): a --host that is not loopback is obeyed, with a warning on stderr."""
    dash = dashboard(tmp_path, "--host", "0.0.0.0")
    assert dash.url.startswith("http://0.0.0.0:")
    deadline = time.monotonic() + 10
    while "not on loopback" not in dash.stderr():
        assert time.monotonic() < deadline, dash.stderr()
        time.sleep(0.05)


def test_a_foreign_host_is_refused_when_bound_beyond_loopback(runs, victim, dashboard, tmp_path):
    """Path: security.Guard.refuse_host, asked first by every request: with --host
    0.0.0.0 and --allowed-host dash.example, a request whose Host names another host is
    refused (403) whatever it asks, the token and an Origin equal to that Host (a
    DNS-rebinding page's own) included: nothing is read, nothing lodged, the run keeps
    running. The allowed name, the bound address and loopback are answered; a POST from
    the allowed name's own origin is accepted. Ablation dashboard-host-check turns it red."""
    rd, v = runs.live_trap_term(victim, stop={"kill_grace": KILL_GRACE})
    dash = dashboard(tmp_path, "--host", "0.0.0.0", "--allowed-host", "dash.example")
    port = dash.origin.rsplit(":", 1)[1]
    good = {"X-Runner-Token": dash.token}
    evil = {"Host": f"evil.example:{port}"}
    assert request(dash, "GET", "/api/runs", {**good, **evil})[0] == 403
    assert request(dash, "GET", "/", evil)[0] == 403
    assert request(dash, "GET", "/api/runs", {**good, "Host": f"dash.example:{int(port) + 1}"})[0] == 403
    for action in ("stop-now", "pause"):
        status = request(
            dash, "POST", f"/api/runs/run/{action}", {**good, **evil, "Origin": f"http://evil.example:{port}"}
        )[0]
        assert status == 403, action
    time.sleep(0.5)  # the engine's watchdog polls every 0.1 s: a lodged request would be seen
    assert v.alive() and rd.is_live() and not rd.stop_request.exists() and not rd.pause_file.exists()
    for host in (f"dash.example:{port}", "DASH.example.", f"127.0.0.1:{port}", f"localhost:{port}", f"0.0.0.0:{port}"):
        assert request(dash, "GET", "/api/runs", {**good, "Host": host})[0] == 200, host
    own = {**good, "Host": f"dash.example:{port}", "Origin": f"http://dash.example:{port}"}
    assert request(dash, "POST", "/api/runs/run/pause", own)[0] == 202
    assert wait_action(dash, "run", "done")["action"] == "pause" and rd.pause_file.exists()
    assert "dash.example" in dash.stderr() and "--allowed-host" in dash.stderr()
    assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    runs.wait_engine_exit(rd)
    assert not v.alive()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--port", "70000"], "--port: expected 0..65535"),
        (["--runs-dir", "/nonexistent/runs"], "--runs-dir: not a directory"),
        (["--runs-dir", ""], "--runs-dir: expected a directory path"),
        (["--host", "256.1.1.1"], "cannot listen on 256.1.1.1"),
        (["--allowed-host", "evil/path"], "--allowed-host: not a host name or address"),
    ],
)
def test_bad_flags_are_one_line_and_bad_input(runs, tmp_path, args, message):
    """Path: cli._dispatch and serve(): bad flags and an address that cannot be bound
    are one line and exit BAD_INPUT; nothing is served."""
    argv = ["dashboard", "--runs-dir", tmp_path, *args] if "--runs-dir" not in args else ["dashboard", *args]
    proc = runs.runner(*argv, timeout=30)
    assert proc.returncode == Exit.BAD_INPUT, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stdout == ""


def test_a_crashed_run_offers_resume_which_runs_the_clis_resume(runs, victim, dashboard):
    """Path: snapshot._run_row shows the status model's "crashed" (a dead engine's
    `running` run) and offers only "Resume"; actions._resume runs lifecycle.resume
    (detached, with the model's resumable) in the dashboard's
    process, which kills the dead attempt's provider first (the CLI's kill of leftovers)
    and starts attempt 2; "Stop" then stops it with origin `dashboard`."""
    rd, v = runs.live_trap_term(victim, stop={"kill_grace": KILL_GRACE})
    dash = dashboard()
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGKILL)
    runs.wait_engine_exit(rd)
    row = wait_row(dash, "run", status="crashed")
    assert row["buttons"] == {"resume": {"enabled": True, "why": None}}
    assert row["words"].startswith("crashed: its engine died without recording an end")
    assert v.alive()  # the dead engine's provider: resume's to kill
    good = {"X-Runner-Token": dash.token}
    assert post(dash, "run", "resume", **good) == 202
    runs.wait_event(rd, "resume", attempt=2)
    assert v.wait_gone(10)
    runs.wait_event(rd, "run-start", attempt=2)
    wait_row(dash, "run", status="running", attempt=2, live=True)
    done = wait_action(dash, "run", "done")
    assert done["action"] == "resume" and done["code"] == Exit.OK and "resumed" in done["message"]
    assert post(dash, "run", "stop", **good) == 202
    stop = runs.wait_event(rd, "run-stop", origin="dashboard")
    assert stop["forced"] is False
    runs.wait_engine_exit(rd)
    assert not runs.tagged(rd.run_id)


def _threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def test_an_unchanged_poll_is_answered_304_and_a_change_is_not(runs, dashboard):
    """Path: snapshot.Snapshots.answer and the server's ETag: a poll that sends back the
    ETag of the last answer gets 304 with no body while nothing shown changed; a new
    journal line (the run's files changed) gets a 200 with the new body and a new ETag.
    Ablation dashboard-304 (every poll answered 200) turns it red."""
    rd = finished_run(runs)
    dash = dashboard()
    good = {"X-Runner-Token": dash.token}
    status, headers, body = request(dash, "GET", "/api/runs?open=done", good)
    assert status == 200 and headers.get("ETag"), headers
    etag = headers["ETag"]
    time.sleep(0.2)  # past MIN_AGE: the server looks again
    status, headers, body = request(dash, "GET", "/api/runs?open=done", {**good, "If-None-Match": etag})
    assert (status, body, headers.get("ETag")) == (304, b"", etag), (status, headers, body[:200])
    assert float(headers["X-Runner-Now"]) > 0  # the server's clock, on a 304 too
    assert request(dash, "GET", "/api/runs?open=done", {**good, "If-None-Match": '"other"'})[0] == 200
    assert request(dash, "GET", "/api/runs", {**good, "If-None-Match": etag})[0] == 200  # another card set
    assert request(dash, "GET", "/api/runs?open=done", {"If-None-Match": etag})[0] == 403  # the token first, always
    with open(rd.journal, "ab") as f:
        f.write(json.dumps({"event": "resume", "t": time.time(), "attempt": 2}).encode() + b"\n")
    time.sleep(0.2)
    status, headers, body = request(dash, "GET", "/api/runs?open=done", {**good, "If-None-Match": etag})
    assert status == 200 and headers["ETag"] != etag
    assert "resume attempt=2" in json.loads(body)["details"]["done"]["journal"][-1]


def test_a_live_runs_ticking_clocks_alone_change_no_etag(runs, victim, dashboard):
    """Path: snapshot._without_clocks: a live run whose files do not change is read
    again every LIVE_MAX_AGE (its child's runtime and the item's duration have grown),
    yet its digest leaves the clocks out: the poll still gets 304, and the page ticks
    the clocks itself from `at` and `now`."""
    rd, _ = runs.live_trap_term(victim, stop={"kill_grace": KILL_GRACE})
    dash = dashboard()
    good = {"X-Runner-Token": dash.token}
    _, headers, body = request(dash, "GET", "/api/runs?open=run", good)
    data = json.loads(body)
    row = data["runs"][0]
    assert row["live"] is True and isinstance(row["at"], float) and data["details"]["run"]["children"], data
    assert data["poll_ms"] == round(defaults.DASHBOARD_POLL * 1000)  # a run is live: four polls a second
    time.sleep(2.5)  # past LIVE_MAX_AGE twice: the row was read again
    status, after, _ = request(dash, "GET", "/api/runs?open=run", {**good, "If-None-Match": headers["ETag"]})
    assert status == 304, after
    assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    runs.wait_engine_exit(rd)
    wait_row(dash, "run", status="stopped")


def test_an_idle_connection_is_closed(runs, dashboard):
    """Path: connections.Loop._expire: a connection that sends nothing (or nothing more
    after a poll) is closed by the server once idle for IDLE_TIMEOUT; a connection in
    use is not. Ablation idle-timeout (never expire) turns it red."""
    from runner.dashboard.connections import IDLE_TIMEOUT

    finished_run(runs)
    dash = dashboard()
    host, port = dash.origin.removeprefix("http://").rsplit(":", 1)
    started = time.monotonic()  # before the connect: the server's idle clock starts later
    silent = socket.create_connection((host, int(port)), timeout=IDLE_TIMEOUT + 10)
    used = http.client.HTTPConnection(host, int(port), timeout=IDLE_TIMEOUT + 10)
    try:
        used.request("GET", "/api/runs", headers={"X-Runner-Token": dash.token})
        assert used.getresponse().read()
        assert silent.recv(1) == b""  # EOF: the server closed it
        waited = time.monotonic() - started
        assert IDLE_TIMEOUT * 0.8 <= waited < IDLE_TIMEOUT + 5, waited
        # The used one, idle since its answer, is closed in its turn (its EOF, not a sleep
        # that a slow answer could outlast).
        assert used.sock.recv(1) == b""
        with pytest.raises((ConnectionError, http.client.RemoteDisconnected, BrokenPipeError)):
            used.request("GET", "/api/runs", headers={"X-Runner-Token": dash.token})
            used.getresponse().read()
    finally:
        silent.close()
        used.close()


def test_threads_stay_bounded_under_300_idle_connections(runs, dashboard):
    """Path: connections.Loop: 300 connections that send nothing hold sockets in the
    selector, not threads: the server's thread count stays at WORKERS plus a few, and a
    poll on a new connection is answered at once. (The stdlib's ThreadingHTTPServer held
    one thread per connection: 300 threads.)"""
    from runner.dashboard.connections import WORKERS

    finished_run(runs)
    dash = dashboard()
    host, port = dash.origin.removeprefix("http://").rsplit(":", 1)
    request(dash, "GET", "/api/runs", {"X-Runner-Token": dash.token})
    base_threads = _threads(dash.proc.pid)
    held = []
    try:
        for _ in range(300):
            held.append(socket.create_connection((host, int(port)), timeout=10))
        for s in held[::3]:
            s.sendall(b"GET /api/runs HTTP/1.1\r\n")  # a request begun, never finished
        time.sleep(0.5)
        threads = _threads(dash.proc.pid)
        assert threads <= max(base_threads, WORKERS + 2) + 2, (threads, base_threads)
        started = time.monotonic()
        status, _, _ = request(dash, "GET", "/api/runs", {"X-Runner-Token": dash.token})
        assert status == 200 and time.monotonic() - started < 5.0
    finally:
        for s in held:
            s.close()


def test_a_stop_in_progress_is_stopping(runs, victim, dashboard):
    """Path: snapshot._stopping: from the dashboard's own "Stop" (its action running)
    until the run has stopped, the row says `stopping` (the page's badge); then not."""
    rd, _ = runs.live_trap_term(victim, stop=None)  # the default kill_grace: a stop that takes a while
    dash = dashboard()
    good = {"X-Runner-Token": dash.token}
    assert wait_row(dash, "run", status="running")["stopping"] is False
    assert post(dash, "run", "stop", **good) == 202
    row = wait_row(dash, "run", stopping=True, timeout=5)
    assert row["status"] == "running" and row["live"] is True
    runs.wait_engine_exit(rd)
    row = wait_row(dash, "run", status="stopped")
    assert row["stopping"] is False


def test_a_poll_with_its_cursor_gets_only_what_changed(runs, dashboard):
    """Path: snapshot.Snapshots.answer with ?since= (issue 42): the first answer is whole
    (`full`, every row, a cursor); a poll that sends its cursor back gets only the rows
    changed after it (one run's state.json damaged), the names only when a run
    came, an open card's details only when they changed or the card is new (`new=`), and
    a cursor of another server gets the whole answer again. With nothing live the page is
    told to poll once a second; a large answer is gzip-compressed for a client that
    accepts it. Ablations dashboard-delta (every answer whole) and dashboard-idle-poll
    (four polls a second with nothing live) turn it red."""
    made = {name: finished_run(runs, name) for name in ("a", "b", "c")}
    dash = dashboard()
    good = {"X-Runner-Token": dash.token}

    def get(query="", **extra):
        status, headers, body = request(dash, "GET", f"/api/runs{query}", {**good, **extra})
        assert status == 200, (status, body[:200])
        return headers, json.loads(body)

    _, first = get()
    assert first["full"] is True and [r["name"] for r in first["runs"]] == ["a", "b", "c"]
    assert first["poll_ms"] == round(defaults.DASHBOARD_IDLE_POLL * 1000)
    cursor = first["cursor"]
    time.sleep(0.2)  # past MIN_AGE: the server looks again
    _, same = get(f"?since={cursor}")
    assert (same["full"], same["runs"], same["details"], "names" in same) == (False, [], {}, False), same
    Path(made["b"].state).write_bytes(b"{ torn")  # b's row changes (its state is damaged)
    time.sleep(0.2)
    _, delta = get(f"?since={cursor}")
    assert [r["name"] for r in delta["runs"]] == ["b"] and "names" not in delta, delta
    cursor = delta["cursor"]
    finished_run(runs, "d")
    time.sleep(0.2)
    _, came = get(f"?since={cursor}")
    assert [r["name"] for r in came["runs"]] == ["d"] and came["names"] == ["a", "b", "c", "d"], came
    cursor = came["cursor"]
    _, opened = get(f"?open=a&since={cursor}&new=a")
    assert list(opened["details"]) == ["a"] and opened["runs"] == [], opened
    time.sleep(0.2)
    _, again = get(f"?open=a&since={opened['cursor']}")
    assert again["details"] == {} and again["runs"] == [], again
    _, other = get("?since=deadbeef.1")
    assert other["full"] is True and len(other["runs"]) == 4
    plain = request(dash, "GET", "/api/runs", good)[2]
    status, headers, packed = request(dash, "GET", "/api/runs", {**good, "Accept-Encoding": "gzip, deflate"})
    assert (status, headers.get("Content-Encoding")) == (200, "gzip") and gzip.decompress(packed) == plain
    assert len(packed) < len(plain)
