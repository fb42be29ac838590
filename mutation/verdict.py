"""From one inner run's facts to a verdict. Pure: no processes, no files."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

KILLED, SURVIVED, STALE, INVALID, TIMEOUT = "killed", "survived", "stale", "invalid", "timeout"


@dataclass
class Verdict:
    verdict: str
    detail: str = ""
    killed_by: list[str] = field(default_factory=list)
    survivors_red: list[str] = field(default_factory=list)


def matches(selector: str, nodeid: str) -> bool:
    """A killer names a test, a parametrized test (all its ids) or a class/file."""
    return nodeid == selector or nodeid.startswith(selector + "[") or nodeid.startswith(selector + "::")


def _matching(selector: str, ids) -> list[str]:
    return [n for n in ids if matches(selector, n)]


def _inside(path: str | None, root: str) -> bool:
    if not path:
        return False
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base + os.sep)


def judge(
    *,
    killers,
    survivors,
    scratch: str,
    target: str | None,
    timed_out: bool,
    returncode,
    probe: dict | None,
    imports: list[dict],
    not_found=(),
) -> Verdict:
    if timed_out:
        return Verdict(TIMEOUT, "inner pytest run exceeded its time limit")
    if not_found:
        return Verdict(INVALID, "killer not collected (pytest: not found, nothing ran): " + ", ".join(not_found))
    if probe is None:
        return Verdict(INVALID, f"pytest wrote no probe report (exit code {returncode}): import or usage error")
    if not probe.get("site_probe"):
        return Verdict(INVALID, "the site probe did not load in the pytest process: provenance unproven")
    if probe.get("collect_errors"):
        first = probe["collect_errors"][0]
        return Verdict(INVALID, f"collection error in {first['nodeid'] or '<session>'}")
    collected, outcomes = probe.get("collected", []), probe.get("outcomes", {})
    missing = [k for k in killers if not _matching(k, collected)]
    if missing:
        return Verdict(INVALID, "killer not collected: " + ", ".join(missing))
    if target:
        records = list(imports)
        if probe.get("target_file"):
            records.append({"pid": probe.get("pid"), "file": probe["target_file"]})
        outside = [r for r in records if not _inside(r.get("file"), scratch)]
        if outside:
            r = outside[0]
            return Verdict(INVALID, f"not the scratch copy: pid {r.get('pid')} imported {target} from {r.get('file')}")
        if not records:
            return Verdict(INVALID, f"no probed process imported {target}: the killers never ran the mutated code")

    def failed(sel: str) -> list[str]:
        return [n for n in _matching(sel, collected) if outcomes.get(n, "").startswith("failed")]

    timeouts = set(probe.get("timeouts", []))
    killer_failures = [n for k in killers for n in failed(k)]
    # A kill is an assertion in the killer's own body: a hang (pytest-timeout) is a timeout, and a
    # failing fixture (setup or teardown) does not show that the test noticed the mutation.
    killed_by = [n for n in killer_failures if outcomes[n] == "failed:call" and n not in timeouts]
    survivors_red = [n for s in survivors for n in failed(s)]
    if killed_by:
        return Verdict(KILLED, "", killed_by, survivors_red)
    hung = [n for n in killer_failures if n in timeouts]
    if hung:
        return Verdict(
            TIMEOUT, "killer ended by pytest-timeout (a hang, not a kill): " + ", ".join(hung), [], survivors_red
        )
    if killer_failures:
        where = ", ".join(f"{n} ({outcomes[n].split(':', 1)[1]})" for n in killer_failures)
        return Verdict(INVALID, f"killer failed outside its test body, not a kill: {where}", [], survivors_red)
    detail = (
        "every killer passed"
        if all(outcomes.get(n) == "passed" for k in killers for n in _matching(k, collected))
        else "no killer failed (some skipped)"
    )
    return Verdict(SURVIVED, detail, [], survivors_red)


def suite_baseline_problems(node_ids, probes: dict[str, dict | None], root: str) -> list[str]:
    """Why the suite's own runs of the tree (`make test`, `make examples`, each with the probe
    loaded) are not a valid baseline: each killer and survivor must have run there, and
    passed, in runs started in this very tree. `probes`: file name -> its pytest.json."""
    problems, outcomes = [], {}
    for name, probe in probes.items():
        if probe is None:
            problems.append(f"{name}: not a probe report (missing or unreadable)")
            continue
        where = probe.get("invocation_dir")
        if not where or os.path.realpath(where) != os.path.realpath(root):
            problems.append(f"{name}: a run of {where or 'an unknown tree'}, not of {root}")
            continue
        for err in probe.get("collect_errors", []):
            problems.append(f"{name}: collection error in {err['nodeid'] or '<session>'}")
        outcomes.update(probe.get("outcomes", {}))
    if problems:
        return problems
    for sel in node_ids:
        ids = _matching(sel, outcomes)
        if not ids:
            problems.append(f"not run by the suite: {sel}")
        for n in ids:
            if outcomes[n] != "passed":
                problems.append(f"not green in the suite: {n} ({outcomes[n]})")
    return problems


def baseline_problems(node_ids, probe: dict | None, timed_out: bool, returncode, not_found=()) -> list[str]:
    """Why the unmutated tree is not a valid baseline (empty list: it is)."""
    if timed_out:
        return ["baseline run exceeded its time limit"]
    if not_found:
        return [f"not found (removed from the suite?): {n}" for n in not_found] + [
            "pytest ran nothing of this shard because of the missing node id(s)"
        ]
    if probe is None:
        return [f"pytest wrote no probe report (exit code {returncode})"]
    problems = []
    if not probe.get("site_probe"):
        problems.append("the site probe did not load in the pytest process")
    for err in probe.get("collect_errors", []):
        problems.append(f"collection error in {err['nodeid'] or '<session>'}")
    collected, outcomes = probe.get("collected", []), probe.get("outcomes", {})
    for sel in node_ids:
        ids = _matching(sel, collected)
        if not ids:
            problems.append(f"not collected: {sel}")
        for n in ids:
            if outcomes.get(n) != "passed":
                problems.append(f"not green: {n} ({outcomes.get(n, 'not run')})")
    return problems
