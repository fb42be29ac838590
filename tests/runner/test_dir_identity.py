"""A run is its directory: a copy of a live run's directory, or a planted directory
naming a live run's id, never turns a command against that run (issue 17, part 1).

Every run is real (`python -m runner`), its provider a victim that traps SIGTERM, under
cgroup containment where the machine has it and under group containment. The live run
A sits under `.runner/runs/`; the copy C beside it is made with `cp -r`, as a user
archiving a run would. After each command on the copy or the planted directory:

- every process of A (its engine, its provider, each by pid and start time) is alive;
- A's journal and state hold the very bytes they held before (no record of a stop);
- the copy holds the very bytes it held before (a copy is read-only);
- no process carries a tag of A's id other than A's own key (no second engine).

Ablations: `dir-identity-check` (a copy is not refused: the copy commands act on it and
write into it), `dir-identity-key` (the membership key is the bare run id, as before:
the planted directory's `stop --now` and `resume` kill A's processes),
`status-child-proof` (status lists a child file that names a process not proven the
run's).
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.files.rundir import RunDir
from runner.proc import cgroup, identity, reaper

KILL_GRACE = 0.3
COMMAND_LIMIT = 60

CONTAINMENTS = [
    "group",
    pytest.param("cgroup", marks=pytest.mark.skipif(not cgroup.available(), reason="no writable cgroup v2 here")),
]


def tree_bytes(path):
    """{relative path: bytes, or the link target, or "dir"} of everything under `path`."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(root, name)
            rel = str(p.relative_to(path))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = p.read_bytes()
    return out


def records(rd):
    """A's own records: the journal and the state, byte for byte."""
    return {name: (rd.path / name).read_bytes() for name in ("journal.jsonl", "state.json")}


def run_processes(run_id):
    """{pid: (start ticks, tag)} of every living process tagged for run `run_id`."""
    out = {}
    for pid, tag in R.tag_values(run_id).items():
        st = identity.stat(pid)
        if st is not None:
            out[pid] = (st.start_ticks, tag)
    return out


