"""Render docs/stop-latency.md from its template, measure.json, mutate.json and the code.

    python docgen/render_stop_latency.py            # write docs/stop-latency.md (make docs)
    python docgen/render_stop_latency.py --check    # fail with a diff if it is stale (make docs-check)

Every figure comes from one of two places and says which: MEASURED (docs/measure.json,
written by `make measure`: test node id, label, n, median, p95, max, machine, date) or
DERIVED (a constant imported from runner.defaults / runner.exitcodes, named with its file).
No number is typed into the template: a duration written in its prose (a number with a
unit, outside placeholders and code) is refused (typed_durations), so a target can only be
stated through {{bound:...}}, which resolves to a constant a test asserts, or
{{derived:...}}. Placeholders:

    {{measured:LABEL}}        the label's figures, or a sentence saying it was not measured
    {{derived:NAME}}          a runner.defaults constant with its provenance
    {{exitcode:NAME}}         a runner.exitcodes.Exit member with its provenance
    {{bound:FILE:NAME}}       a bound a test asserts: the module-level constant NAME of the test
                              file FILE, which that file must use as a `bound=` or in an assert
    {{graceful_worst_case}}   the DERIVED sum call_timeout + hooks + verify commands
    {{graceful_sum}}          the same sum for one hook and one verify command, in a phrase
    {{measurement_source}}    which measure run / mutate run the figures come from
    {{measured_table}}        every label of the measure run (the plugin's own included)
    {{ablation_table}}        the mutate run's verdicts
    {{reliability}}           the `make soak` figures (docs/soak.json), MEASURED
    {{limits}}                the spec's limits (runner.defaults), DERIVED, with the keys they apply to
    {{stop_modes}}            every way to stop a run (runner/events.py WAYS, each with its StopKind):
                              what it signals, its worst case (DERIVED from the kind's terms, lock
                              waits included), its median (MEASURED, test or bench named), its exit
                              codes, resumable
    {{directory_gone}}        what each command does when the run directory goes away before, during
                              or after it, codes checked against docs/exit-codes.md
    {{bench_stoppers}}        the runner's stops beside other stoppers (docs/bench.json), MEASURED
    {{bench_scale_load}}      the stop at 1 to 1,000 processes and with many runs at once
    {{bench_dashboard}}       the dashboard server's CPU with a page open, beside its reference
                              (docs/bench.json), MEASURED
    {{bench_runs}}            list, stop --all, the dashboard's first answer and its memory over
                              polls, with 10, 100 and 500 runs under one directory, before and now,
                              MEASURED
    {{bench_stopper_cost}}    `runner stop --now` on a cooperative run beside `python -c pass`
                              (docs/bench.json, part `cost`), MEASURED
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "docs"  # the documents: templates, data, output
# The defaults are those of the tree this script belongs to, whatever the installed
# `runner` points at (an editable install of another checkout would render its figures).
if str(HERE.parent) not in sys.path[:1]:
    sys.path.insert(0, str(HERE.parent))
DEFAULTS_FILE = "runner/defaults.py"
EXITCODES_FILE = "runner/exitcodes.py"
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)(?::([^}]+?))?\s*\}\}")


class RenderError(ValueError):
    """The template names something the code or the JSON cannot supply."""


def _defaults():
    import runner.defaults  # imported at render time so a monkeypatched default is seen

    return runner.defaults


def _exitcodes():
    import runner.exitcodes

    return runner.exitcodes.Exit


def _seconds(x: float) -> str:
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    return f"{x * 1000:.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"


def _measured(x: float) -> str:
    """A measured duration: milliseconds matter at the scale of seconds too."""
    return f"{x:.3f} s" if 1 <= x < 100 else _seconds(x)


_REPEAT_ID = re.compile(r"-?\brep\d+\b-?")


def _without_repeat(nodeid: str) -> str:
    if not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    head, params = nodeid[:-1].split("[", 1)
    params = _REPEAT_ID.sub(lambda m: "-" if m.group(0).startswith("-") and m.group(0).endswith("-") else "", params)
    return f"{head}[{params}]" if params else head


def _human(x: float) -> str:
    """7200 -> '2 h', 9120 -> '2 h 32 min': the scale a reader feels."""
    if x < 120:
        return _seconds(x)
    if x >= 2 * 86400 and x % 86400 == 0:
        return f"{x / 86400:.0f} days"
    h, rem = divmod(int(round(x)), 3600)
    m = rem // 60
    return " ".join(p for p in (f"{h} h" if h else "", f"{m} min" if m else "") if p)


def _load(path: Path | None) -> dict | None:
    if path is None or not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


_TYPED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds?|min|minutes?|h|hours?|days?)\b", re.IGNORECASE)


def typed_durations(template: str) -> list[str]:
    """The durations typed into a template's prose: a number with a time unit outside
    placeholders, fenced code blocks and inline code. `make docs-check` fails on one: a
    bound is stated with {{bound:...}} (a test's own constant) or not at all."""
    prose = re.sub(r"```.*?```", "", template, flags=re.S)
    prose = _PLACEHOLDER.sub("", prose)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return [m.group(0) for m in _TYPED.finditer(prose)]


def asserted_bound(test_file: str, name: str) -> float:
    """The value of the module-level constant `name` of `test_file` (relative to the
    repository), which the file must use as a bound: `bound=NAME` or within an assert.
    Read with ast and evaluated against runner.defaults (`defaults.X`) and the file's
    earlier constants, never by importing the test module."""
    import ast

    path = HERE.parent / test_file
    if not test_file.startswith("tests/") or not path.is_file():
        raise RenderError(f"{{{{bound:{test_file}:{name}}}}}: no test file {test_file}")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scope: dict[str, object] = {"defaults": _defaults()}
    value = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                scope[node.targets[0].id] = eval(compile(ast.Expression(node.value), test_file, "eval"), dict(scope))
            except Exception:  # noqa: BLE001 - a constant this reader cannot evaluate is simply not one
                continue
            if node.targets[0].id == name:
                value = scope[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RenderError(f"{{{{bound:{test_file}:{name}}}}}: {test_file} has no numeric constant {name}")

    def named(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))

    used = any(
        (isinstance(n, ast.keyword) and n.arg == "bound" and named(n.value)) or (isinstance(n, ast.Assert) and named(n))
        for n in ast.walk(tree)
    )
    if not used:
        raise RenderError(f"{{{{bound:{test_file}:{name}}}}}: no test of {test_file} asserts {name} (bound= or assert)")
    return float(value)


class Context:
    def __init__(
        self,
        measure: dict | None,
        mutate: dict | None,
        measure_name: str = "docs/measure.json",
        mutate_name: str = "docs/mutate.json",
        soak: dict | None = None,
        soak_name: str = "docs/soak.json",
        bench: dict | None = None,
        bench_name: str = "docs/bench.json",
    ):
        self.measure, self.mutate, self.soak, self.bench = measure, mutate, soak, bench
        self.measure_name, self.mutate_name, self.soak_name = measure_name, mutate_name, soak_name
        self.bench_name = bench_name

    # -- MEASURED -------------------------------------------------------------------
    def _run_tag(self) -> str:
        m = self.measure or {}
        mach = m.get("machine", {})
        return (
            f"{mach.get('hostname', '?')}, Linux {mach.get('kernel', '?')}, "
            f"{mach.get('cpus', '?')} CPUs, Python {mach.get('python', '?')}; {m.get('time', '?')}"
        )

    def _nodeids(self, label: str) -> list[str]:
        """The tests behind a label, once each: the repeats of one test
        (`--stop-latency-repeat`, ids `[rep1]`..`[repN]`) name one test."""
        seen: dict[str, None] = {}
        for s in (self.measure or {}).get("samples", []):
            if s.get("label") == label and s.get("nodeid"):
                seen.setdefault(_without_repeat(s["nodeid"]), None)
        return list(seen)

    def measured(self, label: str) -> str:
        stats = (self.measure or {}).get("labels", {}).get(label)
        if not stats:
            where = self.measure_name if self.measure else f"{self.measure_name} (absent)"
            return f'*not measured in the recorded run: no label "{label}" in `{where}`*'
        tests = ", ".join(f"`{n}`" for n in self._nodeids(label)) or "test not recorded"
        bound = f", asserted bound {_seconds(stats['bound'])}" if stats.get("bound") is not None else ""
        return (
            f"**median {_measured(stats['median'])}, p95 {_measured(stats['p95'])}, "
            f'max {_measured(stats["max"])}** (MEASURED: "{label}" by {tests}; '
            f"n={stats['n']}{bound}; {self._run_tag()})"
        )

    def measured_table(self) -> str:
        labels = (self.measure or {}).get("labels", {})
        if not labels:
            return f"*No measure run recorded (`{self.measure_name}` absent or empty): no figure is printed.*"
        rows = ["| label | test | n | median | p95 | max | bound | verdict |", "|---|---|---|---|---|---|---|---|"]
        for label in sorted(labels):
            s = labels[label]
            tests = "<br>".join(f"`{n}`" for n in self._nodeids(label)) or "-"
            bound = _seconds(s["bound"]) if s.get("bound") is not None else "-"
            rows.append(
                f"| {label} | {tests} | {s['n']} | {_measured(s['median'])} | {_measured(s['p95'])} "
                f"| {_measured(s['max'])} | {bound} | {s.get('verdict', '-')} |"
            )
        return "\n".join(rows)

    # -- DERIVED --------------------------------------------------------------------
    def _default(self, name: str):
        d = _defaults()
        if not name.isupper() or not hasattr(d, name):
            raise RenderError(f"template names {name!r}, which {DEFAULTS_FILE} does not define")
        return getattr(d, name)

    def derived(self, name: str) -> str:
        v = self._default(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            shown = f"`{v!r}`"
        elif name.endswith("_BYTES"):
            shown = f"{v:,} bytes"
        elif name.endswith(("_ATTEMPTS", "_COUNT", "_ITEMS", "_DEPTH")):
            shown = f"{v}"
        else:  # every other number of runner/defaults.py is a duration in seconds
            shown = _seconds(float(v))
            if v >= 120:
                shown += f" ({_human(v)})"
        return f"{shown} (DERIVED: `{DEFAULTS_FILE}: {name}`)"

    def bound(self, arg: str) -> str:
        test_file, _, name = arg.rpartition(":")
        value = asserted_bound(test_file, name)
        return f"{_seconds(value)} (ASSERTED: `{test_file}: {name}`)"

    def graceful_sum(self) -> str:
        """The graceful worst case for one hook and one verify command, in a phrase."""
        one = sum(float(self._default(n)) for n in ("CALL_TIMEOUT", "HOOK_TIMEOUT", "VERIFY_TIMEOUT"))
        shown = _seconds(one) + (f" ({_human(one)})" if one >= 120 else "")
        return f"{shown} (DERIVED: `{DEFAULTS_FILE}`: `CALL_TIMEOUT + HOOK_TIMEOUT + VERIFY_TIMEOUT`)"

    def exitcode(self, name: str) -> str:
        Exit = _exitcodes()
        if name not in Exit.__members__:
            raise RenderError(f"template names exit code {name!r}, which {EXITCODES_FILE} does not define")
        return f"`{int(Exit[name])}` (DERIVED: `{EXITCODES_FILE}: Exit.{name}`)"

    def graceful_worst_case(self) -> str:
        call, hook, verify = (float(self._default(n)) for n in ("CALL_TIMEOUT", "HOOK_TIMEOUT", "VERIFY_TIMEOUT"))
        one = call + hook + verify
        return "\n".join(
            [
                "```",
                "graceful worst case = CALL_TIMEOUT + n_post_session_hooks * HOOK_TIMEOUT + n_verify * VERIFY_TIMEOUT",
                f"                    = {call:g} + n_hooks * {hook:g} + n_verify * {verify:g}   (seconds)",
                f"one hook, one verify = {call:g} + {hook:g} + {verify:g} = {one:g} s  ({_human(one)})",
                "```",
                f"**{_seconds(one)} ({_human(one)}) for one post-session hook and one verify command. DERIVED** from "
                f"`{DEFAULTS_FILE}`: `CALL_TIMEOUT`, `HOOK_TIMEOUT`, `VERIFY_TIMEOUT` (each is the default of the "
                "spec key of the same meaning; a spec that sets them changes the sum).",
            ]
        )

    # -- sources and the ablation table -----------------------------------------------
    def measurement_source(self) -> str:
        parts = []
        if self.measure:
            parts.append(
                f"MEASURED figures: `{self.measure_name}`, the `make measure` run of "
                f"{self.measure.get('time', '?')} on {self._run_tag().split(';')[0]}, "
                f"commit `{self.measure.get('git_commit') or 'unknown'}`."
            )
        else:
            parts.append(
                f"MEASURED figures: none (`{self.measure_name}` absent): every measured figure below "
                "says it was not measured."
            )
        if self.mutate:
            parts.append(
                f"Ablations: `{self.mutate_name}`, the `make mutate` run of {self.mutate.get('time', '?')}, "
                f"commit `{self.mutate.get('git_commit') or 'unknown'}`."
            )
        else:
            parts.append(f"Ablations: none recorded (`{self.mutate_name}` absent).")
        if self.bench:
            parts.append(
                f"Benchmarks: `{self.bench_name}`, the `make bench` run of {self.bench.get('date', '?')}, "
                f"commit `{self.bench.get('git_commit') or 'unknown'}`."
            )
        else:
            parts.append(f"Benchmarks: none recorded (`{self.bench_name}` absent).")
        parts.append("DERIVED figures: imported from `runner/defaults.py` and `runner/exitcodes.py` at render time.")
        return "\n".join(f"- {p}" for p in parts)

    def reliability(self) -> str:
        s = self.soak
        if not s:
            return f"*No soak run recorded (`{self.soak_name}` absent): run `make soak`.*"
        crash, hard, now, many = s["crash_and_resume"], s["load_stop"], s["load_stop_now"], s["many_stoppers"]
        commit = s.get("git_commit") or "not recorded in the JSON"
        grace = s.get("kill_grace")
        grace = f"`kill_grace` {grace:g} s" if isinstance(grace, (int, float)) else "`kill_grace` not recorded"
        src = (
            f"MEASURED by `make soak` (`reliability/soak.py`, `{self.soak_name}`, {s.get('date', '?')}, "
            f"{s.get('cpus', '?')} CPUs, seed {s.get('seed')}, commit `{commit}`; every run's {grace}, "
            "a provider that traps SIGTERM, a stop's latency is its command's wall time; "
            'the benchmark\'s "Under load" rows below stop a whole trapping tree at its own kill grace)'
        )
        rows = [
            "| what | figure |",
            "|---|---|",
            f"| engine SIGKILLs at random points, each followed by `runner resume` | {crash['kills']} over "
            f"{crash['runs']} runs ({crash['engine_group_kills']} with the engine's whole group, "
            f"{crash['child_group_kills']} with a call's group too) |",
            "| the phase each kill landed in | "
            + (", ".join(f"{k} {v}" for k, v in crash.get("phases", {}).items()) or "not recorded")
            + " |",
            f"| torn or unreadable state, lost or re-run items, leftovers after resume | {len(crash['problems'])} |",
            f"| {hard['runs']} runs stopped at once by `runner stop` | median {_human(hard['median_s'])}, "
            f"p95 {_human(hard['p95_s'])}; exit codes {hard['codes']}; problems {len(hard['problems'])} |",
            f"| {now['runs']} runs stopped at once by `runner stop --now` | median {_human(now['median_s'])}, "
            f"p95 {_human(now['p95_s'])}; exit codes {now['codes']}; problems {len(now['problems'])} |",
            f"| {many['stoppers']} concurrent stoppers (hard, `--now`, graceful) on one run | exit codes "
            f"{many['codes']}; problems {len(many['problems'])} |",
        ]
        modes, all_now = s.get("stop_modes"), s.get("all_now")
        if modes:
            # reliability/modes.py: every way to stop a run, every victim, both containments.
            for mode, m in modes["modes"].items():
                rows.append(
                    f"| stop mode `{mode}`, every victim and containment (reliability/modes.py) | "
                    f"{m['trials']} trials; "
                    f"{m['with_problems']} broke an invariant; {m['exit0_with_something_left']} exit 0 with "
                    f"something left; exit codes {m['codes']} |"
                )
        if all_now:
            rows.append(
                f"| {all_now['runs']} runs stopped by one `runner stop --all --now` | {all_now['with_a_failure']} "
                f"with a session or item recorded failed; exit {all_now['code']} |"
            )
        return (
            src
            + ":\n\n"
            + "\n".join(rows)
            + self._faults(s.get("faults"), (s.get("disk_and_pidns_faults") or {}).get("faults"))
            + self._seams(s.get("seam_faults"))
        )

    def _seams(self, seams: dict | None) -> str:
        """The faults at the seams (reliability/soak_seams.py, issue 27): one row per fault, with
        its own figure (a bound, a backup's bytes, a refusal's bytes)."""
        faults = (seams or {}).get("faults") or {}
        skipped = (seams or {}).get("skipped") or {}
        if not faults and not skipped:
            return ""
        rows = [
            "",
            "",
            "Faults at the seams, from the same soak (`reliability/soak_seams.py`): per fault, the trials, the "
            "processes of the run and the cgroups left, every exit code seen and how many of them "
            "docs/exit-codes.md does not list for that command (INTERNAL never counts as listed), and "
            "the fault's own figure.",
            "",
            "| fault | trials | processes left | cgroups left | exit codes (not listed) | figure |",
            "|---|---|---|---|---|---|",
        ]
        for what, f in faults.items():
            codes = sorted(int(c) for c in f.get("codes", {}))
            figure = []
            if "max_s" in f:
                figure.append(
                    f"slowest {_human(f['max_s'])} (bound {_human(f['bound_s'])}); over the bound "
                    f"{f.get('over_bound', 0)}"
                )
            if "not_one_line" in f:
                figure.append(f"not one line {f['not_one_line']}")
            if f.get("rm_again"):
                figure.append(f"`rm -rf` run again {f['rm_again']} (a file made meanwhile)")
            if "backups_changed" in f:
                figure.append(f"backups changed {f['backups_changed']}")
            if "bytes_changed" in f:
                figure.append(f"names or bytes changed {f['bytes_changed']}; not refused {f.get('not_refused', 0)}")
            rows.append(
                f"| {what} | {f['trials']} | {f['processes_left']} | {f.get('cgroups_left', 0)} "
                f"| {codes} ({f.get('undocumented', 0)}) | {'; '.join(figure) or '-'} |"
            )
        for what, why in sorted(skipped.items()):
            rows.append(f"| {what} | skipped: {why} | | | | |")
        return "\n".join(rows)

    _FAULTS = (
        ("stopper_sigkill", "a stopper (`--now` or plain) SIGKILLed at a random moment, then a plain `runner stop`"),
        ("stopper_sigint", "a stopper (`--now` or plain) SIGINTed at a random moment, then a plain `runner stop`"),
        ("fork_storm", "a fork storm (SIGTERM ignored, setsid, re-fork) without a cgroup, `runner stop --now`"),
        ("early_sigterm_foreground", "SIGTERM to a foreground `runner run` at 0.02 to 1 s after its start"),
        ("early_sigterm_pid1", "SIGTERM to `runner run` as PID 1 of a pid namespace at 0.02 to 1 s after its start"),
        (
            "run_local_sigterm",
            "SIGTERM to the PID 1 (tini) of the container recipe's entrypoint under `examples/kubernetes/run-local`, "
            "at each moment after PID 1 came to exist",
        ),
        ("run_local_sigterm_hog", "the same, beside two CPU hogs"),
    )

    def _faults(self, faults: dict | None, disk: dict | None = None) -> str:
        """The stop under faults (reliability/faults.py, reliability/soak_disk.py): one row per fault,
        when the soak ran them."""
        if not faults and not disk:
            return ""
        faults = faults or {}
        rows = [
            "",
            "",
            "The stop under faults, from the same soak: per fault, the trials, the runs left running, "
            "the processes of the run left, the stops that exited 0 with something left, the stops not "
            "recorded, and every exit code seen (the first stopper's too; -9 is its SIGKILL).",
            "",
            "| fault | trials | runs left running | processes left | exit 0, something left | stops not recorded "
            "| exit codes |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, what in self._FAULTS:
            f = faults.get(key)
            if not f:
                continue
            note = ""
            early = f.get("before_first_instruction")
            if early and key.endswith("pid1"):
                note = (
                    f" ({early} of the signals would have fallen in the interpreter's start-up, before the "
                    "runner's first instruction, where the kernel drops an init's SIGTERM: they were sent "
                    "once the mask was in place)"
                )
            elif early:
                note = (
                    f" ({early} of the signals fell in the interpreter's start-up, before the runner's first "
                    "instruction: the command died of it (-15) having started nothing)"
                )
            if f.get("max_stop_s") is not None:
                note += f"; slowest stop {_human(f['max_stop_s'])} after the signal or the engine's start"
            if f.get("by_moment"):
                note = "; per moment: " + ", ".join(
                    f"{_seconds(float(at))}: {m['trials']} ({m['stopped']} stopped and recorded, "
                    f"{m['never_started']} never started"
                    + (f", **{m['problems']} otherwise**" if m["problems"] else "")
                    + ")"
                    for at, m in f["by_moment"].items()
                )
                note += (
                    " (never started: tini's 143, the SIGTERM ended the entrypoint before `runner`'s first instruction)"
                )
            rows.append(
                f"| {what}{note} | {f['trials']} | {f['runs_left_running']} | {f['processes_left']} "
                f"| {f['exit0_with_something_left']} | {f['stops_not_recorded']} | {f['codes']} |"
            )
        for what, f in sorted((disk or {}).items()):
            if "trials" not in f or "codes" not in f:
                continue
            codes = sorted(int(c) for c in f["codes"])
            if "read-only" in what:
                what += " (exit NOT_RECORDED: its one line says the stop could not be recorded, and why)"
            rows.append(
                f"| {what} | {f['trials']} | {f['runs_left_running']} | {f['processes_left']} "
                f"| {f['exit0_with_something_left']} | {f['stops_not_recorded']} | {codes} |"
            )
        resumed = (disk or {}).get("resume after space freed")
        if resumed:
            rows += [
                "",
                f"After the disk was full at the stop, space freed: {resumed['completed']} of "
                f"{resumed['trials']} runs resumed and completed.",
            ]
        return "\n".join(rows)

    # -- the benchmark (docs/bench.json, `make bench`) --------------------------------
    def _bench_part(self, part: str) -> dict | None:
        return (self.bench or {}).get(part) or None

    def _bench_absent(self, what: str) -> str:
        if not self.bench:
            return (
                f"*{what}: not measured: no benchmark run recorded (`{self.bench_name}` absent); "
                "`make bench` writes it.*"
            )
        return f"*{what}: not measured: the run recorded in `{self.bench_name}` has no such part.*"

    def _bench_tag(self) -> str:
        b = self.bench or {}
        mach = b.get("machine", {})
        kind = "a reduced CI run of `make bench`" if b.get("ci") else "`make bench`"
        load = mach.get("loadavg_at_start")
        load = f", load average {load[0]:g} at start" if load else ""
        grace = b.get("kill_grace")
        grace = f"{grace:g} s" if isinstance(grace, (int, float)) else "?"
        return (
            f"MEASURED by {kind}, bench `python -m bench.stoppers` (`{self.bench_name}`, {b.get('date', '?')}; "
            f"{mach.get('hostname', '?')}, "
            f"Linux {mach.get('kernel', '?')}, {mach.get('cpus', '?')} CPUs{load}, Python {mach.get('python', '?')}; "
            f"commit `{b.get('git_commit') or 'unknown'}`; kill grace {grace} for every stopper)"
        )

    @staticmethod
    def _bench_cell(cell: dict) -> str:
        if not cell.get("n"):
            return "not measured (" + "; ".join(cell.get("errors") or ["no sample"]) + ")"
        text = f"{cell['stopped']}/{cell['n']} stopped"
        if cell["stopped"]:
            text += f", median {_measured(cell['median_s'])}, max {_measured(cell['max_s'])}"
        if cell["orphans"]:
            text += f"; **{cell['orphans']} orphan{'s' if cell['orphans'] != 1 else ''} left**"
        if cell.get("errors"):
            text += f"; {len(cell['errors'])} sample(s) failed: " + "; ".join(cell["errors"])
        return text

    def bench_stoppers(self) -> str:
        part = self._bench_part("stoppers")
        if not part:
            return self._bench_absent("The stoppers compared")
        victims = part["victims"]
        rows = [
            "| stopper | " + " | ".join(v["label"] for v in victims) + " |",
            "|---" * (len(victims) + 1) + "|",
        ]
        for s in part["stoppers"]:
            if s.get("skipped"):
                rows.append(f"| {s['label']} | not measured: {s['skipped']} |" + " - |" * (len(victims) - 1))
                continue
            cells = part["cells"][s["id"]]
            rows.append(f"| {s['label']} | " + " | ".join(self._bench_cell(cells[v["id"]]) for v in victims) + " |")
        how = "\n".join(f"- {s['label']}: {s['how']}" for s in part["stoppers"])
        return (
            f"{self._bench_tag()}; n={part['n']} per cell. A tree is stopped when the stopper has returned "
            "and no process of the tree is left; the latency runs from the stop's first action until both "
            "are true (median and max over the stopped samples). An orphan is a process of the tree still "
            f"alive {_seconds(part['settle_s'])} after the stopper returned, found by the tree's marker in "
            "its argv (the environment alone would miss the env-scrubber's grandchild).\n\n"
            + "\n".join(rows)
            + "\n\nWhat each stopper does:\n\n"
            + how
        )

    @staticmethod
    def _bench_figure(summary: dict, n: int | None = None) -> str:
        if summary.get("median_s") is None:
            return "not stopped"
        shown = f"median {_measured(summary['median_s'])}, max {_measured(summary['max_s'])}"
        return shown + (f" (n={n})" if n is not None else "")

    def _bench_scale(self) -> str:
        part = self._bench_part("scale")
        if not part:
            return self._bench_absent("At scale")
        rows = [
            "| processes in the tree | raw `killpg(SIGKILL)` | `runner stop --now`: forced phase minus kill grace "
            "| `runner stop --now` end to end | runner / raw (medians) | orphans (raw, runner) |",
            "|---|---|---|---|---|---|",
        ]
        for r in part["rows"]:
            ratio = f"{r['ratio']:.2f}×" if r.get("ratio") is not None else "-"
            rows.append(
                f"| {r['processes']:,} | {self._bench_figure(r['raw'], r['raw']['n'])} "
                f"| {self._bench_figure(r['runner_forced_minus_grace'], r['runner_forced_minus_grace']['n'])} "
                f"| {self._bench_figure(r['runner_end_to_end'], r['runner_end_to_end']['n'])} | {ratio} "
                f"| {r['raw']['orphans']}, {r['runner_end_to_end']['orphans']} |"
            )
        return (
            f"**At scale.** The tree: one {part['tree']} of N processes, every one trapping SIGTERM, "
            "all in one process group. Raw: one `killpg(SIGKILL)` until the last process is dead. Runner: "
            "a real run whose provider is the tree; its forced phase is the time `runner stop --now` reports, "
            "minus the kill grace it waits out before its SIGKILL (every process traps SIGTERM). "
            "Both sides in the same run, alternating.\n\n" + "\n".join(rows)
        )

    def _bench_load(self) -> str:
        part = self._bench_part("load")
        if not part:
            return self._bench_absent("Under load")
        rows = [
            "| stopped by | runs stopped | latency per run | p95 | slowest stop command | exit codes | orphans |",
            "|---|---|---|---|---|---|---|",
        ]
        for m in part["modes"]:
            mode = m["mode"]
            label = f"`runner {mode}`" + (" (one command)" if "--all" in mode else " (one command per run)")
            if "skipped" in m:
                rows.append(f"| {label} | not measured: {m['skipped']} | - | - | - | - | - |")
                continue
            p95 = _measured(m["p95_s"]) if m.get("p95_s") is not None else "-"
            slowest = _measured(m["command_max_s"]) if m.get("command_max_s") is not None else "-"
            # n counts runs, not commands: one `--all` command stops them all.
            if m.get("commands") == 1:
                figure = f"{_measured(m['max_s'])} (n=1: one command for {m['runs']} runs, each done when it returned)"
            else:
                figure = self._bench_figure(m) + f" (n={m['n']} runs, one command each)"
            rows.append(
                f"| {label} | {m['stopped']}/{m['runs']} | {figure} | {p95} "
                f"| {slowest} | {m['codes']} | {m['orphans']} |"
            )
        return (
            f"**Under load.** {part['runs']} runs live at once, each with its own {part['tree']} tree as "
            "its provider, released together; a run's latency runs from the release until its stop command "
            "has returned and no process of its tree is left. Exit code -1: a stop command the benchmark "
            f"killed after {_seconds(part.get('command_wait_s', 0))} (its run counts as not stopped).\n\n"
            + "\n".join(rows)
        )

    def bench_scale_load(self) -> str:
        if not self.bench:
            return self._bench_absent("At scale and under load")
        return f"{self._bench_tag()}.\n\n" + self._bench_scale() + "\n\n" + self._bench_load()

    def _part_tag(self, part: dict) -> str:
        b = self.bench or {}
        mach = b.get("machine", {})
        load = part.get("loadavg_at_start")
        load = f", load average {load[0]:g} at start" if load else ""
        return (
            f"MEASURED by `make bench`, bench `python -m bench.stoppers` (`{self.bench_name}`, "
            f"{part.get('date', '?')}; {mach.get('hostname', '?')}, "
            f"{mach.get('cpus', '?')} CPUs{load}; commit `{part.get('git_commit') or 'unknown'}`)"
        )

    def bench_sizes(self) -> str:
        items, journal = self._bench_part("items"), self._bench_part("journal")
        out = []
        if not items:
            out.append(self._bench_absent("Items"))
        else:
            rows = [
                "| items | done in the window | items per second | of the bare loop's spawns per second "
                "| engine CPU per item | engine peak memory |",
                "|---|---|---|---|---|---|",
            ]
            for r in items["rows"]:
                rate = f"{r['items_per_second']:g}" if r.get("items_per_second") else "-"
                share = f"{r['of_bare_loop']:.0%}" if r.get("of_bare_loop") else "-"
                cpu = f"{r['engine_cpu_ms_per_item']:g} ms" if r.get("engine_cpu_ms_per_item") else "-"
                peak = f"{r['engine_peak_mb']:g} MB" if r.get("engine_peak_mb") else "-"
                done = f"{r['done']:,}" + (" (all)" if r.get("completed") else "")
                rows.append(f"| {r['items']:,} | {done} | {rate} | {share} | {cpu} | {peak} |")
            bare = items.get("bare_loop_per_second")
            bare_text = (
                f" The physical limit beside it: a bare loop that spawns the same `true` the same way (its own "
                f"session, its output to a file, waited for) and nothing else spawned {bare:g} a second "
                "(the best of three runs of it, before, between and after the items); the share is the items' "
                "rate over it."
                if bare
                else " (No bare loop in this run.)"
            )
            out.append(
                f"**Items.** {self._part_tag(items)}. A spec of N items whose provider is `true`, run "
                f"detached for at most {_seconds(items['window'])}, each count twice in alternating order "
                "(the row: the sample of the higher rate); items per second from the journal (items done "
                "after the first, over the time from the first `item-done` to the last); the engine's own CPU "
                "time per item over the same span (what a loaded machine changes least); the engine's peak "
                "memory is its VmHWM." + bare_text + "\n\n" + "\n".join(rows)
            )
        if not journal:
            out.append(self._bench_absent("Journal size"))
        else:
            sides = [journal["fresh"], *journal["large"]]
            head = ["fresh run"] + [f"journal of {s['journal_bytes'] / (1 << 20):,.0f} MiB" for s in journal["large"]]
            rows = ["| command | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
            labels = {
                "stop": "`runner stop` (live run)",
                "stop_now": "`runner stop --now` (live run)",
                "stop_stopped": "`runner stop` again (stopped run)",
                "status": "`runner status --json`",
                "list": "`runner list`",
                "logs": "`runner logs`",
            }
            for key, label in labels.items():
                cells = [
                    f"{_measured(s[key]['seconds'])}, {s[key]['max_rss_mb']:g} MB, exit {s[key]['rc']}" for s in sides
                ]
                rows.append(f"| {label} | " + " | ".join(cells) + " |")
            out.append(
                f"**Journal size.** {self._part_tag(journal)}. Live runs (provider `sleep`); the large ones' "
                "journals padded, in the current attempt, with `hook-result` records. Each command: wall time, "
                "peak memory (its `ru_maxrss`, forked from a small process of the benchmark's, whose own few MB it "
                "counts), exit code; the median of three for the commands that leave the run as it was. Exit 6 "
                "(NO_LIVE_RUN): the second `runner stop` finds the run already stopped.\n\n" + "\n".join(rows)
            )
        return "\n\n".join(out)

    def bench_dashboard(self) -> str:
        part = self._bench_part("dashboard")
        if not part:
            return self._bench_absent("The dashboard with a page open")
        from runner.dashboard import connections  # the tree's own limits, as _defaults()

        sides = part.get("sides", {})
        labels = {
            "previous": f"before (commit `{str(part.get('reference_commit'))[:10]}`), polled as its page polled",
            "unconditional": "now, polled without `If-None-Match` (every answer a 200 with the body)",
            "conditional": "now, polled as its page polls (the ETag sent back: 304 while nothing changed)",
        }
        rows = [
            "| dashboard | server CPU (of one core) | CPU per poll | polls per second | answered 304 "
            "| bytes per poll |",
            "|---|---|---|---|---|---|",
        ]
        rows += [f"| {label} " + _dashboard_side(sides.get(key)) for key, label in labels.items()]
        return (
            f"{self._part_tag(part)}. {part['runs']} real runs under the dashboard's directory ({part['live']} of "
            f"them live), one client polling `/api/runs` as the page does (every {part['poll_ms']} ms after the "
            "previous answer, on one keep-alive connection); the server process's own CPU time "
            "(`/proc/PID/stat`) over the measured window, the three sides one after the other on the same "
            "runs. "
            f"The server's limits (DERIVED, `runner/dashboard/connections.py`): {connections.WORKERS} worker threads "
            f"whatever the number of connections; a connection idle for {_seconds(connections.IDLE_TIMEOUT)}, or "
            f"whose request has not arrived whole within {_seconds(connections.REQUEST_TIMEOUT)}, is closed; at most "
            f"{connections.MAX_CONNECTIONS} connections.\n\n" + "\n".join(rows)
        )

    def bench_runs(self) -> str:
        part = self._bench_part("runs")
        if not part:
            return self._bench_absent("Many runs under one directory")
        ms = _measured

        def cell(x: dict) -> str:
            return f"{ms(x['seconds'])} ({ms(x['cpu_s'])} CPU)"

        def memory(m: dict) -> str:
            return f"{m['rss_first_mb']:g} → {m['rss_last_mb']:g} MB (range {m['rss_max_mb'] - m['rss_min_mb']:.1f} MB)"

        rows = [
            "| runs | runner | `runner list` | `runner stop --all` (nothing live) | first `/api/runs` "
            "| server memory over the polls, as the page polls | the same, without `If-None-Match` |",
            "|---|---|---|---|---|---|---|",
        ]
        names = {"before": f"before (commit `{str(part.get('reference_commit'))[:10]}`)", "now": "now"}
        for r in part["rows"]:
            for side in ("before", "now"):
                s = r["sides"].get(side)
                if s:
                    rows.append(
                        f"| {r['runs']:,} | {names[side]} | {cell(s['list'])} | {cell(s['stop_all'])} "
                        f"| {cell(s['first_poll'])} | {memory(s['memory_page'])} | "
                        f"{memory(s['memory_unconditional'])} |"
                    )
        missing = (
            f" ({part['reference_missing']}: the before side is missing.)" if part.get("reference_missing") else ""
        )
        return (
            f"{self._part_tag(part)}. Real finished runs (three items each) under one directory, each side's made by "
            "its own runner; both sides run as `python -m runner` from their own tree, one after the other. "
            f"`runner list` and `stop --all`: the median of {part['repeats']} (wall time, and the command's own CPU "
            "time, which a loaded machine stretches much less); `stop --all` exits 6 (NO_LIVE_RUN) with nothing live. "
            f"First `/api/runs`: a server just started, request to last byte, the median of {part['repeats']} "
            "servers (and the server's CPU for it). Server memory: its VmRSS after the first poll → after the "
            f"last, and its range over {part['polls']:,} polls back to back on one connection, "
            f"{part['live_while_polled']} runs live beside the finished ones." + missing + "\n\n" + "\n".join(rows)
        )

    def bench_container_init(self) -> str:
        part = self._bench_part("pid1")
        if not part:
            return self._bench_absent("A container's PID 1")
        if part.get("skipped"):
            return f"*A container's PID 1: not measured ({part['skipped']}).*"
        rows = [
            "| PID 1 | beside | n | seen deaf for at least: median, max | deaf for at most: median, p95, max |",
            "|---|---|---|---|---|",
        ]
        names = {
            "runner": "`runner` (no init)",
            "tini": "`tini` (the recipe's)",
            "tini-static": "`tini-static`",
        }
        for r in part["rows"]:
            name = names.get(r["pid1"], f"`{r['pid1']}`")
            if r.get("skipped"):
                rows.append(f"| {name} | not measured: {r['skipped']} | | | |")
                continue
            lo, hi = r["at_least"], r["at_most"]
            beside = "two CPU hogs" if r["cpu_hogs"] else "nothing"
            failed = f" ({len(r['errors'])} samples failed)" if r.get("errors") else ""
            if not hi["n"]:
                rows.append(f"| {name} | {beside} | 0{failed} | - | - |")
                continue
            rows.append(
                f"| {name} | {beside} | {hi['n']}{failed} | {_measured(lo['median_s'])}, {_measured(lo['max_s'])} "
                f"| {_measured(hi['median_s'])}, {_measured(hi['p95_s'])}, {_measured(hi['max_s'])} |"
            )
        return (
            f"{self._part_tag(part)}; `bench/pid1_window.py`. Each sample starts `unshare --pid --fork "
            "--mount-proc PID1` with nothing blocked, as a container runtime does, and reads PID 1's "
            '`/proc/PID/status` as fast as the benchmark can: "seen deaf for at least" spans the samples '
            "that showed it exec'd with SIGTERM neither blocked nor caught (0: none fell in the window); "
            '"deaf for at most" runs from the last moment it had not exec\'d to the first sample showing '
            "SIGTERM held, and grows when the benchmark itself is kept off the CPU.\n\n" + "\n".join(rows)
        )

    # -- issue 20's goals beside their figures (bench/goals.py, in docs/bench.json) ------
    _FAIR = (
        ("runner-engine-sigterm", "SIGTERM to the engine"),
        ("runner-stop", "`runner stop`"),
        ("runner-stop-now", "`runner stop --now`"),
        ("timeout", "`timeout -k`"),
        ("tini-pid1", "tini, PID 1"),
    )

    def _cell_median(self, stopper: str, victim: str) -> float | None:
        cells = (self._bench_part("stoppers") or {}).get("cells", {})
        cell = cells.get(stopper, {}).get(victim)
        if not cell or not cell.get("n") or cell["stopped"] < cell["n"] or cell.get("orphans"):
            return None
        return cell["median_s"]

    @staticmethod
    def _verdict(value: float | None, goal: float, *, at_least: bool = False) -> str:
        if value is None:
            return "not measured"
        return "met" if (value >= goal if at_least else value <= goal) else "**not met**"

    def _fair_table(self) -> str:
        part = self._bench_part("stoppers")
        if not part:
            return self._bench_absent("SIGTERM to the engine")
        present = [(sid, label) for sid, label in self._FAIR if sid in part["cells"]]
        victims = [v for v in part["victims"] if v["kind"] in ("cooperative", "trap-term", "forker")]
        rows = [
            "| victim tree | " + " | ".join(label for _, label in present) + " |",
            "|---" * (len(present) + 1) + "|",
        ]
        for v in victims:
            cells = [self._bench_cell(part["cells"][sid][v["id"]]) for sid, _ in present]
            rows.append(f"| {v['label']} | " + " | ".join(cells) + " |")
        return "\n".join(rows)

    def _goal_rows(self, goals: dict, grace: float) -> list[tuple[str, float | None, str, str]]:
        """(what, measured, goal as text, verdict) for each goal of the stop and the sizes."""
        ms = _measured
        out: list[tuple[str, float | None, str, str]] = []
        for victim, label in (
            ("cooperative", "cooperative"),
            ("bash-trap", "bash trap"),
            ("python-trap-kids", "python trap + 3 kids"),
        ):
            trapping = victim != "cooperative"
            for sid, who, key in (
                ("runner-engine-sigterm", "SIGTERM to the engine", "engine_sigterm"),
                ("runner-stop", "`runner stop`", "runner_stop"),
                ("runner-stop-now", "`runner stop --now`", "runner_stop"),
            ):
                goal = goals.get(f"{key}_trapping_over_grace_s" if trapping else f"{key}_cooperative_s")
                if goal is None:
                    continue
                if victim not in (self._bench_part("stoppers") or {}).get("cells", {}).get(sid, {}):
                    continue  # this run left that cell out
                value = self._cell_median(sid, victim)
                shown = None if value is None else (value - grace if trapping else value)
                text = f"kill grace + {ms(goal)}" if trapping else ms(goal)
                figure = "not measured" if value is None else (f"kill grace + {ms(shown)}" if trapping else ms(value))
                out.append(
                    (f"{who}, {label} (median)", shown, f"within {text}", figure + " · " + self._verdict(shown, goal))
                )
        return out

    def bench_stopper_cost(self) -> str:
        """The stopper's own cost beside a bare Python start-up (bench part `cost`)."""
        part = self._bench_part("cost")
        if not part:
            return self._bench_absent("The stopper's own cost")
        ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
        b, s = part["bare_python"], part["stop_now"]
        load = ", ".join(f"{x:.2f}" for x in part.get("loadavg_at_start", []))
        cpu = f"{part['startups_cpu']:.2f}" if part.get("startups_cpu") is not None else ""
        command = part.get("command", "python -m runner")
        i = part.get("imports_only")
        imports = (
            f"| its start-up and imports alone (nothing run) | {ms(i['wall_median_s'])} | {ms(i['cpu_median_s'])} |\n"
            if i
            else ""
        )
        return (
            f"MEASURED: n={part['n']} each, `{self.bench_name}` ({part.get('date', '?')}, load average "
            f"at the start {load or '?'}).\n\n"
            "| command | wall (median) | CPU (median) |\n|---|---|---|\n"
            f"| `python -c pass` | {ms(b['wall_median_s'])} | {ms(b['cpu_median_s'])} |\n"
            f"{imports}"
            f"| `{command} stop --now`, cooperative run | {ms(s['wall_median_s'])} | {ms(s['cpu_median_s'])} |\n"
            f"| in Python start-ups | {part['startups']:.2f} (goal 2) | {cpu} |"
        )

    def bench_goals(self) -> str:
        b = self.bench or {}
        goals = b.get("goals")
        if not goals:
            return self._bench_absent("The goals")
        grace = b.get("kill_grace") or 0.0
        rows = ["| what | goal | measured · verdict |", "|---|---|---|"]
        for what, _, goal, shown in self._goal_rows(goals, grace):
            rows.append(f"| {what} | {goal} | {shown} |")
        scale = self._bench_part("scale")
        biggest = max((scale or {}).get("rows", []), key=lambda r: r["processes"], default=None)
        ratio = biggest.get("ratio") if biggest else None
        rows.append(
            f"| {biggest['processes']:,} processes: `runner stop --now` forced phase over raw `killpg` (medians) "
            f"| at most {goals['scale_ratio_to_killpg']:g}× | "
            + (
                f"{ratio:.2f}× · {self._verdict(ratio, goals['scale_ratio_to_killpg'])} |"
                if ratio
                else "not measured |"
            )
            if biggest
            else "| 1,000 processes | - | not measured |"
        )
        items = self._bench_part("items")
        if items:
            by = {r["items"]: r for r in items["rows"]}
            base = (by.get(100) or {}).get("items_per_second")
            for n, r in sorted(by.items()):
                if n == 100:
                    continue
                rate = r.get("items_per_second")
                if base and rate:
                    frac = rate / base
                    want = goals["items_rate_fraction_of_100"]
                    rows.append(
                        f"| {n:,} items: rate over the 100-item rate | at least {want:.0%} "
                        f"| {frac:.0%} ({rate:g} / {base:g} items/s) · {self._verdict(frac, want, at_least=True)} |"
                    )
                if n == 5000:
                    want = goals["items_per_second_at_5000"]
                    rows.append(
                        f"| 5,000 items: items per second | at least {want:g} "
                        f"| {rate if rate else '-'} · {self._verdict(rate, want, at_least=True)} |"
                    )
                if n == 20000:
                    peak = r.get("engine_peak_mb")
                    rows.append(
                        f"| 20,000 items: engine peak memory | under {goals['items_peak_mb_at_20000']:g} MB "
                        f"| {peak if peak else '-'} MB · {self._verdict(peak, goals['items_peak_mb_at_20000'])} |"
                    )
            if 50000 in by and "items_peak_mb_at_50000" in goals:
                peak = by[50000].get("engine_peak_mb")
                want = goals["items_peak_mb_at_50000"]
                rows.append(
                    f"| 50,000 items: engine peak memory | under {want:g} MB "
                    f"| {peak if peak else '-'} MB · {self._verdict(peak, want)} |"
                )
        many = self._bench_part("runs")
        if many and "list_s_at_500_runs" in goals:
            at = next((r for r in many["rows"] if r["runs"] == 500), None)
            now = (at or {}).get("sides", {}).get("now")
            if now:
                for key, what, goal in (
                    ("list", "`runner list`", "list_s_at_500_runs"),
                    ("first_poll", "the dashboard's first `/api/runs`", "first_poll_s_at_500_runs"),
                    ("stop_all", "`runner stop --all` (nothing live)", "stop_all_s_at_500_runs"),
                ):
                    value, cpu = now[key]["seconds"], now[key]["cpu_s"]
                    rows.append(
                        f"| 500 runs: {what} | within {_measured(goals[goal])} "
                        f"| {_measured(value)} ({_measured(cpu)} of CPU) · {self._verdict(value, goals[goal])} |"
                    )
                for key, how in (("memory_page", "as the page polls"), ("memory_unconditional", "without an ETag")):
                    m = now[key]
                    # The farthest the server's memory went from where the first poll left it.
                    off = round(max(m["rss_max_mb"] - m["rss_first_mb"], m["rss_first_mb"] - m["rss_min_mb"]), 1)
                    rows.append(
                        f"| 500 runs: the dashboard server's memory over {m['polls']:,} polls, {how} "
                        f"| within ±{goals['poll_memory_mb']:g} MB of the first poll's | at most {off:g} MB off · "
                        f"{self._verdict(off, goals['poll_memory_mb'])} |"
                    )
        journal = self._bench_part("journal")
        if journal and journal.get("large"):
            fresh, big = journal["fresh"], max(journal["large"], key=lambda s: s["journal_bytes"])
            keys = ("stop", "stop_now", "stop_stopped", "status", "list", "logs")
            extra = max(big[k]["seconds"] - fresh[k]["seconds"] for k in keys)
            peak = max(big[k]["max_rss_mb"] for k in keys)
            size = f"{big['journal_bytes'] / (1 << 20):,.0f} MiB"
            want = goals["journal_extra_s"]
            sign = "+" if extra >= 0 else "−"
            rows.append(
                f"| journal of {size}: slowest command over the fresh run's | within {_measured(want)} "
                f"| {sign}{_measured(abs(extra))} · {self._verdict(extra, want)} |"
            )
            rows.append(
                f"| journal of {size}: highest peak memory of a command | under {goals['journal_peak_mb']:g} MB "
                f"| {peak:g} MB · {self._verdict(peak, goals['journal_peak_mb'])} |"
            )
        plugin = self._bench_part("plugin")
        if plugin:
            cost, noise = plugin["cost_cpu_s"], plugin["noise_cpu_s"]
            met = "met" if cost <= max(goals["plugin_idle_cost_s"], noise) else "**not met**"
            rows.append(
                f"| the plugin installed but unused: CPU per session over `-p no:stoplatency` | within noise or "
                f"{_measured(goals['plugin_idle_cost_s'])} | {'+' if cost >= 0 else '−'}{_measured(abs(cost))} "
                f"(noise ±{_measured(noise)}) · {met} |"
            )
        out = [
            f"{self._bench_tag()}. Each figure from the same run as its reference; the goals are issues 20's and 32's "
            "(`bench/goals.py`, written into the JSON with the run). The machine's load varies during a run: "
            "the medians are what to read.",
            "\n".join(rows),
            "**SIGTERM to the engine**, beside the runner's own stops and the stoppers that are already running "
            "when the stop arrives (`timeout`, tini): the engine gets the SIGTERM a container runtime, systemd or "
            "`kill` sends; the stop is over when the engine has exited and no process of the tree is left.",
            self._fair_table(),
        ]
        if plugin:
            ms = _measured
            on, off = plugin["installed"], plugin["disabled"]
            out.append(
                f"**The plugin, installed but unused.** {self._part_tag(plugin)}. `{plugin['command']}` of one "
                f"passing test, {plugin['rounds']} sessions a side, alternating; CPU is the session's user + system "
                "time (its children's too).\n\n"
                "| session | wall (median) | CPU (median) |\n|---|---|---|\n"
                f"| plugin installed, unused | {ms(on['wall_median_s'])} | {ms(on['cpu_median_s'])} |\n"
                f"| `-p no:stoplatency` | {ms(off['wall_median_s'])} | {ms(off['cpu_median_s'])} |\n"
                f"| difference (median of the pairs) | {ms(plugin['cost_wall_s'])} | {ms(plugin['cost_cpu_s'])} |"
            )
        return "\n\n".join(out)

    def limits(self) -> str:
        """The spec's limits, each with the keys it applies to: docs/spec.md's list, from
        runner/files/spec.py's SCHEMA (docgen/render_spec.py)."""
        here = str(Path(__file__).resolve().parent)  # docgen/, beside this renderer
        if here not in sys.path:
            sys.path.append(here)
        import render_spec

        return render_spec.Context().spec_limits()

    # -- the ways to stop a run ------------------------------------------------------
    _LOCK_WAITS = ("REQUEST_LOCK_WAIT", "LOCK_WAIT")
    """The worst-case terms that are waits for a lock another stopper (or the engine) holds."""

    def _worst(self, way) -> str:
        """A way's worst case: its StopKind's terms (runner/events.py), each a constant of
        runner/defaults.py at the default spec (DERIVED), lock waits named as such."""
        d = _defaults()
        terms = way.kind.worst_case(d.STOP_GRACE, d.KILL_GRACE, by=way.by)
        for name, value in terms:
            if abs(float(getattr(d, name)) - value) > 1e-9:
                raise RenderError(f"{way.label}: the worst-case term {name} is not runner/defaults.py's {name}")
        total = sum(value for _, value in terms)
        parts = " + ".join(f"`{n}` {_seconds(v)}" + (" (lock wait)" if n in self._LOCK_WAITS else "") for n, v in terms)
        shown = f"**{_seconds(total)}**" + (f" ({_human(total)})" if total >= 120 else "") + f" = {parts}"
        if way.kind.name == "hard" and way.by == "stopper":
            # The code's own sum (what `runner bound` prints), checked against the terms.
            from runner.files.spec import StopSpec

            spec = StopSpec(grace=d.STOP_GRACE, kill_grace=d.KILL_GRACE, containment=d.CONTAINMENT, channel="auto")
            if abs(spec.hard_worst_case - total) > 1e-9:
                raise RenderError("StopSpec.hard_worst_case is not the sum of StopKind.HARD's terms")
            shown += " (`StopSpec.hard_worst_case`, `runner bound`)"
        if way.kind.mode.label == "graceful":
            shown += " (one hook, one verify command)"
        if way.by == "engine" and way.kind.name == "hard":
            shown += "; a wedged engine is not forced by anyone"
        return shown

    def _by_command(self) -> dict[str, set[str]]:
        """docs/exit-codes.md's "By command" table (tests/runner/test_exit_codes_doc.py
        holds it to runner/exitcodes.py)."""
        out: dict[str, set[str]] = {}
        for line in (HERE / "exit-codes.md").read_text(encoding="utf-8").splitlines():
            m = re.match(r"\| `runner ([^`]+)` \| ([A-Z_, ]+) \|$", line)
            if m:
                out[m.group(1)] = {c.strip() for c in m.group(2).split(",")}
        return out

    def _codes(self, command: str, names: tuple[str, ...]) -> str:
        Exit = _exitcodes()
        documented = self._by_command().get(command)
        if documented is None:
            raise RenderError(f"docs/exit-codes.md has no row for `runner {command}`")
        for name in names:
            if name not in documented:
                raise RenderError(f"`runner {command}` does not return {name} in docs/exit-codes.md")
        return ", ".join(f"`{n}` {int(Exit[n])}" for n in names) + f" (`runner {command}`)"

    def _short_measured(self, label: str) -> str:
        stats = (self.measure or {}).get("labels", {}).get(label)
        if not stats:
            return "not measured"
        tests = ", ".join(f"`{n}`" for n in self._nodeids(label)) or "test not recorded"
        return f'median {_measured(stats["median"])} (n={stats["n"]}; "{label}", test {tests})'

    def _bench_mode(self, mode: str) -> str:
        part = self._bench_part("load")
        m = next((m for m in (part or {}).get("modes", []) if m.get("mode") == mode), None)
        if not m or m.get("median_s") is None:
            return "not measured"
        if m.get("commands") == 1:
            figure = f"{_measured(m['max_s'])} for {m['runs']} runs (n=1: one command)"
        else:
            figure = f"median {_measured(m['median_s'])} per run (n={m['n']} runs, one command each)"
        return f"`{mode}`: {figure}; bench `python -m bench.stoppers`, part `load`, `{self.bench_name}`"

    _WAYS = {
        # events.WAYS label: (what it signals, measured: labels or "bench:MODE", exit codes, resumable)
        "runner stop": (
            "lodges a hard request, SIGTERMs the engine (file channel: no signal before `grace`); the engine "
            "kills every child group (SIGTERM, `kill_grace`, SIGKILL); after `grace` the stopper forces",
            ("runner stop (signal) / trap-term provider", "runner stop (file) / long verify"),
            ("stop", ("OK", "STOP_FORCED", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED", "INTERRUPTED")),
            "yes",
        ),
        "runner stop --now": (
            "lodges a hard request, then the stopper itself: SIGTERM to every proven process group of the run, "
            "the engine's included, and to the engine's children and their lineage (read before it), "
            "`kill_grace`, SIGKILL, then the confirmation",
            ("runner stop --now / trap-term",),
            ("stop --now", ("OK", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED", "INTERRUPTED")),
            "yes",
        ),
        "runner stop --graceful": (
            "lodges a graceful request and returns; no signal: the engine stops at the end of the phase in flight",
            (),
            ("stop --graceful", ("OK", "INTERRUPTED")),
            "yes",
        ),
        "runner stop --graceful --wait": (
            "as `--graceful`, then waits for the run to end",
            (),
            ("stop --graceful --wait", ("STOPPED", "OK", "FAILED", "INTERRUPTED")),
            "yes",
        ),
        "runner stop --all": (
            "each live run as its own `runner stop` would, all at once from one process "
            "(up to {MAX_STOPPERS} at a time)",
            ("bench:stop --all",),
            ("stop --all", ("OK", "STOP_FORCED", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED", "NO_LIVE_RUN")),
            "yes",
        ),
        "runner stop --all --now": (
            "each live run as its own `runner stop --now` would, all at once from one process",
            ("bench:stop --all --now",),
            ("stop --all", ("OK", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED", "NO_LIVE_RUN")),
            "yes",
        ),
        "runner stop --all --graceful": (
            "each live run as its own `runner stop --graceful` would",
            (),
            ("stop --all", ("OK", "NO_LIVE_RUN")),
            "yes",
        ),
        'dashboard "Stop"': (
            "`runner stop`'s own pipeline (`stop.stop(rd, StopKind.HARD)`, origin `dashboard`)",
            ("dashboard Stop / click to run-stop",),
            ("stop", ("OK", "STOP_FORCED", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED")),
            "yes",
        ),
        'dashboard "Stop now"': (
            "`runner stop --now`'s own pipeline (`StopKind.NOW`, origin `dashboard`)",
            ("dashboard Stop now / click to run-stop",),
            ("stop --now", ("OK", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED")),
            "yes",
        ),
        'dashboard "Stop gracefully"': (
            "`runner stop --graceful`'s own pipeline (`StopKind.GRACEFUL`, origin `dashboard`)",
            (),
            ("stop --graceful", ("OK",)),
            "yes",
        ),
        "Ctrl-C once (foreground)": (
            "the pipeline's hard stop from the foreground `runner run`/`resume`: a hard request, SIGINT "
            "forwarded to the engine; after `grace` the command forces",
            (),
            ("run", ("STOPPED",)),
            "yes",
        ),
        "Ctrl-C twice (foreground)": (
            "as `runner stop --now`, from the foreground command",
            (),
            ("run", ("STOPPED",)),
            "yes",
        ),
        "SIGTERM or SIGHUP to a foreground `runner run`": (
            "as Ctrl-C once (PID 1 of a container included): forwarded to the engine, forced after `grace`",
            (),
            ("run", ("STOPPED",)),
            "yes",
        ),
        "SIGTERM to the engine": (
            "the engine's own handler, as for `runner stop`'s signal; nobody forces it after `grace`",
            (),
            ("wait", ("STOPPED",)),
            "yes",
        ),
        "the STOP file": (
            "`touch RUNDIR/STOP`: nothing is signalled; the engine reads the file at the top of each item and "
            "between phases (also while paused and in a backoff) and stops gracefully",
            ("STOP file / while paused", "STOP file / during backoff"),
            ("run", ("STOPPED",)),
            "yes",
        ),
    }

    def _row_label(self, label: str) -> str:
        return f"`{label}`" if label.startswith("runner ") else label

    def stop_modes(self) -> str:
        """Every way to stop a run (runner/events.py's WAYS, each with its StopKind): its
        worst case from the kind's terms, lock waits included, and `touch RUNDIR/PAUSE`
        beside them (not a stop)."""
        from runner.events import WAYS

        rows = [
            "| way | kind | what it signals | worst case (DERIVED, default spec) | measured | exit codes | resumable |",
            "|---|---|---|---|---|---|---|",
        ]
        missing = [w.label for w in WAYS if w.label not in self._WAYS]
        if missing:
            raise RenderError(f"no row text for the ways {missing} (runner/events.py WAYS)")
        for way in WAYS:
            what, measured, codes, resumable = self._WAYS[way.label]
            cells = [
                self._bench_mode(m[len("bench:") :]) if m.startswith("bench:") else self._short_measured(m)
                for m in measured
            ]
            shown = "<br>".join(cells) or "not measured"
            if "{MAX_STOPPERS}" in what:
                n = _defaults().MAX_STOPPERS
                what = what.replace("{MAX_STOPPERS}", f"{n} (DERIVED: `runner/defaults.py: MAX_STOPPERS`)")
            kind = f"`{way.kind.name}`" + (" (by the engine)" if way.by == "engine" else "")
            rows.append(
                f"| {self._row_label(way.label)} | {kind} | {what} | {self._worst(way)} | {shown} "
                f"| {self._codes(*codes)} | {resumable} |"
            )
        rows.append(
            "| `touch RUNDIR/PAUSE` | not a stop | nothing: the engine holds at its next landing point (as a graceful "
            "stop's) until the file is removed | none (the run goes on) | not measured | none (the run goes on) "
            "| the run is not stopped: remove the file and it goes on |"
        )
        return "\n".join(rows)

    _GONE = (
        # command (docs/exit-codes.md row), before, during, after: (what it does, codes)
        (
            "stop",
            (
                "its engine, found by its deleted pinned directory (`vanished.py`), is stopped as `--now` stops "
                "it, by its tag and cgroup; one line says the directory is gone and nothing could be recorded; "
                "no such engine: no run there",
                ("OK", "LEFT_RUNNING", "UNKILLABLE", "NO_LIVE_RUN"),
            ),
            (
                "the kill is finished (the engine stops a run whose directory is removed; the stopper kills what "
                "is left by the run's tag and cgroup); one line says the directory is gone and nothing could be "
                "recorded; never `INTERNAL`",
                ("OK", "LEFT_RUNNING", "UNKILLABLE"),
            ),
            ("nothing more: the stop was recorded in the directory before it went", ("OK", "STOP_FORCED")),
        ),
        (
            "stop --now",
            ("as `runner stop`", ("OK", "LEFT_RUNNING", "UNKILLABLE", "NO_LIVE_RUN")),
            ("as `runner stop`", ("OK", "LEFT_RUNNING", "UNKILLABLE")),
            ("as `runner stop`", ("OK",)),
        ),
        (
            "stop --graceful",
            ("no run there: nothing to lodge a request in", ("NO_LIVE_RUN",)),
            ("no run there, if the request could not be lodged any more", ("NO_LIVE_RUN",)),
            ("the engine stops the run hard (origin `vanished`): nothing of it could be recorded", ("OK",)),
        ),
        (
            "stop --graceful --wait",
            ("no run there", ("NO_LIVE_RUN",)),
            (
                "the engine stops the run hard (origin `vanished`); the waiter finishes the kill by the run's tag "
                "and cgroup and says, on one line, that the directory is gone and nothing could be recorded",
                ("STOPPED", "LEFT_RUNNING", "UNKILLABLE"),
            ),
            ("nothing more: the run's end was read before the directory went", ("STOPPED",)),
        ),
        (
            "stop --all",
            ("each engine whose directory is gone is found and stopped, one line each", ("OK", "LEFT_RUNNING")),
            ("as `runner stop`, for that run", ("OK", "LEFT_RUNNING", "UNKILLABLE")),
            ("nothing more", ("OK",)),
        ),
        (
            "wait",
            ("no run there", ("NO_LIVE_RUN",)),
            ("as `runner stop --graceful --wait`", ("STOPPED", "LEFT_RUNNING", "UNKILLABLE")),
            ("nothing more", ("STOPPED", "OK", "FAILED")),
        ),
    )

    def directory_gone(self) -> str:
        """What each command does when the run directory goes away before, during or
        after it: codes checked against docs/exit-codes.md's rows."""
        rows = [
            "| command | directory gone before it starts | gone while it runs | gone after it returned |",
            "|---|---|---|---|",
        ]
        for command, *cases in self._GONE:
            cells = [f"{what}: {self._codes(command, codes)}" for what, codes in cases]
            rows.append(f"| `runner {command}` | " + " | ".join(cells) + " |")
        return "\n".join(rows)

    def ablation_table(self) -> str:
        muts = (self.mutate or {}).get("mutations", [])
        if not muts:
            return f"*No mutate run recorded (`{self.mutate_name}` absent or empty).*"
        rows = [
            "| mutation | path it removes | verdict | killed by | documented survivors (stay green) |",
            "|---|---|---|---|---|",
        ]
        for m in muts:
            killed = "<br>".join(f"`{k}`" for k in m.get("killed_by", [])) or (m.get("detail") or "-")
            surv = "<br>".join(f"`{s}`" for s in m.get("survivors", [])) or "-"
            if m.get("survivors_red"):
                surv += "<br>**RED:** " + ", ".join(f"`{s}`" for s in m["survivors_red"])
            rows.append(f"| `{m['id']}` | {m['path']} | {m['verdict']} | {killed} | {surv} |")
        n_killed = sum(m["verdict"] == "killed" for m in muts)
        rows.append("")
        rows.append(f"{n_killed} of {len(muts)} mutations killed in that run.")
        return "\n".join(rows)


def refuse_typed_durations(template: str) -> None:
    """A template that types a duration in its prose is refused (every renderer calls this)."""
    typed = typed_durations(template)
    if typed:
        raise RenderError(
            "the template types a duration in its prose ("
            + ", ".join(repr(t) for t in typed)
            + "): state a bound with {{bound:TEST_FILE:CONSTANT}} (a constant the test asserts) or drop it"
        )


def _dashboard_side(side: dict | None) -> str:
    if not side:
        return "| not measured | | | | |"
    if "error" in side:
        return f"| not measured ({side['error']}) | | | | |"
    return (
        f"| {side['cpu_percent']:g} % | {side['cpu_ms_per_poll']:g} ms | {side['polls_per_s']:g} | "
        f"{side['not_modified']} of {side['polls']} | {side['bytes_per_poll']:,} |"
    )


def render(template: str, ctx: Context) -> str:
    refuse_typed_durations(template)

    def sub(m: re.Match) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind == "measured" and arg:
            return ctx.measured(arg.strip())
        if kind == "derived" and arg:
            return ctx.derived(arg.strip())
        if kind == "exitcode" and arg:
            return ctx.exitcode(arg.strip())
        if kind == "bound" and arg:
            return ctx.bound(arg.strip())
        if arg is None and kind in (
            "graceful_worst_case",
            "graceful_sum",
            "measurement_source",
            "measured_table",
            "ablation_table",
            "reliability",
            "limits",
            "bench_stoppers",
            "bench_scale_load",
            "bench_sizes",
            "stop_modes",
            "directory_gone",
            "bench_dashboard",
            "bench_goals",
            "bench_runs",
            "bench_container_init",
            "bench_stopper_cost",
        ):
            return getattr(ctx, kind)()
        raise RenderError(f"unknown placeholder {m.group(0)!r}")

    return _PLACEHOLDER.sub(sub, template)


def render_files(
    template: Path, measure: Path | None, mutate: Path | None, soak: Path | None = None, bench: Path | None = None
) -> str:
    ctx = Context(
        _load(measure),
        _load(mutate),
        measure_name=_rel(measure),
        mutate_name=_rel(mutate),
        soak=_load(soak),
        soak_name=_rel(soak),
        bench=_load(bench),
        bench_name=_rel(bench) if bench is not None else "docs/bench.json",
    )
    return render(template.read_text(encoding="utf-8"), ctx)


def _rel(p: Path | None) -> str:
    if p is None:
        return "-"
    try:
        return str(p.resolve().relative_to(HERE.parent))
    except ValueError:
        return p.name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="render_stop_latency", description="render docs/stop-latency.md")
    ap.add_argument("--template", type=Path, default=HERE / "stop-latency.template.md")
    ap.add_argument("--measure", type=Path, default=HERE / "measure.json")
    ap.add_argument("--mutate", type=Path, default=HERE / "mutate.json")
    ap.add_argument("--soak", type=Path, default=HERE / "soak.json")
    ap.add_argument("--bench", type=Path, default=HERE / "bench.json")
    ap.add_argument("--out", type=Path, default=HERE / "stop-latency.md")
    ap.add_argument("--check", action="store_true", help="render to a temp file and fail with a diff if --out differs")
    args = ap.parse_args(argv)
    try:
        text = render_files(args.template, args.measure, args.mutate, args.soak, args.bench)
    except (RenderError, ValueError, KeyError) as exc:
        print(f"render_stop_latency: {exc}", file=sys.stderr)
        return 2
    return write_or_check(args.out, text, check=args.check)


def write_or_check(out: Path, text: str, *, check: bool) -> int:
    """Write `text` to `out` (temp file, replace), or with `check` fail with a diff when
    the committed `out` differs from it. Shared by docgen/render_plugin.py."""
    if check:
        with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as tmp:
            tmp.write(text)
        current = out.read_text(encoding="utf-8") if out.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(True), text.splitlines(True), f"{out} (committed)", f"{tmp.name} (rendered now)"
            )
            sys.stdout.writelines(diff)
            print(f"\n{out} is stale: run `make docs` and commit it", file=sys.stderr)
            return 1
        Path(tmp.name).unlink()
        print(f"{out} is up to date")
        return 0
    tmp_out = out.with_name(out.name + ".tmp")
    tmp_out.write_text(text, encoding="utf-8")
    tmp_out.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
