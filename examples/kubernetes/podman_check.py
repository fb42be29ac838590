"""`make container`: the recipe's image built and stopped by a real container runtime
(podman), with no network inside the build or the runs (issue 42).

1. **The base**: a Debian image made from Debian's packages (`debootstrap
   --variant=minbase` with python3, its venv module and tini, from the mirror apt uses,
   then `podman import`), cached outside the checkout (/var/cache/pytest-stoplatency as
   root, else ~/.cache/pytest-stoplatency): made once, imported again when podman lost
   it. `--base IMAGE` takes a user's own base instead (a registry's python image).
2. **The image**: `pip wheel` makes a wheelhouse of the project and its dependencies
   outside the image; `podman build --network none` builds examples/kubernetes/Containerfile
   FROM the base (`--build-arg BASE`), installing from the wheelhouse alone.
3. **Stops**: `podman stop` before the engine starts (the image's tini holding a shell
   in place of the entrypoint, which marks the volume: exit 143, tini's for a child
   killed by SIGTERM, and no run), then at each moment of a run (its spec: three short
   items whose provider traps SIGTERM, marks it on the volume and holds on, so that a
   stop waits out the kill grace): right after `podman run` returns (in the engine's
   start-up), in an item's session (its journal says `session-start`), and in the kill
   grace (a SIGTERM to tini first; the provider marks the engine's SIGTERM; then
   `podman stop`). Each: the exit code is one the Job's podFailurePolicy ignores
   (job.yaml: a stop is not a failure), 4 (STOPPED) once the engine had started; no
   process of the container is left (its cgroup gone, no process in it); the run
   directory on the volume says `stopped`, with the stop in its journal.
4. **Resume**: a second `podman run` on a stopped run's volume resumes it to the end
   (exit 0, `completed`), and a third says it already completed (exit 0).

The host settings a runtime may need (README.md beside this file): `--runtime runc`
(crun refuses some cgroup layouts) and explicit `--ulimit nofile/nproc` (podman raises
both by default, which needs CAP_SYS_RESOURCE when the host's hard limit is lower).

    python examples/kubernetes/podman_check.py [--base IMAGE] [--keep-image]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BASE_IMAGE = "localhost/stoplatency-base:bookworm"
IMAGE = "localhost/runner-job-check:latest"
SUITE = "bookworm"
PACKAGES = "python3,python3-venv,tini"
RUNTIME = "runc"
"""podman's --runtime: crun refuses some cgroup layouts (this machine's among them)."""
SPEC = """items = ["alpha", "beta", "gamma"]

[provider]
command = ["/bin/sh", "-c", "trap 'touch /runs/term-{item}; sleep 30' TERM; sleep 1.5 & wait"]

[stop]
grace = 2
kill_grace = 1
"""
STOP_TIMEOUT = 10
"""`podman stop -t`: past the spec's worst case (kill_grace and the engine's own)."""
RUN_DIR = "/runs/runner/job"


def say(line: str) -> None:
    print(f"container: {line}", flush=True)


def cache_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/cache/pytest-stoplatency")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytest-stoplatency"


def mirror() -> str:
    """The Debian mirror apt uses (the first of /etc/apt/sources.list*), never a name of ours."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        if not path.is_file() or path.name.endswith((".disabled", ".save")) or "disabled" in path.name:
            continue
        text = path.read_text(errors="replace")
        for m in re.finditer(r"^(?:URIs:\s*(\S+)|deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+))", text, re.M):
            uri = m.group(1) or m.group(2)
            if uri and "security" not in uri and "debian" in uri:
                return uri
    raise SystemExit("container: no Debian mirror in /etc/apt/sources.list*: give --base IMAGE")


