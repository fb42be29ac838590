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
    {{bench_traffic}}         the dashboard's first answer beside CPU hogs and an open page's
                              bytes per second, at 500 runs
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
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sections and helpers, beside it

from stop_latency_bench import BenchSection  # noqa: E402
from stop_latency_modes import StopModesSection  # noqa: E402
from stop_latency_reliability import ReliabilitySection  # noqa: E402
from stop_latency_text import (  # noqa: E402, F401 - re-exported for the other renderers and the tests
    _REPEAT_ID,
    DEFAULTS_FILE,
    EXITCODES_FILE,
    HERE,
    RenderError,
    _defaults,
    _exitcodes,
    _human,
    _load,
    _measured,
    _seconds,
    _without_repeat,
)

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)(?::([^}]+?))?\s*\}\}")


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


class Context(ReliabilitySection, BenchSection, StopModesSection):
    """Every placeholder of the template, one method each; the sections' methods live in
    stop_latency_reliability.py, stop_latency_bench.py and stop_latency_modes.py."""

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
                f"Ablations: `{self.mutate_name}`, the "
                + (
                    "`make mutate-ci` run (its baseline: the suite's own runs of the tree, every killer green there)"
                    if self.mutate.get("baseline_from")
                    else "`make mutate` run"
                )
                + f" of {self.mutate.get('time', '?')}, commit `{self.mutate.get('git_commit') or 'unknown'}`."
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
            "bench_traffic",
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
