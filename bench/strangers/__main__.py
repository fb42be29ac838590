"""`make leaks-strangers`: --process-leaks on seven strangers' suites, from their sdists (issues 28, 39).

    python -m bench.strangers [--suites psutil,pexpect,...] [--json docs/leaks-strangers.json]
                              [--work ~/.cache/pytest-stoplatency-strangers] [--timeout 2400]

Each suite (SUITES: psutil, pexpect, execnet, sh, plumbum, pytest-xprocess, supervisor, pinned) is fetched from PyPI
(`pip download --no-binary :all:`), unpacked and installed, with pytest, pytest-xdist,
pytest-timeout (this repository's versions), this plugin and what the suite's tests need, into
one virtualenv under --work. Then, serially (`-p no:xdist`) and with `-n 2`, three sessions:
plain, with `--process-leaks` (default settings), plain again. Beside each session runs the
independent checker (checker.py, a process of its own), told of every test's start and end by
the probe (leakcheck_probe.py, loaded into every pytest process through PYTEST_PLUGINS). Both
run under their own dotted names (bench.strangers.*: a mutation campaign proves by them that
its killers ran the mutated copy), the stranger's session seeing nothing else of this
repository (a directory of its own on its path, holding `bench` alone).

Per suite and mode, measured:
- tests: the node ids that ran (the probe's reports);
- outcome changes: tests whose outcome with --process-leaks differs from the first plain
  session's, among the tests whose two plain sessions agree; a teardown error that is the
  check's own leak report is not an outcome. Each such test is then run alone without the
  check, RECHECK times and on, up to RECHECK_MAX, until its outcome with the check shows up,
  and, if some are left, up to MORE_PLAIN more whole plain sessions run in the same mode (a
  test of a suite that fails only beside another, as pexpect's socket tests on one port under
  -n 2, needs the whole session): a test whose outcome with the check shows up without it is
  flaky, not a change (counted apart with the tests whose two plain sessions disagree). For a
  failure, "its outcome" is the same failure: its first message line and where it was raised
  (the reprcrash). And a failure that moves from test to test between sessions (judged
  first, and again after each further plain session): a test that failed with the check is
  flaky when each of its failures failed as many tests or more in some session without the
  check as in the session with it (pexpect's socket tests: under
  -n 2 whichever starts its server on the one port second fails, 3 to 5 tests a session,
  whichever they are); a failure the check brought to more tests than ever failed so without
  it stays a change;
- leaks reported (the plugin's --process-leaks-json), verified (the checker, too, saw that
  process outlive a test or fixture), misses (the checker saw a process outlive its scope
  that the plugin did not report), and what outlived the session (the checker's last look,
  after pytest exited: must be none with the check; the plain sessions' are the suite's own
  leaks, killed by this harness);
- wall time of each session.

Not in CI (it needs PyPI's sdists and about an hour on 2 cores). Writes --json, which
`make docs` renders into docs/plugin.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from pytest_stoplatency import _options  # the check's defaults: the checker's graces

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Suite:
    name: str
    version: str
    tests: tuple[str, ...]  # paths, relative to the unpacked sdist
    editable: bool = False  # installed in place (a C extension its tests import from the source tree)
    needs: tuple[str, ...] = ()  # what its tests import or its configuration requires
    why: str = ""
    options: tuple[str, ...] = ()  # what its own way of running its tests adds (its Makefile, tox.ini)
    env: tuple[tuple[str, str], ...] = ()
    sorted_under_xdist: bool = False  # it shuffles its tests at import: sorted by node id under -n


SUITES = {
    s.name: s
    for s in (
        Suite(
            "psutil",
            "7.2.2",
            ("tests",),
            editable=True,
            needs=("pytest-instafail", "psleak", "setuptools"),
            why="process tree APIs",
            # Its Makefile's PSUTIL_TESTING; its pyproject.toml's verbosity_subtests = "0" (a TOML
            # string), which pytest 9 refuses when a subtest reads it: given as an int here.
            options=("-o", "verbosity_subtests=0"),
            env=(("PSUTIL_TESTING", "1"),),
        ),
        Suite("pexpect", "4.9.0", ("tests",), why="pty children, gc-finalised spawns"),
        Suite("execnet", "2.1.2", ("testing",), why="cached gateways, a function fixture's process reused"),
        Suite(
            "sh",
            "2.4.0",
            ("tests",),
            why="a subprocess per call, background processes",
            # Its tox.ini's SH_TESTS_RUNNING. Its tests shuffle their own order at import
            # (unittest's sortTestMethodsUsing, keyed on os.urandom), so that two xdist workers
            # collect different lists and xdist runs none: sorted by node id under -n (the probe).
            env=(("SH_TESTS_RUNNING", "1"),),
            sorted_under_xdist=True,
        ),
        Suite(
            "plumbum",
            "2.0.2",
            ("tests",),
            needs=("pytest-mock", "pytest-asyncio", "pytest-cov", "psutil"),
            why="local commands, pipelines, background jobs",
            # Its conftest reads config.inicfg, which pytest 9 deprecates, and its configuration
            # makes every warning an error; pytest-asyncio warns when its loop scope is unset.
            options=(
                "-W",
                "default::pytest.PytestRemovedIn10Warning",
                "-o",
                "asyncio_default_fixture_loop_scope=function",
            ),
        ),
        Suite(
            "pytest-xprocess",
            "1.0.2",
            ("tests",),
            why="a server per test, told to exit over a socket or terminate()d; pytest inside pytest (pytester)",
            # Its configuration makes every warning an error; pytest-asyncio (plumbum's) warns
            # when its loop scope is unset.
            options=("-o", "asyncio_default_fixture_loop_scope=function"),
        ),
        Suite(
            "supervisor",
            "4.3.0",
            ("supervisor/tests/test_end_to_end.py",),
            needs=("pexpect",),
            why="supervisord per test through pexpect, stopped by SIGINT; its end-to-end tests",
            # Its end-to-end tests run only with END_TO_END set (as its tox.ini does).
            env=(("END_TO_END", "1"),),
        ),
    )
}
# Serially as a user runs it (xdist installed, no -n: psutil's own configuration loads xdist and
# uses its markers, so -p no:xdist would break its collection).
MODES = {"serial": [], "xdist": ["-n", "2"]}
SESSIONS = ("plain", "check", "plain-again")
RECHECK = 5
RECHECK_MAX = 20
ALONE_TIMEOUT = 300  # seconds for one test alone (pexpect's test_interrupt once hung alone, without the check)
MORE_PLAIN = 3


def log(msg: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


def run(argv: list[str], **kw) -> None:
    subprocess.run(argv, check=True, **kw)


# -- set-up -----------------------------------------------------------------------------------


def fetch(suite: Suite, work: Path) -> Path:
    """The unpacked sdist (downloaded once into work/sdists)."""
    sdists = work / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    src = work / "src" / f"{suite.name}-{suite.version}"
    if src.is_dir():
        return src
    found = list(sdists.glob(f"{suite.name}-{suite.version}.tar.gz"))
    if not found:
        run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
            + [f"{suite.name}=={suite.version}", "-d", str(sdists)]
        )
        found = list(sdists.glob(f"{suite.name}-{suite.version}.tar.gz"))
    (src.parent).mkdir(parents=True, exist_ok=True)
    with tarfile.open(found[0]) as tar:
        tar.extractall(src.parent, filter="data")
    return src


def venv(work: Path, suites: list[Suite], sources: dict[str, Path]) -> Path:
    """One virtualenv for every suite: this repository's pytest, xdist and timeout, the plugin
    (editable: the tree under test), what the suites need, and the suites themselves."""
    env = work / "venv"
    py = env / "bin" / "python"
    stamp = env / ".installed"
    want = json.dumps(sorted(f"{s.name}=={s.version} {' '.join(s.needs)}" for s in suites))
    if stamp.exists() and stamp.read_text() == want:
        return py
    shutil.rmtree(env, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", str(env)])
    pins = [f"{d}=={metadata.version(d)}" for d in ("pytest", "pytest-xdist", "pytest-timeout", "psutil")]
    pip = [str(py), "-m", "pip", "install", "--quiet"]
    run([*pip, "--upgrade", "pip"])
    run([*pip, *pins, "-e", str(ROOT), "--config-settings", "editable_mode=compat"])
    needs = sorted({n for s in suites for n in s.needs if n != "psutil"})
    if needs:
        run([*pip, *needs])
    for s in suites:
        if s.editable:
            run([*pip, "-e", str(sources[s.name])])
        else:
            run([*pip, str(sources[s.name])])
    stamp.write_text(want)
    return py


# -- one session --------------------------------------------------------------------------------


def _kill_outlived(procs: list[dict]) -> int:
    """SIGKILL what outlived a session (by pidfd, its start ticks checked); how many."""
    n = 0
    for x in procs:
        try:
            fd = os.pidfd_open(x["pid"])
        except OSError:
            continue
        try:
            with open(f"/proc/{x['pid']}/stat", "rb") as f:
                data = f.read()
            if int(data[data.rfind(b")") + 2 :].split()[19]) == x["start_ticks"]:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                n += 1
        except (OSError, ValueError, IndexError):
            pass
        finally:
            os.close(fd)
    return n


PROBE = "bench.strangers.leakcheck_probe"


def _inherited_path() -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _probe_path(where: Path) -> str:
    """PYTHONPATH for a stranger's pytest: a directory of its own that holds `bench` alone (a
    link to this repository's), so that the probe imports as bench.strangers.leakcheck_probe
    and no other package of this repository (tests, runner) shadows the stranger's; then what
    this harness was given."""
    where.mkdir(parents=True, exist_ok=True)
    link = where / "bench"
    if not link.is_symlink():
        link.symlink_to(ROOT / "bench", target_is_directory=True)
    return os.pathsep.join([str(where), *_inherited_path()])


def session(py: Path, suite: Suite, src: Path, mode: str, kind: str, out: Path, timeout: float) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tmp = Path(tempfile.mkdtemp(prefix="lc-", dir="/tmp"))
    sock = tmp / "s"
    run_id = f"lc{os.getpid()}x{int(time.time() * 1000) % 10**9}"
    checker_out = out / "checker.json"
    checker = subprocess.Popen(
        [sys.executable, "-m", "bench.strangers.checker", "--socket", str(sock), "--run", run_id]
        + ["--out", str(checker_out)]
        # The plugin's defaults (what a user runs): the checker's graces, never typed in twice.
        + ["--grace", str(_options.GRACE), "--stop-grace", str(_options.STOP_GRACE)],
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *_inherited_path()])},
    )
    deadline = time.monotonic() + 30
    while not (tmp / "s.ready").exists():
        if checker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the checker did not start ({checker.returncode})")
        time.sleep(0.01)
    argv = [str(py), "-m", "pytest", *suite.tests, "-p", "no:cacheprovider", *suite.options, *MODES[mode]]
    if kind == "check":
        argv += ["--process-leaks", "--process-leaks-json", str(out / "leaks.json")]
    env = {
        **os.environ,
        **dict(suite.env),
        "PYTEST_PLUGINS": PROBE,
        "PYTHONPATH": _probe_path(tmp / "path"),
        "LEAKCHECK_SOCKET": str(sock),
        "LEAKCHECK_RUN": run_id,
        "LEAKCHECK_OUTCOMES": str(out / "outcomes.json"),
    }
    if mode == "xdist" and suite.sorted_under_xdist:
        env["LEAKCHECK_SORT"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    t0 = time.monotonic()
    with open(out / "pytest.log", "wb") as logf:
        proc = subprocess.Popen(
            argv,
            cwd=src,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            code = f"timeout ({code})"
        except BaseException:  # this harness stopped (SIGTERM, ^C): the session and the checker with it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            checker.kill()
            checker.wait()
            raise
    wall = time.monotonic() - t0
    if checker.poll() is not None:
        raise SystemExit(f"the checker died during the session ({checker.returncode}): see above")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(sock))
    conn.sendall(b'{"op": "final"}\n')
    conn.makefile("rb").readline()
    conn.close()
    checker.wait(timeout=60)
    shutil.rmtree(tmp, ignore_errors=True)
    checked = json.loads(checker_out.read_text())
    killed = _kill_outlived(checked["outlived_session"])
    leaks = json.loads((out / "leaks.json").read_text()) if kind == "check" and (out / "leaks.json").exists() else None
    outcomes = json.loads((out / "outcomes.json").read_text()) if (out / "outcomes.json").exists() else {}
    return {
        "exit": code,
        "wall_s": round(wall, 1),
        "outcomes": outcomes,
        "plugin": leaks,
        "checker": checked,
        "killed_after": killed,
    }


# -- comparison ---------------------------------------------------------------------------------


def outcome(phases: dict[str, str]) -> str:
    """One word per test: its setup and call outcome, and a teardown error that is not the
    check's own leak report."""
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if setup not in (None, "passed"):
        word = "error" if setup == "failed" else setup
    else:
        word = call or "not run"
    if teardown == "failed":
        word += "+teardown error"
    return word


