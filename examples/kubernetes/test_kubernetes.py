"""The container recipe of examples/kubernetes/, checked as far as this machine can.

No cluster, container runtime or image registry is reachable here (`docker` is only a
client), so what is checked is what a pod relies on:

- the Job manifest is what render_job.py derives (the grace period from `runner bound
  --container`, the podFailurePolicy from the documented exits, the image from the
  package's version), valid against Kubernetes' own schemas, strictly, for the oldest
  Kubernetes the README supports and the newest kubernetes-validate carries;
- one image name and tag in every file that names it;
- the image's entrypoint, run by `run-local` as its container runs it: tini as PID 1 of
  a new pid namespace (unshare --pid --fork --mount-proc), the pod's environment, the
  installed runner. SIGTERM to that PID 1 at any moment ends the command, leaves nothing,
  and the run is stopped and recorded or was never started; SIGKILL then run-local again
  resumes; a volume root that fsGroup makes 2775 (another group) or an emptyDir's 0777
  runs, stops and resumes; a start after the run completed exits 0 and says so.
"""

import contextlib
import grp
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import render_job  # noqa: E402

from reliability import faults  # noqa: E402
from runner.exitcodes import Exit  # noqa: E402
from runner.files import journal  # noqa: E402
from runner.files.state import StateStore  # noqa: E402
from runner.proc import cgroup  # noqa: E402

RUN_LOCAL = faults.RUN_LOCAL
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a pid namespace)"
)
needs_init = pytest.mark.skipif(
    shutil.which("tini") is None, reason="needs Debian's tini (apt-get install tini): the image's PID 1"
)


# -- the manifest and the image's name ------------------------------------------------------


def test_job_manifest_is_rendered_from_the_spec_and_the_exit_codes():
    """terminationGracePeriodSeconds comes from `runner bound --container spec.toml`, the
    podFailurePolicy from docs/exit-codes.md and render_job.EXITS, the image from the
    package's version: the committed job.yaml is exactly what render_job.py makes now."""
    assert (HERE / "job.yaml").read_text() == render_job.render()


def _documents():
    yaml = pytest.importorskip("yaml")
    return [d for d in yaml.safe_load_all((HERE / "job.yaml").read_text()) if d]


@pytest.mark.parametrize("which", ["oldest", "newest"])
def test_job_manifest_is_valid_kubernetes(which):
    """Every document of job.yaml validates, strictly (an unknown or a missing key fails),
    against the schema of the oldest Kubernetes the README supports
    (render_job.OLDEST_KUBERNETES) and of the newest that kubernetes-validate carries
    (the `examples` extra installs it; its schemas are offline)."""
    kv = pytest.importorskip("kubernetes_validate")
    docs = _documents()
    assert {d["kind"] for d in docs} == {"Job", "PersistentVolumeClaim"}
    version = f"{render_job.OLDEST_KUBERNETES}.0" if which == "oldest" else kv.latest_version()
    for doc in docs:
        kv.validate(doc, version, strict=True)


def test_the_readme_names_the_oldest_kubernetes_validated():
    readme = (ROOT / "README.md").read_text()
    assert f"Kubernetes {render_job.OLDEST_KUBERNETES} or later" in readme


def test_pod_failure_policy_names_every_exit_the_entrypoint_gives():
    """Every exit of the entrypoint but 0 is in exactly one rule: the codes
    docs/exit-codes.md documents for `runner run` and `runner resume`, the entrypoint's
    own (`exit N` in entrypoint.sh) and tini's 128+N. Those a retry cannot help fail the
    Job; a stop (STOPPED, or a SIGTERM before anything started) is not a failure."""
    [job] = [d for d in _documents() if d["kind"] == "Job"]
    by_action: dict[str, list[int]] = {}
    for rule in job["spec"]["podFailurePolicy"]["rules"]:
        if "onExitCodes" in rule:
            assert rule["onExitCodes"]["containerName"] == job["spec"]["template"]["spec"]["containers"][0]["name"]
            assert rule["onExitCodes"]["operator"] == "In"
            by_action.setdefault(rule["action"], []).extend(rule["onExitCodes"]["values"])
    named = [c for codes in by_action.values() for c in codes]
    assert len(named) == len(set(named)), "a code in two rules"
    own = {int(c) for c in re.findall(r"^\s*exit (\d+)", (HERE / "entrypoint.sh").read_text(), re.M)}
    assert own <= render_job.entrypoint_exits()
    documented = render_job.documented_exits()
    assert {Exit.FOREIGN_DIR, Exit.COPY, Exit.NOT_PERMITTED, Exit.STOPPED} <= documented
    assert set(named) == (documented | own | render_job.TINI) - {0}
    assert {Exit.FAILED, Exit.BAD_INPUT, Exit.FOREIGN_DIR, Exit.COPY, Exit.DAMAGED} <= set(by_action["FailJob"])
    assert {Exit.STOPPED, faults.NEVER_STARTED} <= set(by_action["Ignore"])