def cli(cwd, *args):
    proc = subprocess.run(
        [*R.RUNNER, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=COMMAND_LIMIT,
        stdin=subprocess.DEVNULL,
    )
    proc.stderr = R.with_traceback(proc.stderr)
    return proc


class Live:
    """A live run A under <tmp>/.runner/runs/A whose provider traps SIGTERM."""

    def __init__(self, runs, victim, containment):
        self.base = runs.tmp_path
        (self.base / ".runner" / "runs").mkdir(parents=True, exist_ok=True)
        stop = {"kill_grace": KILL_GRACE, "grace": 2.0, "containment": containment}
        self.rd, self.provider = runs.live_trap_term(victim, stop=stop, name=".runner/runs/A")
        self.run_id = self.rd.run_id
        self.key = self.rd.key(self.run_id)
        self.procs = run_processes(self.run_id)
        self.records = records(self.rd)
        engine = identity_file.read(self.rd.engine_identity)
        assert engine.pid in self.procs, "the engine carries the run's key"
        assert {tag for _, tag in self.procs.values()} == {self.key}
        assert self.provider.pid in self.procs

    def assert_untouched(self, what):
        """Every process of A alive (same start time), its records unchanged, and no
        process tagged for A's id that is not A's own."""
        now = run_processes(self.run_id)
        for pid, (ticks, _) in self.procs.items():
            st = identity.stat(pid)
            assert st is not None and st.start_ticks == ticks and not st.zombie, f"{what}: A's pid {pid} was killed"
        assert self.provider.alive(), f"{what}: A's provider was killed"
        assert {tag for _, tag in now.values()} == {self.key}, f"{what}: a process of another key: {now}"
        assert set(now) == set(self.procs), f"{what}: A's processes changed: {self.procs} -> {now}"
        assert records(self.rd) == self.records, f"{what}: a record was written into A"
        assert not self.rd.stop_request.exists(), f"{what}: a stop request was lodged in A"

    def stop(self):
        """A, the run itself, is still stopped by its own directory. Whatever else carries
        a tag of A's id (a second engine, under an ablation) is killed too, first."""
        strays = {tag for _, tag in run_processes(self.run_id).values()} - {self.key}
        for tag in strays:
            reaper.kill_tagged(tag, 0.2)
        proc = cli(self.base, "stop", "--now", "--run-dir", self.rd.path)
        assert proc.returncode == Exit.OK, proc.stderr
        assert run_processes(self.run_id) == {}
        assert not strays, f"processes of another directory with A's id: {strays}"


def copy_of(live, name="C"):
    dest = live.rd.path.parent / name
    subprocess.run(["cp", "-r", str(live.rd.path), str(dest)], check=True)
    return RunDir(dest)


COPY_REFUSED = {
    "stop": ["stop"],
    "stop-now": ["stop", "--now"],
    "stop-graceful": ["stop", "--graceful"],
    "stop-graceful-wait": ["stop", "--graceful", "--wait"],
    "resume": ["resume", "--detach"],
    "wait": ["wait"],
}


@pytest.mark.parametrize("containment", CONTAINMENTS)
@pytest.mark.parametrize("command", sorted(COPY_REFUSED))
def test_a_copy_of_a_live_run_is_refused_and_nothing_is_touched(runs, victim, containment, command):
    """Path: `cp -r` of a live run, then stop (every mode), resume or wait on the copy:
    rundir.refuse_copy (through survey's `copy`) refuses it with exit COPY and one line
    naming the run and its own directory, before anything is read further or written.
    A's processes, A's records and the copy's bytes are all unchanged; no second engine.
    Red under ablation `dir-identity-check` (the commands act on the copy: they write
    into it and exit another code)."""
    live = Live(runs, victim, containment)
    try:
        copy = copy_of(live)
        before = tree_bytes(copy.path)
        proc = cli(live.base, *COPY_REFUSED[command], "--run-dir", copy.path)
        assert proc.returncode == Exit.COPY, (proc.returncode, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert f"a copy of run {live.run_id}, live in {live.rd.path}" in lines[0], lines[0]
        live.assert_untouched(command)
        assert tree_bytes(copy.path) == before, "something was written into the copy"
    finally:
        live.stop()


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_plain_resume_and_stop_never_pick_a_copy(runs, victim, containment):
    """Path: a plain `runner resume` (no --run-dir) chooses among the runs under
    .runner/runs: status.resumable is false for a copy, so with A live and its copy C
    beside it there is no resumable run (NO_LIVE_RUN) and nothing is touched. A plain
    `runner stop --graceful` picks A, the one live run, never the copy. Red under
    ablation `dir-identity-check` (resume picks the copy C and runs a second attempt of
    A's run)."""
    live = Live(runs, victim, containment)
    try:
        copy = copy_of(live)
        before = tree_bytes(copy.path)
        proc = cli(live.base, "resume", "--detach")
        assert proc.returncode == Exit.NO_LIVE_RUN, (proc.returncode, proc.stderr)
        assert "no resumable run" in proc.stderr
        live.assert_untouched("plain resume")
        assert tree_bytes(copy.path) == before
        proc = cli(live.base, "stop", "--graceful")
        assert proc.returncode == Exit.OK, proc.stderr
        assert str(live.run_id) in proc.stdout
        assert tree_bytes(copy.path) == before, "the graceful request went into the copy"
        assert live.rd.stop_request.exists(), "the graceful request went to A"
    finally:
        live.stop()


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_status_and_list_show_a_copy_as_a_copy(runs, victim, containment):
    """Path: status_of on a copy (survey.of stops at `copy`): `copy` holds the line,
    live is false, no engine pid, no child (the copied engine.json and children files
    name A's processes); `runner status` says "copy"; `runner list` and `list --json`
    show one row for A and one row with status "copy" naming A's directory. Nothing is
    signalled or written. Red under ablation `dir-identity-check` (status shows A's
    engine pid as the copy's, and list shows the copy "crashed")."""
    live = Live(runs, victim, containment)
    try:
        copy = copy_of(live)
        before = tree_bytes(copy.path)
        proc = cli(live.base, "status", "--json", "--run-dir", copy.path)
        assert proc.returncode == Exit.OK, proc.stderr
        info = json.loads(proc.stdout)
        assert info["copy"] and f"a copy of run {live.run_id}, live in {live.rd.path}" in info["copy"]
        assert (info["live"], info["engine_pid"], info["children"]) == (False, None, [])
        text = cli(live.base, "status", "--run-dir", copy.path)
        assert text.returncode == Exit.OK and "copy of a run running when copied" in text.stdout, text.stdout
        assert "COPY: " in text.stdout
        rows = json.loads(cli(live.base, "list", "--json").stdout)
        by_dir = {r["run_dir"]: r for r in rows}
        assert by_dir[str(live.rd.path)]["status"] == "running" and by_dir[str(live.rd.path)]["copy_of"] is None
        assert by_dir[str(copy.path)]["status"] == "copy"
        assert by_dir[str(copy.path)]["copy_of"] == str(live.rd.path)
        assert by_dir[str(copy.path)]["live"] is False
        listing = cli(live.base, "list").stdout
        assert f"copy of {live.rd.path}" in listing, listing
        live.assert_untouched("status")
        assert tree_bytes(copy.path) == before
    finally:
        live.stop()


def test_a_copy_of_a_finished_run_is_read_not_resumed(runs, victim):
    """Path: what a user may do with a copy of a finished (stopped) run: `status` and
    `logs` read it (exit OK, the copy said: status "copy", the copied status recorded,
    not resumable), `resume` is refused with COPY, and nothing
    is written into the copy or the original. Red under ablation `dir-identity-check`
    (resume starts a new attempt in the copy)."""
    live = Live(runs, victim, "group")
    live.stop()
    copy = copy_of(live)
    before, original = tree_bytes(copy.path), tree_bytes(live.rd.path)
    status = cli(live.base, "status", "--json", "--run-dir", copy.path)
    info = json.loads(status.stdout)
    assert status.returncode == Exit.OK and (info["status"], info["recorded_status"]) == ("copy", "stopped")
    assert info["copy"] and info["resumable"] is False
    logs = cli(live.base, "logs", "--run-dir", copy.path)
    assert logs.returncode == Exit.OK, logs.stderr
    resume = cli(live.base, "resume", "--detach", "--run-dir", copy.path)
    assert resume.returncode == Exit.COPY, resume.stderr
    assert run_processes(live.run_id) == {}
    assert tree_bytes(copy.path) == before and tree_bytes(live.rd.path) == original


# -- planted directories ---------------------------------------------------------------

PLANTED = {
    "stop": ["stop"],
    "stop-now": ["stop", "--now"],
    "stop-graceful": ["stop", "--graceful"],
    "resume": ["resume", "--detach"],
}

# What each command says on a planted directory that does not claim A's directory
# identity (the record missing, or its own): it is a run of its own, which has no live
# engine, and damaged files (the cgroup file names A's cgroup; the record is missing).
# A plain stop of a run whose engine is dead records the end its records lack (the
# planted state says running): exit 0, having signalled nothing of A's (issue 18.3).
PLANTED_CODES = {
    "stop": {Exit.NO_LIVE_RUN, Exit.OK, Exit.DAMAGED},
    "stop-now": {Exit.DAMAGED, Exit.OK},
    "stop-graceful": {Exit.NO_LIVE_RUN},
    "resume": {Exit.DAMAGED, Exit.OK},
}
BAIT_SPEC = 'items = ["a"]\n\n[provider]\ncommand = ["true"]\n'


def plant(live, where, record):
    """A directory holding A's run id, a spec, and engine.json, cgroup, state.json and
    children/ copied from A; `record`: its dir-identity copied from A ("copied"), none
    ("absent"), or the planted directory's own ("own", as an attacker who measured it)."""
    where.mkdir()
    (where / "spec.toml").write_text(BAIT_SPEC)
    (where / "run-id").write_text(live.run_id + "\n")
    for name in ("engine.json", "cgroup", "state.json"):
        if (live.rd.path / name).exists():
            shutil.copyfile(live.rd.path / name, where / name)
    shutil.copytree(live.rd.children, where / "children")
    assert list((where / "children").iterdir()), "the live run's child file was planted"
    if record == "copied":
        shutil.copyfile(live.rd.dir_identity_file, where / "dir-identity")
    elif record == "own":
        st = os.stat(where)
        (where / "dir-identity").write_text(f"{st.st_dev}-{st.st_ino}\n")
    return RunDir(where)


@pytest.mark.parametrize("containment", CONTAINMENTS)
@pytest.mark.parametrize("record", ["copied", "absent", "own"])
@pytest.mark.parametrize("command", sorted(PLANTED))
def test_a_planted_directory_naming_a_live_run_never_acts_on_it(runs, victim, containment, record, command):
    """Path: a directory elsewhere holding a live run's id (listable from the cgroup
    tree), with engine.json, cgroup, state.json and children/ copied from the live run.
    With A's directory identity copied in, it is a copy (exit COPY, nothing written).
    Without it, or with its own, the planted directory's key is <A's id>.<its own
    identity> (RunDir.key): engine.json's engine, the children's groups and A's cgroup
    prove nothing for it, so `stop --now` and `resume` signal none of A's processes, and
    `stop`/`--graceful` find no live engine; a `resume` of it (when no damage holds it up:
    its own record, no cgroup file) is a run of its own, with its own key. Red under ablation `dir-identity-key` (the
    key is the bare id: the planted `stop --now` and `resume` kill A's processes) and,
    for "copied", `dir-identity-check`."""
    live = Live(runs, victim, containment)
    try:
        bait = plant(live, live.base / "bait", record)
        proc = cli(live.base, *PLANTED[command], "--run-dir", bait.path)
        if record == "copied":
            assert proc.returncode == Exit.COPY, (proc.returncode, proc.stderr)
            assert f"a copy of run {live.run_id}" in proc.stderr
        else:
            assert proc.returncode in PLANTED_CODES[command], (proc.returncode, proc.stdout, proc.stderr)
        if proc.returncode == Exit.OK and command == "resume":
            R.wait_engine_exit(bait)  # the bait's own run (provider `true`) ends by itself
        live.assert_untouched(f"{command} on a planted directory ({record} record)")
        bait_key = bait.key(live.run_id)
        assert not [t for _, t in run_processes(live.run_id).values() if t == bait_key], "the bait's engine lives on"
        status = cli(live.base, "status", "--json", "--run-dir", bait.path)
        info = json.loads(status.stdout)
        assert info["engine_pid"] not in live.procs, f"the bait's status shows A's engine: {info}"
        assert not {c["pid"] for c in info["children"]} & set(live.procs), f"the bait shows A's children: {info}"
        if record != "copied":
            wait = cli(live.base, "wait", "--run-dir", bait.path)
            assert wait.returncode in (Exit.NO_LIVE_RUN, Exit.OK, Exit.STOPPED, Exit.CRASHED), wait.stderr
        live.assert_untouched(f"status and wait on a planted directory ({record} record)")
    finally:
        live.stop()


def test_status_never_lists_a_child_file_that_names_a_foreign_process(runs, victim, procs):
    """Path: status_of shows a child only when the process its file names is proven the
    run's (membership: tag or cgroup); a forged children/PID.json naming a live process
    that is not the run's (with its true start time, written by the runner's own
    identity writer) is named as damage, never shown as a child. Red under ablation
    `status-child-proof`."""
    live = Live(runs, victim, "group")
    try:
        foreign = procs(["sleep", "60"], env={k: v for k, v in os.environ.items() if k != "RUNNER_RUN_ID"})
        ident = None
        for _ in range(100):
            ident = identity.current(foreign.pid)
            if ident is not None:
                break
        assert ident is not None
        identity_file.write(live.rd.children / f"{foreign.pid}.json", ident, role="child", name="forged")
        proc = cli(live.base, "status", "--json", "--run-dir", live.rd.path)
        info = json.loads(proc.stdout)
        pids = [c["pid"] for c in info["children"]]
        assert foreign.pid not in pids, info["children"]
        assert any(f"{foreign.pid}.json" in d and "not the run's" in d for d in info["damaged"]), info["damaged"]
        assert proc.returncode == Exit.DAMAGED
        assert live.provider.pid in pids, "the run's own child is still shown"
        (live.rd.children / f"{foreign.pid}.json").unlink()
        assert foreign.poll() is None
    finally:
        live.stop()


def test_stop_all_never_stops_a_hard_linked_copy(runs, victim):
    """Path: `cp -al` makes a copy whose `lock` is the run's very lock file (a hard link),
    so the copy looks live to a lock probe. `stop --all --now` (stop_every) skips it: it
    stops A once, by A's own directory (exit 0: A's records go into copies of A's own,
    the shared links broken, links.py), and writes nothing into the copy's own files;
    `stop --now` and `status` on the copy still say copy. Red under ablation
    `dir-identity-check` (the copy is stopped too: its `stop.lock` and records appear)."""
    live = Live(runs, victim, "group")
    try:
        copy = RunDir(live.rd.path.parent / "C")
        subprocess.run(["cp", "-al", str(live.rd.path), str(copy.path)], check=True)
        assert copy.is_live(), "a hard-linked copy shares the held lock"
        names = sorted(os.listdir(copy.path))
        proc = cli(live.base, "stop", "--now", "--run-dir", copy.path)
        assert proc.returncode == Exit.COPY, proc.stderr
        live.assert_untouched("stop --now on a cp -al copy")
        info = json.loads(cli(live.base, "status", "--json", "--run-dir", copy.path).stdout)
        assert info["copy"] and info["live"] is False and info["engine_pid"] is None
        before = R.snapshot(copy.path)
        proc = cli(live.base, "stop", "--all", "--now")
        # `cp -al` made A's own files hard links too: A's stop writes its records into
        # copies of its own (links.py), never into the files the copy shares.
        assert proc.returncode == Exit.OK, proc.stderr
        assert not R.snapshot_diff(before, R.snapshot(copy.path)), "the stop wrote into the copy's files"
        out = proc.stdout + proc.stderr
        assert len([line for line in out.splitlines() if "killed" in line]) == 1, out
        assert run_processes(live.run_id) == {}
        assert sorted(os.listdir(copy.path)) == names, "the stop wrote a file of its own into the copy"
    finally:
        if run_processes(live.run_id):
            live.stop()


def test_the_dashboard_shows_a_copy_and_acts_on_nothing(runs, victim):
    """Path: the dashboard's row for a copy (snapshot.Snapshots: run_list.row's rule)
    says "copy" and offers no button; its open card names it; each action
    (actions.ACTIONS, what a POST runs) on the copy answers COPY and writes nothing. Red
    under ablation `dir-identity-check` (the row is "crashed" with Resume on)."""
    from runner.dashboard import actions, snapshot
    from runner.dashboard.runs import Base

    live = Live(runs, victim, "group")
    try:
        copy = copy_of(live, name="20991231-000000-c0c0c0")  # a name the dashboard lists
        before = tree_bytes(copy.path)
        snap = snapshot.Snapshots(Base(copy.path.parent), actions.Actions())
        data = json.loads(snap.json((copy.path.name,)))
        row = {r["name"]: r for r in data["runs"]}[copy.path.name]
        assert row["status"] == "copy" and row["copy"] is True, row
        assert row["buttons"] == {}, row["buttons"]
        assert "a copy of run" in data["details"][copy.path.name]["copy"]
        for name, action in sorted(actions.ACTIONS.items()):
            with pytest.raises(Exception) as info:
                action(copy)
            assert getattr(info.value, "exit_code", None) == Exit.COPY, (name, info.value)
        live.assert_untouched("dashboard actions on a copy")
        assert tree_bytes(copy.path) == before
    finally:
        live.stop()


def test_a_run_directory_recorded_in_another_boot_is_its_own_and_resumes(runs, victim):
    """Path: RunDir.recorded_elsewhere / readopt_identity. A volume mounted again (the next
    pod's, on another node, or after a reboot) may give the run's directory another device
    number: its record then names another boot, in which no process can still be alive,
    so the directory is the run's own, not a copy. `status` says no copy, `resume` records
    the identity anew and continues the run, and a copy taken now is a copy again. Red
    without the boot in the record: the remounted run is refused as a copy (COPY)."""
    live = Live(runs, victim, "group")
    live.stop()
    rd = live.rd
    dev, _, ino = rd.recorded_identity().partition("-")
    # What a remount looks like from the directory: another device number, recorded in
    # a boot that is not this one.
    rd.dir_identity_file.write_text(f"{int(dev) + 1}-{ino} 00000000-0000-4000-8000-000000000000\n")
    status = cli(live.base, "status", "--json", "--run-dir", rd.path)
    assert status.returncode == Exit.OK, status.stderr
    assert not json.loads(status.stdout)["copy"]
    resume = cli(live.base, "resume", "--detach", "--run-dir", rd.path)
    assert resume.returncode == Exit.OK, resume.stderr
    assert "recorded anew" in resume.stderr
    assert rd.recorded_identity() == rd.measured_identity() and not rd.recorded_elsewhere()
    R.wait_event(rd, "phase-start", phase="session")
    # Recorded in this boot again: a copy taken now is a copy, as any other.
    copy = copy_of(live)
    assert cli(live.base, "stop", "--now", "--run-dir", copy.path).returncode == Exit.COPY
    stop = cli(live.base, "stop", "--now", "--run-dir", rd.path)
    assert stop.returncode == Exit.OK, stop.stderr
    assert run_processes(live.run_id) == {}
