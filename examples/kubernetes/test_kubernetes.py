"""The container recipe of examples/kubernetes/, checked as far as this machine can.

No cluster, container runtime or image registry is reachable here, so what is checked
is what a pod relies on: the Job manifest is what render_job.py derives from the spec
(`runner bound --container`, never a typed figure) and is valid against Kubernetes'
own schema (kubernetes-validate, offline, strict: an unknown or missing key fails); and
the entrypoint, as PID 1 of a real pid namespace (`unshare --pid --fork --mount-proc`,
what a container's runtime gives it), takes the runtime's SIGTERM as a stop: the run is
recorded stopped, nothing of the namespace is left, and a second start (the next pod)
resumes the same run from the volume to its end.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import render_job  # noqa: E402

# STOPPED (the run was stopped; resumable) and OK, from the runner's own enum.
from runner.exitcodes import Exit  # noqa: E402


def test_job_manifest_is_rendered_from_the_spec():
    """terminationGracePeriodSeconds comes from `runner bound --container spec.toml`:
    the committed job.yaml is exactly what render_job.py makes of the template now."""
    assert (HERE / "job.yaml").read_text() == render_job.render()


def test_job_manifest_is_valid_kubernetes():
    """Every document of job.yaml validates (strict) against the newest Kubernetes
    schema that kubernetes-validate carries (the `examples` extra installs it)."""
    kv = pytest.importorskip("kubernetes_validate")
    yaml = pytest.importorskip("yaml")
    docs = [d for d in yaml.safe_load_all((HERE / "job.yaml").read_text()) if d]
    assert {d["kind"] for d in docs} == {"Job", "PersistentVolumeClaim"}
    for doc in docs:
        kv.validate(doc, kv.latest_version(), strict=True)


def _ns_init(unshare: subprocess.Popen, timeout: float = 10.0) -> psutil.Process:
    """The namespace's PID 1 (unshare's forked child), as the host sees it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = psutil.Process(unshare.pid).children()
        if kids:
            return kids[0]
        time.sleep(0.01)
    raise AssertionError("unshare started no child")


def _journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (pid namespace)")
def test_entrypoint_as_pid_1_stops_on_sigterm_then_resumes(tmp_path):
    """A pod's life: the entrypoint as PID 1 of a new pid namespace; SIGTERM to it (a pod
    deletion, `docker stop`) once the provider runs; the run ends STOPPED within the
    spec's bound, recorded, with nothing of the namespace left; the second start resumes
    the run and completes it."""
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'items = ["a", "b"]\n\n[provider]\ncommand = ["/bin/sh", "-c", "sleep 2"]\n\n'
        "[stop]\ngrace = 5\nkill_grace = 1\n"
    )
    run_dir = tmp_path / "runs" / "job"
    # The image's PATH holds `runner`; here it is this interpreter's console script.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = dict(os.environ, RUNNER_SPEC=str(spec), RUNNER_RUN_DIR=str(run_dir), PATH=path)
    bound = float(
        subprocess.run(
            [sys.executable, "-m", "runner", "bound", str(spec)], capture_output=True, text=True, check=True
        ).stdout
    )
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", str(HERE / "entrypoint.sh")]
    pod = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        init = _ns_init(pod)
        deadline = time.monotonic() + 30
        while not (run_dir / "journal.jsonl").exists() or not any(
            e.get("event") == "session-start" for e in _journal(run_dir)
        ):
            assert time.monotonic() < deadline, pod.stderr.read() if pod.poll() is not None else "no session-start"
            time.sleep(0.02)
        inside = [init, *init.children(recursive=True)]
        t0 = time.monotonic()
        init.send_signal(signal.SIGTERM)
        _, err = pod.communicate(timeout=bound + 10)
        elapsed = time.monotonic() - t0
    finally:
        if pod.poll() is None:
            pod.kill()
            pod.wait()
    assert pod.returncode == Exit.STOPPED, err
    assert elapsed < bound, (elapsed, bound)
    assert not [p.pid for p in inside if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert [e for e in _journal(run_dir) if e.get("event") == "run-stop"]

    # The next pod: the same volume, the entrypoint resumes the run and finishes it.
    again = subprocess.run(
        ["/bin/sh", str(HERE / "entrypoint.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == Exit.OK, again.stderr
    events = _journal(run_dir)
    assert [e for e in events if e.get("event") == "resume"]
    assert {e.get("item") for e in events if e.get("event") == "item-done"} == {"a", "b"}