def signatures(phases: dict[str, str]) -> set[tuple[str, str]]:
    """A test's failures as (message, where raised): the probe's reprcrash of each failed phase."""
    return {
        (v, phases.get(f"{k.removesuffix('-message')}-at", "?")) for k, v in phases.items() if k.endswith("-message")
    }


def _counts(outcomes: dict[str, dict[str, str]]) -> dict[tuple[str, str], int]:
    """How many tests of a session failed with each signature."""
    n: dict[tuple[str, str], int] = {}
    for phases in outcomes.values():
        for sig in signatures(phases):
            n[sig] = n.get(sig, 0) + 1
    return n


def reproduces(want: tuple[str, set], got: tuple[str, set]) -> bool:
    """Whether a session without the check showed a test's outcome with it: the same word and,
    for a failure, one of the same signatures (a failure of another kind is another outcome)."""
    return got[0] == want[0] and (not want[1] or bool(want[1] & got[1]))


def recheck(py: Path, suite: Suite, src: Path, nodeid: str, out: Path, want: tuple[str, set]) -> list[str]:
    """The outcomes of `nodeid` run alone without the check: RECHECK times, and on up to
    RECHECK_MAX until one reproduces `want` (its outcome with the check)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    got: list[str] = []
    for i in range(RECHECK_MAX):
        if i >= RECHECK and any(w.startswith("=") for w in got):
            break
        where = out / f"recheck-{i}.json"
        env = {
            **os.environ,
            **dict(suite.env),
            "PYTEST_PLUGINS": PROBE,
            "PYTHONPATH": _probe_path(out / "path"),
            "LEAKCHECK_OUTCOMES": str(where),
        }
        env.pop("LEAKCHECK_SOCKET", None)
        argv = [str(py), "-m", "pytest", nodeid, "-p", "no:cacheprovider", *suite.options]
        proc = subprocess.Popen(
            argv,
            cwd=src,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        hung = False
        try:
            proc.wait(timeout=ALONE_TIMEOUT)
        except subprocess.TimeoutExpired:  # an outcome of its own, not the end of the harness
            hung = True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the test left, and a hung session
            except ProcessLookupError:
                pass
            proc.wait()
        outcomes = json.loads(where.read_text()) if where.exists() and not hung else {}
        phases = outcomes.get(nodeid, {})
        word = f"hung ({ALONE_TIMEOUT} s)" if hung else outcome(phases)
        # "=" marks a run that reproduced the outcome with the check (its signature included).
        got.append(("=" if reproduces(want, (word, signatures(phases))) else "") + word)
    return got


def compare(sessions: dict[str, dict], rechecked=None, more_plain=None) -> dict:
    plain, check, again = (sessions[k]["outcomes"] for k in SESSIONS)
    a = {k: outcome(v) for k, v in plain.items()}
    b = {k: outcome(v) for k, v in again.items()}
    c = {k: outcome(v) for k, v in check.items()}
    flaky = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    changes = sorted(k for k in set(a) | set(c) if k not in flaky and a.get(k) != c.get(k))

    def want(k):
        return (c.get(k), signatures(check.get(k, {})))

    # A failure that moves from test to test between sessions (pexpect's socket tests share one
    # port: under -n 2 whichever of them starts its server second fails): the same failure
    # (message and where raised) in as many tests of some session without the check as with it.
    # Its count bounds it: a failure the check caused in more tests than ever failed so without
    # it (execnet's gateways killed: "not-receiving" in 292 tests) stays a change. Judged first
    # (it costs nothing; such a test passes alone), and again with every further plain session.
    check_counts = _counts(check)
    plain_counts = [_counts(plain), _counts(again)]
    moved: dict[str, list[tuple[str, str]]] = {}

    def judge_moved() -> None:
        nonlocal changes, flaky
        for k in changes:
            sigs = signatures(check.get(k, {}))
            if (
                c.get(k) not in (None, "passed")
                and sigs
                and all(check_counts[sig] <= max(n.get(sig, 0) for n in plain_counts) for sig in sigs)
            ):
                moved[k] = sorted(sigs)
        flaky = sorted(set(flaky) | set(moved))
        changes = [k for k in changes if k not in moved]

    judge_moved()
    rechecks = {}
    if rechecked is not None:
        rechecks = {k: rechecked(k, want(k)) for k in changes}
        reproduced = [k for k in changes if any(w.startswith("=") for w in rechecks[k])]
        flaky = sorted(set(flaky) | set(reproduced))
        changes = [k for k in changes if k not in reproduced]
    extra: list[dict[str, dict[str, str]]] = []
    while more_plain is not None and changes and len(extra) < MORE_PLAIN:
        extra.append(more_plain(len(extra)))
        more = extra[-1]
        plain_counts.append(_counts(more))
        reproduced = [
            k for k in changes if reproduces(want(k), (outcome(more.get(k, {})), signatures(more.get(k, {}))))
        ]
        flaky = sorted(set(flaky) | set(reproduced))
        changes = [k for k in changes if k not in reproduced]
        judge_moved()
    plugin = sessions["check"]["plugin"] or {"leaks": [], "excluded": []}
    reported = {(x["pid"], x["start_ticks"]): x for x in plugin["leaks"]}
    excluded = {(x["pid"], x["start_ticks"]) for x in plugin.get("excluded", [])}
    seen = {(x["pid"], x["start_ticks"]): x for x in sessions["check"]["checker"]["leaks"]}
    verified = sorted(set(reported) & set(seen))
    unverified = [reported[k] for k in sorted(set(reported) - set(seen))]
    misses = [seen[k] for k in sorted(set(seen) - set(reported) - excluded)]
    return {
        "tests": len(c),
        "outcome_changes": len(changes),
        "changed": [
            {"nodeid": k, "plain": a.get(k), "check": c.get(k), "failures": sorted(signatures(check.get(k, {})))}
            for k in changes
        ],
        "moved_failures": [
            {
                "nodeid": k,
                "failures": [
                    {
                        "message": m,
                        "at": at,
                        "tests_with_the_check": check_counts[(m, at)],
                        "most_tests_without": max(n.get((m, at), 0) for n in plain_counts),
                    }
                    for m, at in sigs
                ],
            }
            for k, sigs in moved.items()
        ],
        "rechecked": [
            {"nodeid": k, "plain": a.get(k), "check": c.get(k), "alone_without_the_check": v}
            for k, v in rechecks.items()
        ],
        "more_plain_sessions": len(extra),
        "flaky": len(flaky),
        "flaky_tests": flaky,
        "reported": len(reported),
        "verified": len(verified),
        "unverified": unverified,
        "misses": len(misses),
        "missed": misses,
        "checker_found_plain": len(sessions["plain"]["checker"]["leaks"]),
        "outlived_plain": len(sessions["plain"]["checker"]["outlived_session"]),
        "outlived_check": len(sessions["check"]["checker"]["outlived_session"]),
        "outlived_check_procs": sessions["check"]["checker"]["outlived_session"],
        "wall_s": {k: sessions[k]["wall_s"] for k in SESSIONS},
        "exit": {k: sessions[k]["exit"] for k in SESSIONS},
        "checker_scan_s": sessions["check"]["checker"]["scan_s"],
    }


def _dirty() -> bool:
    """Whether what the sessions load (the plugin, this harness) differs from the commit."""
    paths = ["pytest_stoplatency", "bench/strangers"]
    return bool(subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=ROOT, capture_output=True).stdout)


def _stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop)
    ap = argparse.ArgumentParser(prog="python -m bench.strangers", description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--modes", default=",".join(MODES))
    # Outside this repository: a suite without a pytest configuration of its own (sh) would
    # otherwise take this repository's.
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "pytest-stoplatency-strangers")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--merge", action="store_true", help="keep the rows of --json's other suites and modes")
    ap.add_argument("--timeout", type=float, default=2400.0, help="seconds per pytest session")
    args = ap.parse_args(argv)
    suites = [SUITES[n] for n in args.suites.split(",")]
    modes = args.modes.split(",")
    work = args.work.resolve()
    # Every suite is installed, whichever run: one environment for all of them.
    sources = {s.name: fetch(s, work) for s in SUITES.values()}
    py = venv(work, list(SUITES.values()), sources)
    load_before = round(os.getloadavg()[0], 2)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    commit = commit.stdout.strip() + ("-dirty" if _dirty() else "")
    t0 = time.monotonic()
    rows = []
    for s in suites:
        for mode in modes:
            sessions = {}
            for kind in SESSIONS:
                log(f"{s.name} {s.version} {mode} {kind}")
                sessions[kind] = session(
                    py, s, sources[s.name], mode, kind, work / "runs" / s.name / mode / kind, args.timeout
                )
                log(f"  exit {sessions[kind]['exit']}, {sessions[kind]['wall_s']} s")
            runs = work / "runs" / s.name / mode

            def rechecked(nodeid, want, s=s, runs=runs):
                log(f"  recheck {nodeid} alone without the check, {RECHECK} to {RECHECK_MAX} times")
                where = runs / "recheck" / re.sub(r"\W+", "_", nodeid)[-120:]
                return recheck(py, s, sources[s.name], nodeid, where, want)

            def more_plain(i, s=s, mode=mode, runs=runs):
                log(f"  {s.name} {mode} plain once more ({i + 1} of at most {MORE_PLAIN}): changes left")
                return session(py, s, sources[s.name], mode, "plain", runs / f"plain-more-{i}", args.timeout)[
                    "outcomes"
                ]

            row = {
                "suite": s.name,
                "version": s.version,
                "why": s.why,
                "mode": mode,
                **compare(sessions, rechecked, more_plain),
            }
            row["time"] = datetime.now(UTC).isoformat(timespec="seconds")
            row["git_commit"] = commit  # a merged document's rows come from several runs
            row["load_before"] = load_before
            log(
                f"  tests {row['tests']}, changes {row['outcome_changes']} (flaky {row['flaky']}), reported "
                f"{row['reported']}, verified {row['verified']}, misses {row['misses']}, outlived "
                f"{row['outlived_plain']} plain / {row['outlived_check']} with the check"
            )
            rows.append(row)
    doc = {
        "kind": "leaks-strangers",
        "machine": {"kernel": platform.release(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_before": load_before,
        "total_s": round(time.monotonic() - t0, 1),
        "git_commit": commit,
        "pytest": metadata.version("pytest"),
        "sessions": list(SESSIONS),
        "rows": rows,
    }
    if args.json and args.merge and args.json.exists():
        ran = {(r["suite"], r["mode"]) for r in rows}
        kept = [r for r in json.loads(args.json.read_text())["rows"] if (r["suite"], r["mode"]) not in ran]
        order = {(n, m): i for i, (n, m) in enumerate((n, m) for n in SUITES for m in MODES)}
        doc["rows"] = sorted(kept + rows, key=lambda r: order[(r["suite"], r["mode"])])
        doc["merged"] = True
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
        log(f"wrote {args.json}")
    bad = [r for r in rows if r["outcome_changes"] or r["misses"] or r["outlived_check"] or r["unverified"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
