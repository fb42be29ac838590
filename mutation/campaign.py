"""The campaign: a baseline on the unmutated copy, then every mutation in parallel."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import inner, scratch
from .spec import Campaign, Mutation
from .verdict import INVALID, KILLED, STALE, Verdict, baseline_problems, judge, suite_baseline_problems


class BaselineFailed(RuntimeError):
    """The unmutated tree does not pass its own killers and survivors: nothing can be judged."""

    def __init__(self, problems: list[str], logs: list[str]):
        self.problems, self.logs = problems, logs
        super().__init__("baseline failed:\n  " + "\n  ".join(problems) + "\n  logs: " + ", ".join(logs))


class Interrupted(RuntimeError):
    """SIGTERM or SIGINT reached the campaign; every inner run and scratch copy is gone."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


@dataclass
class Result:
    mutation: Mutation
    verdict: Verdict
    duration: float = 0.0
    log: str | None = None
    leaked: list[int] = field(default_factory=list)


@dataclass
class Outcome:
    results: list[Result]
    baseline_seconds: float
    total_seconds: float
    time: str
    git_commit: str | None
    machine: dict
    baseline_from: list[str] | None = None  # the suite's probe reports read as the baseline; None: run here

    @property
    def ok(self) -> bool:
        return all(r.verdict.verdict == KILLED and not r.verdict.survivors_red for r in self.results)


def _git_commit(root: Path) -> str | None:
    """HEAD, marked "+dirty" when the copied tree differs from it (the copy includes
    uncommitted edits and untracked files, so HEAD alone would overstate provenance)."""
    try:

        def git(*a: str) -> str:
            return subprocess.run(["git", *a], cwd=root, check=True, capture_output=True, text=True).stdout.strip()

        head = git("rev-parse", "HEAD")
        return head + ("+dirty" if git("status", "--porcelain") else "") if head else None
    except (OSError, subprocess.CalledProcessError):
        return None