def podman(*args: str, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:
    argv = ["podman", "--runtime", RUNTIME, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        why = proc.stderr.strip()[-600:]
        raise SystemExit(f"container: podman {' '.join(args[:3])} failed ({proc.returncode}): {why}")
    return proc


def runtime_args() -> list[str]:
    """What this host needs of a container (README.md beside this file)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)
    cap = 4096  # enough for a run; under any hard limit a host is likely to have
    soft = lambda lim: min(lim[0], cap) if lim[0] != resource.RLIM_INFINITY else cap  # noqa: E731
    return [
        "--ulimit",
        f"nofile={soft(nofile)}:{soft(nofile)}",
        "--ulimit",
        f"nproc={soft(nproc)}:{soft(nproc)}",
    ]


def base(given: str | None) -> str:
    if given:
        return given
    if podman("image", "exists", BASE_IMAGE, check=False).returncode == 0:
        say(f"base {BASE_IMAGE}: in podman's store")
        return BASE_IMAGE
    tarball = cache_dir() / f"debian-{SUITE}-minbase.tar"
    if not tarball.exists():
        if shutil.which("debootstrap") is None:
            raise SystemExit("container: no debootstrap (apt-get install debootstrap), and no cached base")
        tarball.parent.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="stoplatency-base-", dir=tarball.parent) as tmp:
            root = Path(tmp) / "root"
            subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(root), mirror()],
                check=True,
                stdout=subprocess.DEVNULL,
                timeout=900,
            )
            part = tarball.with_suffix(".part")
            subprocess.run(["tar", "-C", str(root), "-cf", str(part), "."], check=True, timeout=300)
            part.replace(tarball)
        say(f"base made by debootstrap in {time.monotonic() - t:.0f} s, cached in {tarball}")
    t = time.monotonic()
    podman("import", str(tarball), BASE_IMAGE)
    say(f"base {BASE_IMAGE} imported from {tarball} in {time.monotonic() - t:.0f} s")
    return BASE_IMAGE


def build(base_image: str, work: Path) -> None:
    """The wheelhouse outside the image, then the image with no network."""
    context = work / "context"
    wheelhouse = context / "dist" / "wheelhouse"
    t = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "-w", str(wheelhouse), str(ROOT)],
        check=True,
        timeout=600,
    )
    (context / "examples" / "kubernetes").mkdir(parents=True)
    for name in ("spec.toml", "entrypoint.sh"):
        shutil.copy2(HERE / name, context / "examples" / "kubernetes" / name)
    wheels = sorted(p.name for p in wheelhouse.glob("*.whl"))
    say(f"wheelhouse: {len(wheels)} wheels in {time.monotonic() - t:.0f} s ({', '.join(wheels)})")
    t = time.monotonic()
    podman(
        "build",
        "--network",
        "none",
        *runtime_args(),
        "--build-arg",
        f"BASE={base_image}",
        "-f",
        str(HERE / "Containerfile"),
        "-t",
        IMAGE,
        str(context),
        timeout=900,
    )
    say(f"image {IMAGE} built FROM {base_image} with --network none in {time.monotonic() - t:.0f} s")


class Volume:
    """A podman volume holding one run directory, read from the host."""

    def __init__(self, label: str) -> None:
        self.name = f"stoplatency-check-{label}-{uuid.uuid4().hex[:8]}"
        podman("volume", "create", self.name)
        self.path = Path(podman("volume", "inspect", "--format", "{{.Mountpoint}}", self.name).stdout.strip())
        self.spec = self.path / "check.toml"
        self.spec.write_text(SPEC)

    @property
    def run_dir(self) -> Path:
        return self.path / "runner" / "job"

    def journal(self) -> list[dict]:
        try:
            lines = (self.run_dir / "journal.jsonl").read_bytes().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def wait_event(self, event: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in self.journal():
                if record.get("event") == event:
                    return record
            time.sleep(0.02)
        raise SystemExit(f"container: {self.name}: no {event!r} in the journal within {timeout:g} s")

    def status(self) -> str:
        if not (self.run_dir / "state.json").exists():
            return "no run"
        out = subprocess.run(
            [sys.executable, "-m", "runner", "status", "--json", "--run-dir", str(self.run_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        try:
            return str(json.loads(out.stdout)["status"])
        except (ValueError, KeyError):
            return f"unreadable ({out.returncode}: {out.stderr.strip()[:200]})"

    def remove(self) -> None:
        podman("volume", "rm", "-f", self.name, check=False)


HELD = json.dumps(["/usr/bin/tini", "-s", "--", "/bin/sh", "-c", "touch /runs/held; while :; do sleep 0.05; done"])
"""The image's own PID 1 (tini) holding a shell before the entrypoint: the moment before
`runner` exists, reached by an event (the shell's file on the volume), not by a delay."""


def run_args(volume: Volume, name: str, *, held: bool = False) -> list[str]:
    return [
        *(["--entrypoint", HELD] if held else []),
        "--name",
        name,
        "--network",
        "none",
        *runtime_args(),
        "-v",
        f"{volume.name}:/runs",
        "-e",
        "RUNNER_SPEC=/runs/check.toml",
        IMAGE,
    ]


def container_cgroups(cid: str) -> list[str]:
    """Every cgroup directory named after the container, up to three levels under
    /sys/fs/cgroup (v1: a controller's libpod_parent/; v2: a slice). Others' cgroups come
    and go meanwhile: one that vanishes while looked at is skipped."""
    found: list[str] = []
    level = ["/sys/fs/cgroup"]
    for _ in range(3):
        deeper = []
        for parent in level:
            try:
                entries = list(os.scandir(parent))
            except OSError:
                continue
            for entry in entries:
                try:
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                (found if cid in entry.name else deeper).append(entry.path)
        level = deeper
    return found


def processes_of(cid: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if cid in (entry / "cgroup").read_text():
                    out.append(int(entry.name))
            except OSError:
                pass
    return out


def stop_at(moment: str, ignored: set[int]) -> Volume:
    """One run stopped by `podman stop` at `moment`; the checks of step 3."""
    volume = Volume(moment)
    try:
        return _stop_at(moment, ignored, volume)
    except BaseException:
        volume.remove()  # a failed check leaves no volume behind
        raise


def _stop_at(moment: str, ignored: set[int], volume: Volume) -> Volume:
    name = f"stoplatency-check-{moment}-{uuid.uuid4().hex[:6]}"
    cid = podman("run", "-d", *run_args(volume, name, held=moment == "before-engine")).stdout.strip()
    try:
        if moment == "before-engine":
            deadline = time.monotonic() + 30
            while not (volume.path / "held").exists():
                if time.monotonic() > deadline:
                    raise SystemExit("container: the held shell never started")
                time.sleep(0.01)
        elif moment == "session":
            volume.wait_event("session-start")
        elif moment == "kill-grace":
            volume.wait_event("session-start")
            podman("kill", "--signal", "TERM", name)
            # The provider traps SIGTERM and marks it: the engine has begun the stop,
            # and waits out the kill grace.
            deadline = time.monotonic() + 30
            while not list(volume.path.glob("term-*")):
                if time.monotonic() > deadline:
                    raise SystemExit("container: the provider never got the engine's SIGTERM")
                time.sleep(0.01)
        t = time.monotonic()
        podman("stop", "-t", str(STOP_TIMEOUT), name, timeout=STOP_TIMEOUT + 60)
        took = time.monotonic() - t
        code = int(podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip())
    finally:
        podman("stop", "-t", "0", name, check=False)
    left, cgroups = processes_of(cid), container_cgroups(cid)
    podman("rm", "-f", name, check=False)
    status = volume.status()
    stops = [r for r in volume.journal() if r.get("event") == "run-stop"]
    started = any(r.get("event") == "run-start" for r in volume.journal())
    say(
        f"podman stop {moment}: exit {code} in {took:.2f} s; run {status}"
        f"{' (its stop journaled: ' + str(stops[-1].get('origin')) + ')' if stops else ''}; "
        f"processes left {len(left)}, cgroups left {len(cgroups)}"
    )
    problems = []
    if code not in ignored:
        problems.append(f"exit {code} is not one the Job's podFailurePolicy ignores ({sorted(ignored)})")
    if started and (code != 4 or status != "stopped" or not stops):
        problems.append(f"the engine had started: want exit 4, stopped, a run-stop record (got {code}, {status})")
    if moment in ("session", "kill-grace") and not started:
        problems.append("the engine never started")
    if left or cgroups:
        problems.append(f"left behind: processes {left}, cgroups {cgroups}")
    if problems:
        raise SystemExit(f"container: podman stop {moment}: " + "; ".join(problems))
    return volume


def resume_twice(volume: Volume) -> None:
    """Step 4: a second run on the stopped run's volume resumes it to the end; a third
    says it already completed."""
    for nth, want_status, want_line in (
        ("second", "completed", None),
        ("third", "completed", "already completed"),
    ):
        name = f"stoplatency-check-{nth}-{uuid.uuid4().hex[:6]}"
        t = time.monotonic()
        proc = podman("run", "--rm", *run_args(volume, name), check=False, timeout=300)
        status = volume.status()
        resumed = any(r.get("event") == "resume" for r in volume.journal())
        took = time.monotonic() - t
        say(f"{nth} podman run on the same volume: exit {proc.returncode} in {took:.1f} s; run {status}")
        if proc.returncode != 0 or status != want_status or not resumed:
            why = proc.stderr[-500:]
            raise SystemExit(f"container: {nth} run: exit {proc.returncode}, {status}, resumed {resumed}: {why}")
        if want_line and want_line not in proc.stderr:
            raise SystemExit(f"container: third run did not say {want_line!r}: {proc.stderr[-500:]}")
        if want_line:
            say(f"  it said: {proc.stderr.strip().splitlines()[-1]}")


def ignored_codes() -> set[int]:
    """The exit codes job.yaml's podFailurePolicy ignores (a stop, not a failure)."""
    text = (HERE / "job.yaml").read_text()
    m = re.search(r"- action: Ignore\s+onExitCodes:.*?values: \[([\d, ]+)\]", text, re.S)
    if m is None:
        raise SystemExit("container: job.yaml has no Ignore rule on exit codes")
    return {int(x) for x in m.group(1).split(",")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="podman_check.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="build FROM this image instead of the local Debian base")
    ap.add_argument("--keep-image", action="store_true", help="keep the built image")
    args = ap.parse_args(argv)
    if shutil.which("podman") is None:
        raise SystemExit("container: no podman (apt-get install podman runc)")
    started = time.monotonic()
    ignored = ignored_codes()
    volumes: list[Volume] = []
    with tempfile.TemporaryDirectory(prefix="stoplatency-container-") as tmp:
        try:
            build(base(args.base), Path(tmp))
            for moment in ("before-engine", "start", "session", "kill-grace"):
                volumes.append(stop_at(moment, ignored))
            resume_twice(volumes[1])
        finally:
            for v in volumes:
                v.remove()
            if not args.keep_image:
                podman("rmi", "-f", IMAGE, check=False)
    say(f"green in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