def test_one_image_name_and_tag_in_every_file():
    """The Containerfile's build command, job.yaml (and its template's render) and the
    README name one image, render_job.IMAGE (its tag is the package's version); and
    run-local runs the init the Containerfile's ENTRYPOINT runs."""
    pattern = re.compile(r"[\w.\-/]*runner-job:[\w.\-]*\w")
    files = ["Containerfile", "job.yaml", "../../README.md"]
    for name in files:
        found = set(pattern.findall((HERE / name).read_text()))
        assert found == {render_job.IMAGE}, (name, found)
    entrypoint = re.search(r"^ENTRYPOINT (\[.*\])$", (HERE / "Containerfile").read_text(), re.M)
    assert entrypoint is not None
    init = json.loads(entrypoint.group(1))[0]
    assert Path(init).name == re.search(r'^INIT = "(.+)"$', RUN_LOCAL.read_text(), re.M).group(1)
    assert json.loads(entrypoint.group(1))[-1] == "/usr/local/bin/runner-entrypoint"


# -- run-local: the entrypoint as its container runs it -----------------------------------------


class Pods:
    """run-local processes of one test; whatever a failed test left is ended: the
    namespace (SIGKILL to its PID 1), then anything of the runs."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.procs: list[tuple[subprocess.Popen, list[int]]] = []
        self.volumes: list[Path] = []

    def spec(self, name: str = "spec.toml", provider: str = "sleep 1", items=("a", "b")) -> Path:
        path = self.tmp_path / name
        path.write_text(
            f"items = {json.dumps(list(items))}\n[provider]\ncommand = {json.dumps(['/bin/sh', '-c', provider])}\n"
            "[stop]\ngrace = 5\nkill_grace = 0.5\n"
        )
        return path

    def start(self, volume: Path, spec: Path, env: dict | None = None) -> subprocess.Popen:
        self.volumes.append(volume)
        proc = subprocess.Popen(
            [sys.executable, str(RUN_LOCAL), str(volume)],
            env={**faults.run_local_env(spec), **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append((proc, []))
        return proc

    def init(self, proc: subprocess.Popen) -> int:
        """PID 1 of `proc`'s namespace, as the host sees it (remembered for the teardown)."""
        pid = faults._init_of(proc.pid, timeout=30)
        for p, inits in self.procs:
            if p is proc:
                inits.append(pid)
        return pid

    def run(self, volume: Path, spec: Path, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = self.start(volume, spec)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def close(self) -> None:
        for proc, inits in self.procs:
            if proc.poll() is None:
                for pid in inits:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                proc.kill()
            proc.communicate()
        for volume in self.volumes:
            rd = faults.run_local_dir(volume)
            if rd.exists():
                faults.runner("stop", "--now", "--run-dir", rd.path)
                faults.kill_tagged(faults._key(rd))


@pytest.fixture
def pods(tmp_path):
    p = Pods(tmp_path)
    try:
        yield p
    finally:
        p.close()


def _events(rd) -> list[dict]:
    return journal.read(rd.journal) if rd.journal.exists() else []


def _await_session(proc: subprocess.Popen, rd, timeout: float = 60) -> None:
    """Until the engine journals its first session-start (the provider runs)."""
    deadline = time.monotonic() + timeout
    while not any(e.get("event") == "session-start" for e in _events(rd)):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no session-start"
        time.sleep(0.02)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@needs_root
@needs_init
@pytest.mark.parametrize("load", ["quiet", "cpu-hog"])
@pytest.mark.parametrize("at", faults.RUN_LOCAL_MOMENTS)
def test_sigterm_to_pid1_at_any_moment(tmp_path, at, load):
    """Path: the image's entrypoint under run-local (tini as PID 1 of a new pid
    namespace), SIGTERM to PID 1 `at` seconds after it came to exist, quiet or beside two
    CPU hogs: whatever the moment, run-local exits; nothing of the namespace or the run is
    left; the run was stopped and recorded (STOPPED), or never started (no run directory;
    tini exits 143, which the Job ignores). Which of the two depends on the machine's
    speed, and nothing asserted does. Ablation: `run-local-holds-early-sigterm` (see
    the next test: only a SIGTERM before tini's first instruction is lost without it)."""
    with faults.hogs() if load == "cpu-hog" else contextlib.nullcontext():
        [trial] = faults.run_local_sigterm(tmp_path, (at,))
    assert "problem" not in trial, trial["problem"]
    assert trial["left"] == 0 and not trial["cgroup_left"] and not trial["live"]
    if trial["outcome"] == "stopped":
        assert trial["code"] == Exit.STOPPED and trial["recorded"]
    else:
        assert trial["code"] == faults.NEVER_STARTED


SLOW_INIT = """
import os, sys, time
open(os.environ["SLOW_INIT_READY"], "w").close()
while not os.path.exists(os.environ["SLOW_INIT_GO"]):
    time.sleep(0.005)
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""
"""An init whose start-up lasts until the test says so: PID 1 before the real init's first
instruction, held there by an event (a file), not by a moment."""


@needs_root
@needs_init
def test_sigterm_before_the_init_runs_is_held_not_dropped(pods, tmp_path):
    """Path: run-local starts PID 1 with the stop signals blocked, so a SIGTERM sent
    before tini's first instruction (here: while an init that starts slowly, put first
    on PATH, waits for a file) is pending, not dropped by the kernel's rule for a
    namespace's init; tini then takes it and the command ends as at any other moment.
    Ablation: `run-local-holds-early-sigterm` (nothing blocked: the kernel drops the
    signal, nothing is pending, and the run would go on until a SIGKILL): red."""
    shim = tmp_path / "bin"
    shim.mkdir()
    init = shim / "tini"
    init.write_text(f"#!{sys.executable} -I\n" + SLOW_INIT.format(real=shutil.which("tini")))
    init.chmod(0o755)
    ready, go = tmp_path / "ready", tmp_path / "go"
    volume = tmp_path / "vol"
    volume.mkdir()
    env = {
        "PATH": f"{shim}{os.pathsep}{faults.run_local_env(tmp_path)['PATH']}",
        "SLOW_INIT_READY": str(ready),
        "SLOW_INIT_GO": str(go),
    }
    proc = pods.start(volume, pods.spec(provider=faults.TRAP_TREE), env)
    pid1 = pods.init(proc)
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the slow init never ran"
        time.sleep(0.005)
    os.kill(pid1, signal.SIGTERM)
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid1}/status").read_text().splitlines())
    pending = int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)
    assert pending & (1 << (signal.SIGTERM - 1)), "the SIGTERM to PID 1 was dropped, not held"
    go.touch()
    _, err = proc.communicate(timeout=60)
    rd = faults.run_local_dir(volume)
    if rd.exists():
        assert proc.returncode == Exit.STOPPED and faults.recorded(rd), (proc.returncode, err)
    else:
        assert proc.returncode == faults.NEVER_STARTED, (proc.returncode, err)


@needs_root
@needs_init
def test_sigkill_of_pid1_then_run_local_again_resumes(pods, tmp_path):
    """Path: SIGKILL to PID 1 (the grace period ran out) takes the namespace down; the
    run reads crashed, nothing of it is left; run-local again (the next pod) resumes the
    run to its end, and once more says it already completed (exit 0). The crashed run's
    cgroup, where the runner has one (the host's: the namespace's death does not remove
    it), is named by `runner list` and removed by the resume, which says so."""
    volume = tmp_path / "vol"
    volume.mkdir()
    spec = pods.spec(provider="sleep 1")
    proc = pods.start(volume, spec)
    pid1 = pods.init(proc)
    ns = os.readlink(f"/proc/{pid1}/ns/pid")
    rd = faults.run_local_dir(volume)
    _await_session(proc, rd)
    os.kill(pid1, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert not faults.pidns_members(ns)
    assert not faults.tagged(faults._key(rd))
    state = StateStore(rd.state).load()
    assert state.status == "running" and not state.stopped  # crashed: no end recorded
    left = cgroup.leftover(faults._key(rd))
    if cgroup.available():  # the engine's cgroup is the host's: the namespace's death left it
        assert left is not None
        listed = json.loads(faults.runner("list", "--json", "--runs-dir", rd.path.parent).stdout)
        assert [r["orphaned_cgroup"] for r in listed] == [str(left)]

    again = pods.run(volume, spec)
    assert again.returncode == Exit.OK, again.stderr
    if left is not None:
        assert f"removed the cgroup the dead attempt left: {left}" in again.stderr
        assert not left.exists()
    events = _events(rd)
    assert [e for e in events if e.get("event") == "resume"]
    assert {e.get("item") for e in events if e.get("event") == "item-done"} == {"a", "b"}

    done = pods.run(volume, spec)
    assert done.returncode == Exit.OK, done.stderr
    assert "already completed" in _one_line(done.stderr)


def _other_gid() -> int:
    """A group this process is not in (as fsGroup makes the volume's: the kubelet's, not
    the process's primary group)."""
    mine = {os.getegid(), *os.getgroups()}
    known = {g.gr_gid for g in grp.getgrall()}
    return next(g for g in range(2000, 60000) if g not in mine and g not in known)


@needs_root
@needs_init
@pytest.mark.parametrize("root_mode", ["2775-other-group", "0777"])
def test_fsgroup_volume_root_runs_stops_and_resumes(pods, tmp_path, root_mode):
    """Path: a volume root that Kubernetes' fsGroup makes group-writable (2775, a group
    not the process's own) or an emptyDir's 0777: the entrypoint makes its own 0700
    directory there and the run directory in it, so the safe-directory rule holds and the
    run starts; SIGTERM to PID 1 once the provider runs stops it within the spec's bound
    (recorded, exit STOPPED); run-local again resumes it to its end. Ablation:
    `entrypoint-own-dir` (the runner is asked to make the run directory in the volume
    root itself, and refuses: FOREIGN_DIR): red."""
    volume = tmp_path / "vol"
    volume.mkdir()
    if root_mode == "0777":
        volume.chmod(0o777)
    else:
        os.chown(volume, 0, _other_gid())
        volume.chmod(0o2775)
    spec = pods.spec(provider="sleep 1")
    bound = float(faults.runner("bound", spec).stdout)
    proc = pods.start(volume, spec)
    pid1 = pods.init(proc)
    rd = faults.run_local_dir(volume)
    _await_session(proc, rd)
    own = rd.path.parent.stat()
    assert own.st_uid == os.geteuid() and not own.st_mode & 0o077
    t0 = time.monotonic()
    os.kill(pid1, signal.SIGTERM)
    _, err = proc.communicate(timeout=bound + 30)
    elapsed = time.monotonic() - t0
    assert proc.returncode == Exit.STOPPED, err
    assert faults.recorded(rd)
    assert elapsed < bound, (elapsed, bound)

    again = pods.run(volume, spec)
    assert again.returncode == Exit.OK, again.stderr
    assert {e.get("item") for e in _events(rd) if e.get("event") == "item-done"} == {"a", "b"}


@needs_root
@needs_init
def test_fsgroup_change_policy_always_would_be_refused(pods, tmp_path):
    """Path: why job.yaml sets fsGroupChangePolicy: OnRootMismatch. What the kubelet's
    default (Always) does at each mount (every directory g+rwxs, every file g+rw, the
    group fsGroup's) makes the run directory group-writable, and `runner resume`
    refuses it (FOREIGN_DIR, one line, nothing started)."""
    volume = tmp_path / "vol"
    volume.mkdir()
    spec = pods.spec(provider="sleep 1")
    proc = pods.start(volume, spec)
    pid1 = pods.init(proc)
    rd = faults.run_local_dir(volume)
    _await_session(proc, rd)
    os.kill(pid1, signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == Exit.STOPPED
    gid = _other_gid()
    for top, _dirs, files in os.walk(volume):
        for name, bits in [(top, 0o2770), *((os.path.join(top, f), 0o660) for f in files)]:
            os.chown(name, -1, gid)
            os.chmod(name, os.stat(name).st_mode | bits)
    before = rd.state.read_bytes()
    refused = pods.run(volume, spec)
    assert refused.returncode == Exit.FOREIGN_DIR, refused.stderr
    assert str(rd.path) in _one_line(refused.stderr)
    assert rd.state.read_bytes() == before


@needs_root
@needs_init
def test_a_link_or_another_users_directory_planted_for_the_run_is_refused(pods, tmp_path):
    """Path: in a volume root others may write in (0777), what someone planted where the
    entrypoint's own directory goes is refused with one line and FOREIGN_DIR, nothing
    made: a link (by the entrypoint: the run would be written where it points) or
    another user's directory (by the runner's safe-directory rule)."""
    volume = tmp_path / "vol"
    volume.mkdir()
    volume.chmod(0o777)
    spec = pods.spec()
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (volume / "runner").symlink_to(target)
    linked = pods.run(volume, spec)
    assert linked.returncode == Exit.FOREIGN_DIR, linked.stderr
    assert "link" in _one_line(linked.stderr)
    assert not list(target.iterdir())

    (volume / "runner").unlink()
    (volume / "runner").mkdir(mode=0o700)
    os.chown(volume / "runner", 4242, 4242)
    foreign = pods.run(volume, spec)
    assert foreign.returncode == Exit.FOREIGN_DIR, foreign.stderr
    assert "owned by" in _one_line(foreign.stderr)
    assert not list((volume / "runner").iterdir())


@needs_root
def test_run_local_refuses_without_its_init_or_unshare(tmp_path):
    """Path: run-local without the image's init, or without unshare, on PATH: one line
    naming what is missing, UNSUPPORTED, nothing started or made in the volume."""
    volume = tmp_path / "vol"
    volume.mkdir()
    for missing in ("tini", "unshare"):
        bin_dir = tmp_path / f"without-{missing}"
        bin_dir.mkdir()
        for tool in ("tini", "unshare", "runner"):
            found = shutil.which(tool, path=faults.run_local_env(tmp_path)["PATH"])
            if tool != missing and found:
                (bin_dir / tool).symlink_to(found)
        out = subprocess.run(
            [sys.executable, str(RUN_LOCAL), str(volume)],
            env=dict(os.environ, PATH=str(bin_dir)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == Exit.UNSUPPORTED, out.stderr
        assert missing in _one_line(out.stderr)
        assert not list(volume.iterdir())


def _readable_runner(area: Path) -> Path | None:
    """A `runner` another user may run: a copy of the code under test and a command that
    imports it with the system's interpreter of this version (this one's may live under
    /root, closed to others). None when there is no such interpreter."""
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(python, os.X_OK):
        return None
    code = area / "code"
    shutil.copytree(ROOT / "runner", code / "runner", ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = area / "bin"
    bin_dir.mkdir()
    command = bin_dir / "runner"
    command.write_text(
        f"#!{python}\nimport sys\nsys.path.insert(0, {str(code)!r})\nfrom runner.__main__ import entry\n"
        "sys.exit(entry())\n"
    )
    for top, _dirs, files in os.walk(area):
        os.chmod(top, 0o755)
        for name in files:
            os.chmod(os.path.join(top, name), 0o755)
    return bin_dir


@needs_root
@needs_init
def test_as_the_jobs_user_on_its_fsgroup_volume(pods, tmp_path):
    """Path: job.yaml's securityContext as a runtime applies it (run-local --user
    runAsUser:runAsGroup --fs-group fsGroup: PID 1 is that user, fsGroup a supplementary
    group) on the volume root the kubelet makes of a new volume with that fsGroup (root's,
    2775, the fsGroup's group): the run starts in the entrypoint's own directory (the
    user's, private), stops on SIGTERM to PID 1 (recorded) and resumes to its end."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs util-linux's setpriv")
    [job] = [d for d in _documents() if d["kind"] == "Job"]
    ctx = job["spec"]["template"]["spec"]["securityContext"]
    uid, gid, fs_group = ctx["runAsUser"], ctx["runAsGroup"], ctx["fsGroup"]
    area = Path(tempfile.mkdtemp(prefix="runner-k8s-user-", dir="/tmp"))
    try:
        bin_dir = _readable_runner(area)
        if bin_dir is None:
            pytest.skip("no system interpreter of this version that another user may run")
        volume = area / "vol"
        volume.mkdir()
        os.chown(volume, 0, fs_group)
        volume.chmod(0o2775)
        spec = area / "spec.toml"
        spec.write_text(pods.spec(provider="sleep 1").read_text())
        spec.chmod(0o644)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(RUNNER_SPEC=str(spec), PATH=f"{bin_dir}{os.pathsep}/usr/sbin:/usr/bin:/sbin:/bin")
        argv = [sys.executable, str(RUN_LOCAL), f"--user={uid}:{gid}", f"--fs-group={fs_group}", str(volume)]

        def start():
            pods.volumes.append(volume)
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            pods.procs.append((proc, []))
            return proc

        proc = start()
        pid1 = pods.init(proc)
        rd = faults.run_local_dir(volume)
        _await_session(proc, rd)
        assert os.stat(f"/proc/{pid1}").st_uid == uid
        own = rd.path.parent.stat()
        assert own.st_uid == uid and not own.st_mode & 0o077
        assert rd.path.stat().st_uid == uid
        os.kill(pid1, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == Exit.STOPPED, err
        assert faults.recorded(rd)

        again = start()
        _, err = again.communicate(timeout=120)
        assert again.returncode == Exit.OK, err
        assert {e.get("item") for e in _events(rd) if e.get("event") == "item-done"} == {"a", "b"}
    finally:
        pods.close()
        pods.procs.clear()
        shutil.rmtree(area, ignore_errors=True)