def _machine() -> dict:
    return {
        "kernel": platform.release(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "hostname": platform.node(),
    }


def _shards(node_ids: list[str], n: int) -> list[list[str]]:
    """Split by test file (a file's tests share fixtures and imports), largest first."""
    by_file: dict[str, list[str]] = {}
    for nid in node_ids:
        by_file.setdefault(nid.split("::", 1)[0], []).append(nid)
    shards: list[list[str]] = [[] for _ in range(max(1, n))]
    for group in sorted(by_file.values(), key=len, reverse=True):
        min(shards, key=len).extend(group)
    return [s for s in shards if s]


def baseline_limit(campaign: Campaign, mutations, n_tests: int) -> float:
    """The time limit of a baseline shard of `n_tests` tests. A shard runs at once what
    several mutations run one by one, each within its own limit (the campaign's, for at
    most the largest mutation's number of tests): it gets one such limit per largest
    mutation's worth of its tests. One limit for the whole shard, as before, timed out
    a green baseline on a loaded machine (58 tests beside two CPU hogs: over 240 s). The
    limit is the largest a mutation of the campaign has: a mutation given more time of its
    own (a killer of 300 real runs) gets it in the baseline too."""
    per_run = max((len(m.node_ids) for m in mutations), default=1)
    # Never below the campaign's own: a mutation given less (one that hangs by design)
    # must not shorten the baseline, whose pytest start-up alone a busy machine can make
    # outlast a few seconds (test_timeout's 3 s baseline was red beside other work).
    limit = max([campaign.timeout, *(m.timeout for m in mutations)])
    return limit * max(1, math.ceil(n_tests / per_run))


def _baseline(campaign: Campaign, mutations, root: Path, jobs: int, artifacts: Path, progress) -> float:
    t0 = time.monotonic()
    copy = scratch.make(root, "baseline")
    try:
        shards = _shards(campaign.node_ids(mutations), jobs)

        def one(i_ids):
            i, ids = i_ids
            r = inner.run(
                copy,
                ids,
                campaign.pytest_args,
                artifacts / f"baseline-{i}",
                artifacts / f"baseline-{i}.log",
                baseline_limit(campaign, mutations, len(ids)),
                None,
            )
            return ids, r

        runs = _gather(one, list(enumerate(shards)), len(shards))
    finally:
        scratch.remove(copy)
    problems, logs = [], []
    for ids, r in runs:
        logs.append(r.log)
        problems += baseline_problems(ids, r.probe, r.timed_out, r.returncode, r.not_found)
        if r.leaked:
            problems.append(f"processes left behind by the baseline run: {r.leaked}")
    elapsed = time.monotonic() - t0
    if problems:
        raise BaselineFailed(problems, logs)
    if progress:
        progress(f"baseline: {len(campaign.node_ids(mutations))} tests green ({elapsed:.1f} s)")
    return elapsed


def _args(campaign: Campaign, m: Mutation) -> tuple[str, ...]:
    """One killer failing in its body is a kill: once one has, the others need not run (a
    killed mutation's killers mostly wait out their bounds before they fail, the heaviest
    part of the campaign). Survivors must all run, so a mutation that names any runs whole."""
    return campaign.pytest_args if m.survivors else (*campaign.pytest_args, "--maxfail=1")


def _suite_baseline(campaign: Campaign, mutations, root: Path, probe_files: list[Path], progress) -> float:
    """The baseline read from the suite's own runs of this tree instead of run again: the
    same claim (every killer and survivor green on the unmutated code), which CI already
    pays for in `make test` and `make examples`. The scratch copy's own set-up is still
    proven by each mutation's probe (the mutated module imported from the copy)."""
    t0 = time.monotonic()
    probes: dict[str, dict | None] = {}
    for f in probe_files:
        try:
            probes[str(f)] = json.loads(Path(f).read_text())
        except (OSError, ValueError):
            probes[str(f)] = None
    ids = campaign.node_ids(mutations)
    problems = suite_baseline_problems(ids, probes, str(root))
    if problems:
        raise BaselineFailed(problems, [str(f) for f in probe_files])
    if progress:
        progress(f"baseline: {len(ids)} tests green in the suite's own runs ({', '.join(map(str, probe_files))})")
    return time.monotonic() - t0


def _one(campaign: Campaign, m: Mutation, root: Path, artifacts: Path) -> Result:
    t0 = time.monotonic()
    copy = scratch.make(root, m.id)
    try:
        try:
            scratch.apply(copy, m.file, m.marker, m.replace)
        except scratch.StaleMutation as exc:
            return Result(m, Verdict(STALE, str(exc)), time.monotonic() - t0)
        except scratch.DoesNotCompile as exc:
            return Result(m, Verdict(INVALID, str(exc)), time.monotonic() - t0)
        target = scratch.module_name(m.file)
        r = inner.run(
            copy, list(m.node_ids), _args(campaign, m), artifacts / m.id, artifacts / f"{m.id}.log", m.timeout, target
        )
        v = judge(
            killers=m.killers,
            survivors=m.survivors,
            scratch=str(copy),
            target=target,
            timed_out=r.timed_out,
            returncode=r.returncode,
            probe=r.probe,
            imports=r.imports,
            not_found=r.not_found,
        )
        return Result(m, v, r.duration, r.log, r.leaked)
    except Exception as exc:  # one broken mutation must not hide the others' verdicts
        return Result(m, Verdict(INVALID, f"campaign error: {exc!r}"), time.monotonic() - t0)
    finally:
        scratch.remove(copy)


def _gather(fn, items: list, workers: int) -> list:
    """fn over items in a thread pool, in order. On any exception in the waiting thread (an
    interrupt): queued items are cancelled, every live inner run is killed (so the running
    threads end at once, each sweeping its own run's tag and removing its copy), then it
    re-raises once they have."""
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        return [f.result() for f in [pool.submit(fn, x) for x in items]]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        inner.abort_all()
        raise
    finally:
        pool.shutdown(wait=True)


@contextmanager
def _interruptible():
    """SIGTERM and SIGINT raise Interrupted in the main thread, once: a second signal must not
    cut the clean-up short. Outside the main thread (signals cannot be handled there) a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            raise Interrupted(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _after_interrupt() -> None:
    """What the threads could not clean: scratch copies of a copy in progress, and the victims
    of a killed inner pytest that carry no run tag (the env-scrubber's grandchild), which the
    plugin's sweep finds through its owner records once the owner is dead."""
    scratch.remove_all()
    try:
        from pytest_stoplatency import sweep_ownerless_victims
    except ImportError:
        return
    sweep_ownerless_victims()


def run(
    campaign: Campaign,
    root: str | Path,
    *,
    jobs: int = 2,
    artifacts: str | Path,
    only: list[str] | None = None,
    baseline_from: list[str | Path] | None = None,
    progress=None,
) -> Outcome:
    root, artifacts = Path(root).resolve(), Path(artifacts).resolve()
    artifacts.mkdir(parents=True, exist_ok=True)
    mutations = [m for m in campaign.mutations if not only or m.id in only]
    if only and len(mutations) != len(set(only)):
        unknown = sorted(set(only) - {m.id for m in mutations})
        raise ValueError(f"unknown mutation id(s): {unknown}")
    t0 = time.monotonic()
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")

    def one(m):
        res = _one(campaign, m, root, artifacts)
        if progress:
            progress(f"{m.id}: {res.verdict.verdict} ({res.duration:.1f} s)")
        return res

    inner.reset_abort()
    with _interruptible():
        try:
            if not mutations:
                baseline_s = 0.0
            elif baseline_from:
                baseline_s = _suite_baseline(campaign, mutations, root, [Path(f) for f in baseline_from], progress)
            else:
                baseline_s = _baseline(campaign, mutations, root, jobs, artifacts, progress)
            results = _gather(one, mutations, jobs)
        except Interrupted:
            inner.abort_all()  # the interrupt may have landed outside _gather (baseline's copy)
            _after_interrupt()
            raise
    return Outcome(
        results,
        baseline_s,
        time.monotonic() - t0,
        started,
        _git_commit(root),
        _machine(),
        [str(f) for f in baseline_from] if baseline_from else None,
    )
