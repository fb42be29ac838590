"""Render docs/plugin.md (the plugin's user guide) from its template and the code.

    python docgen/render_plugin.py            # write docs/plugin.md (make docs)
    python docgen/render_plugin.py --check    # fail with a diff if it is stale (make docs-check)

No number or option text is typed into the template. Each comes from:

    {{help:NAME}}          a text constant of pytest_stoplatency/_options.py (option help, marker line)
    {{const:MODULE.NAME}}  a constant of pytest_stoplatency/MODULE.py, DERIVED, with its file
    {{default:PARAM}}      a default of `victim(...)` (_linux.VictimFactory.__call__), bare (it stands in code)
    {{kind:NAME}}          a victim kind's heading; every kind of victim.KINDS must have one, once
    {{measured:LABEL}}     a stop-latency label of docs/measure.json (`make measure`), MEASURED
    {{leak_cost}}          the --process-leaks cost, docs/process-leaks-bench.json (`make bench`), MEASURED
    {{leak_load}}          the check's own time under load, the same file's "load" part, MEASURED
    {{idle_cost}}          the unused plugin's cost with and without writable byte code, docs/bench.json's
                           "plugin" part (`make bench`), MEASURED
    {{strangers_rule:NAME}} a number of the strangers harness's rule (bench/strangers/__main__.py), DERIVED
    {{leak_strangers}}     --process-leaks on strangers' suites, docs/leaks-strangers.json
                           (`make leaks-strangers`), MEASURED
    {{leak_demo}}          a real --process-leaks report, docs/process-leaks-demo.json (`make leak-demo`), MEASURED
    {{examples}}           examples/: each file's first docstring line and its strict xfails' reasons
    {{routes}}             the escape routes, in the order they are decided
    {{example:PATH}}       a file of examples/ as it is, in a code block (`make examples` runs it)
    {{latency_demo}}       a real --stop-latency summary, docs/stop-latency-demo.json (`make leak-demo`)
    {{signature:measure}}  `stop_latency.measure(...)`'s signature, from the code
    {{project:KEY}}        a fact of pyproject.toml (requires-python, summary, plugin: the entry point's name)
    {{installs}}           what installing the distribution installs (pyproject.toml)

A help text that names this document itself (`pytest --help` points to it) is printed
without that parenthesis: the guide does not send its reader to itself.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "docs"  # the documents: templates, data, output
ROOT = HERE.parent
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))

from render_stop_latency import Context as StopLatencyContext  # noqa: E402
from render_stop_latency import _load, refuse_typed_durations, write_or_check  # noqa: E402

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)(?::([^}]+?))?\s*\}\}")


class RenderError(ValueError):
    """The template names something the code or the JSON cannot supply."""


def _module(name: str):
    import importlib

    try:
        return importlib.import_module(f"pytest_stoplatency.{name}")
    except ImportError:
        raise RenderError(f"template names module {name!r}, which pytest_stoplatency does not have") from None


class Context:
    def __init__(
        self,
        measure: dict | None,
        bench: dict | None,
        bench_name: str,
        examples_dir: Path,
        demo: dict | None = None,
        demo_name: str = "docs/process-leaks-demo.json",
        latency: dict | None = None,
        latency_name: str = "docs/stop-latency-demo.json",
        stop_bench: dict | None = None,
        stop_bench_name: str = "docs/bench.json",
        strangers: dict | None = None,
        strangers_name: str = "docs/leaks-strangers.json",
    ):
        self.latency, self.latency_name = latency, latency_name
        self.stop_bench, self.stop_bench_name = stop_bench, stop_bench_name
        self.strangers, self.strangers_name = strangers, strangers_name
        self.stop = StopLatencyContext(measure, None)
        self.bench, self.bench_name, self.examples_dir = bench, bench_name, examples_dir
        self.demo, self.demo_name = demo, demo_name
        self.kinds_seen: list[str] = []

    def help(self, name: str) -> str:
        value = getattr(_module("_options"), name, None)
        if not isinstance(value, str):
            raise RenderError(f"template names {name!r}, which pytest_stoplatency/_options.py does not define")
        return re.sub(r" ?\([^()]*docs/plugin\.md[^()]*\)", "", value)

    def const(self, dotted: str) -> str:
        mod, _, name = dotted.rpartition(".")  # a module of a subpackage too: kit.report.P95_MIN_N
        value = getattr(_module(mod.replace("/", ".")), name, None)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise RenderError(f"template names {dotted!r}, which is no number or text constant")
        shown = f"`{value}`" if isinstance(value, str) else f"{value:g}"
        return f"{shown} (DERIVED: `pytest_stoplatency/{mod.replace('.', '/')}.py: {name}`)"

    def default(self, param: str) -> str:
        """A default of `victim(...)` (VictimFactory.__call__), bare: it stands in code."""
        sig = inspect.signature(_module("_linux").VictimFactory.__call__)
        if param not in sig.parameters or sig.parameters[param].default is inspect.Parameter.empty:
            raise RenderError(f"template names victim parameter {param!r}, which has no default")
        return repr(sig.parameters[param].default)

    def kind(self, name: str) -> str:
        kinds = _module("victim").KINDS
        if name not in kinds:
            raise RenderError(f"template names victim kind {name!r}; victim.KINDS has {', '.join(kinds)}")
        if name in self.kinds_seen:
            raise RenderError(f"victim kind {name!r} is described twice")
        self.kinds_seen.append(name)
        return f"`{name}`"

    def measured(self, label: str) -> str:
        return self.stop.measured(label)

    def strangers_rule(self, name: str) -> str:
        """A number of `make leaks-strangers`' rule, read from its harness (never imported: the
        harness is no part of the package)."""
        path = HERE.parent / "bench" / "strangers" / "__main__.py"
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == [name]
                and isinstance(node.value, ast.Constant)
                and type(node.value.value) is int
            ):
                return f"{node.value.value} (DERIVED: `bench/strangers/__main__.py: {name}`)"
        raise RenderError(f"template names {name!r}, which bench/strangers/__main__.py does not set to a number")

    def routes(self) -> str:
        leaks = _module("_leaks")
        return ", ".join(f'"{r}"' for r in leaks.ROUTES) + " (DERIVED: `pytest_stoplatency/_leaks.py: ROUTES`)"

    def leak_cost(self) -> str:
        b = self.bench
        if not b:
            return f"*Not measured: `{self.bench_name}` is absent (run `make bench`).*"
        m = b.get("machine", {})
        cg = bool(b.get("cgroup"))
        head = "| test kind | n x rounds | median per test without | with --process-leaks | overhead | in the tracker |"
        rule = "|---|---|---|---|---|---|"
        if cg:
            head += " with --process-leaks-cgroup | overhead | in the tracker |"
            rule += "---|---|---|"
        rows = [head, rule]
        for kind, k in b["kinds"].items():
            row = (
                f"| {kind} | {k['n']} x {b.get('rounds', 1)} | {k['median_protocol_ms_without']:.3f} ms "
                f"| {k['median_protocol_ms_with']:.3f} ms | {k['median_overhead_ms']:.3f} ms "
                f"| {k['median_tracker_ms']:.3f} ms |"
            )
            if cg:
                row += (
                    f" {k['median_protocol_ms_with_cgroup']:.3f} ms | {k['median_overhead_ms_cgroup']:.3f} ms "
                    f"| {k['median_tracker_ms_cgroup']:.3f} ms |"
                )
            rows.append(row)
        pace = f", `paced` ones sleeping {b['pace_s']:g} s" if "pace_s" in b else ""
        where = "with and without a cgroup" if cg else "without cgroups (cgroup v2 was not writable there)"
        return (
            f"MEASURED by `bench/process_leaks_cost.py` (`{self.bench_name}`, {b.get('time', '?')}; "
            f"Linux {m.get('kernel', '?')}, {m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}; "
            f"load average {b.get('load_before', '?')} at the start; {b['n_tests']} tests per session{pace}; "
            f"{where}):\n\n" + "\n".join(rows)
        )

    def leak_load(self) -> str:
        load = (self.bench or {}).get("load")
        if not load:
            return f"*Not measured: `{self.bench_name}` has no load part (run `make bench`).*"
        rows = ["| test kind | n | time in the check per test: median | p95 | max |", "|---|---|---|---|---|"]
        for kind, k in load["kinds"].items():
            rows.append(
                f"| {kind} | {k['n']} | {k['median_check_ms']:.3f} ms | {k['p95_check_ms']:.3f} ms "
                f"| {k['max_check_ms']:.3f} ms |"
            )
        return (
            f"MEASURED by `bench/process_leaks_cost.py --live {load['live']} --hogs {load['hogs']}` "
            f"(`{self.bench_name}`, {load.get('time', '?')}; {load['processes_on_machine']} processes on the "
            f"machine during the session, {load['hogs']} CPU hogs, load average {load['load_start']} at the start "
            f"and {load['load_end']} at the end; grace {load['grace_s']:g} s; one session of "
            f"{sum(k['n'] for k in load['kinds'].values())} tests, {load['wall_s']:g} s):\n\n" + "\n".join(rows)
        )

    def idle_cost(self) -> str:
        plugin = (self.stop_bench or {}).get("plugin") or {}
        parts = plugin.get("bytecode")
        if not parts:
            return f"*Not measured: `{self.stop_bench_name}` has no byte-code part (run `make bench`).*"
        ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
        rows = [
            "| byte code | session with the plugin, CPU (median) | without, CPU (median) | cost, CPU (median of pairs) "
            "| cost, wall (median of pairs) | noise (CPU) |",
            "|---|---|---|---|---|---|",
        ]
        for name, label in (("writable", "writable"), ("not_writable", "not writable (`PYTHONDONTWRITEBYTECODE=1`)")):
            p = parts[name]
            rows.append(
                f"| {label} | {ms(p['installed']['cpu_median_s'])} | {ms(p['disabled']['cpu_median_s'])} "
                f"| {ms(p['cost_cpu_s'])} | {ms(p['cost_wall_s'])} | ±{ms(p['noise_cpu_s'])} |"
            )
        return (
            f"MEASURED by `bench/plugin_idle.py` (`python -m bench.stoppers --parts plugin`, `{self.stop_bench_name}`, "
            f"{plugin.get('date', '?')}, commit {str(plugin.get('git_commit', '?'))[:7]}; `{plugin['command']}` of one "
            f"passing test with the plugin and with `-p no:stoplatency`, {plugin['rounds']} sessions a side, "
            f"alternating; load average {plugin.get('loadavg_at_start', ['?'])[0]} at the start; "
            + (
                "each session with an empty record directory, in a mount namespace of its own: no other session's "
                "records choose what it reads"
                if plugin.get("records_isolated")
                else "with whatever records other sessions had left: see above"
            )
            + "):\n\n"
            + "\n".join(rows)
        )

    def leak_strangers(self) -> str:
        d = self.strangers
        if not d:
            return f"*Not run: `{self.strangers_name}` is absent (run `make leaks-strangers`).*"
        m = d.get("machine", {})
        merged = bool(d.get("merged"))
        rows = [
            "| suite | mode | tests | outcome changes | flaky (not counted) | leaks reported | verified | misses "
            "| outlived the session: plain / with the check | wall time: plain / with the check "
            + ("| measured (UTC, commit) |" if merged else "|"),
            "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if merged else ""),
        ]
        for r in d["rows"]:
            w = r["wall_s"]
            # A row of a merged document names its own run: rows before per-row commits name none.
            when = f" {r.get('time', '?')[:16].replace('T', ' ')}, {r.get('git_commit', 'commit not recorded')} |"
            rows.append(
                f"| {r['suite']} {r['version']} | {'-n 2' if r['mode'] == 'xdist' else 'serial'} | {r['tests']} "
                f"| {r['outcome_changes']} | {r['flaky']} | {r['reported']} | {r['verified']} | {r['misses']} "
                f"| {r['outlived_plain']} / {r['outlived_check']} | {w['plain']:g} s / {w['check']:g} s |"
                + (when if merged else "")
            )
        run = "rows merged from several runs, the last" if merged else f"commit {d.get('git_commit', '?')}"
        last = f"{d.get('time', '?')}, commit {d.get('git_commit', '?')}" if merged else d.get("time", "?")
        return (
            f"MEASURED by `make leaks-strangers` (`{self.strangers_name}`, {run} {last}; Linux "
            f"{m.get('kernel', '?')}, {m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}, pytest "
            f"{d.get('pytest', '?')}; load average {d.get('load_before', '?')} at the start"
            + (" of the last run" if merged else "")
            + f", {d.get('total_s', '?')} s"
            + (" for it" if merged else " in all")
            + "):\n\n"
            + "\n".join(rows)
        )

    def leak_demo(self) -> str:
        """The report of a real run, as its terminal showed it (docgen/leak_demo.py)."""
        d = self.demo
        if not d:
            return f"*Not run: `{self.demo_name}` is absent (run `make leak-demo`).*"
        m = d.get("machine", {})
        return (
            "```\n$ " + d["command"] + "\n...\n" + "\n".join(d["report"]) + "\n```\n\n"
            f"MEASURED: pasted by `docgen/leak_demo.py` (`{self.demo_name}`, {d.get('time', '?')}; "
            f"Linux {m.get('kernel', '?')}, Python {m.get('python', '?')}; exit status {d.get('exit_status', '?')})."
        )

    def example(self, path: str) -> str:
        """A file of examples/, whole, in a fenced block (tests/docs/test_doc_examples.py
        holds every block of README.md and this guide to such a file)."""
        f = (self.examples_dir / path).resolve()
        if self.examples_dir.resolve() not in f.parents or not f.is_file():
            raise RenderError(f"template names example {path!r}, which {self.examples_dir} does not hold")
        lang = {".py": "python", ".toml": "toml", ".sh": "sh", ".yml": "yaml"}.get(f.suffix, "")
        return f"```{lang}\n" + f.read_text(encoding="utf-8").rstrip("\n") + "\n```"

    def latency_demo(self) -> str:
        """The session summary of a real --stop-latency run (docgen/latency_demo.py)."""
        d = self.latency
        if not d:
            return f"*Not run: `{self.latency_name}` is absent (run `make leak-demo`).*"
        m = d.get("machine", {})
        return (
            "```\n$ " + d["command"] + "\n...\n" + "\n".join(d["report"]) + "\n```\n\n"
            f"MEASURED: pasted by `docgen/latency_demo.py` (`{self.latency_name}`, {d.get('time', '?')}; "
            f"Linux {m.get('kernel', '?')}, Python {m.get('python', '?')}; exit status {d.get('exit_status', '?')})."
        )

    def kit_help(self, name: str) -> str:
        """A help text of the conformance kit's command line (kit/cli.py's constants)."""
        value = getattr(_module("kit.cli"), name, None)
        if not isinstance(value, str) or not name.startswith("HELP_"):
            raise RenderError(f"template names {name!r}, which pytest_stoplatency/kit/cli.py does not define")
        return value

    def kit_adapters(self) -> str:
        """The built-in adapters, each with what it does (kit/adapters.py), with the kit's default grace."""
        kit = _module("kit")
        grace = _module("kit.cli").KILL_GRACE
        rows = ["| `--stopper` | what it does |", "|---|---|"]
        for name, cls in kit.BUILTIN.items():
            how = "this project's own stop: the same as `runner-stop`" if name == "runner" else cls.how
            rows.append(f"| `{name}` | {how.replace('KILL_GRACE', f'{grace:g}')} |")
        return "\n".join(rows)

    def kit_exit_codes(self) -> str:
        codes = {**_module("kit.verdict").EXIT_CODES, **_module("kit.gate").EXIT_CODES}
        return "\n".join(f"- `{code}`: {meaning}." for code, meaning in sorted(codes.items()))

    gate: dict | None = None
    gate_name = "docs/gate.json"

    def gate_figures(self) -> str:
        """The gate's default rule on unchanged code and on a slower stop, beside CPU hogs
        (docgen/gate_measure.py), MEASURED."""
        d = self.gate
        if not d:
            return f"*Not measured: `{self.gate_name}` is absent (run `.venv/bin/python docgen/gate_measure.py`).*"
        seconds = _module("kit.stats").seconds
        base = d["baseline"]
        rule = _module("kit.gate").parse_rule(d["rule"], "docs/gate.json")
        stat = rule.stat

        def trials(variant: str) -> list[dict]:
            return [t for t in d["trials"] if t["variant"] == variant]

        def ratios(variant: str) -> list[float]:
            return [t["labels"][k][stat] / base[k][stat] for t in trials(variant) for k in base]

        def held(variant: str) -> int:  # the rule's verdict, from the figures the run recorded
            return sum(
                1 for t in trials(variant) if not any(rule.regressed(base[k][stat], t["labels"][k][stat]) for k in base)
            )

        def exits(variant: str) -> str:
            codes = [t["exit"] for t in trials(variant)]
            return ", ".join(f"exit {c}: {codes.count(c)}" for c in sorted(set(codes)))

        over_bound = _module("kit.verdict").OVER_BOUND
        over = ""
        if any(t["exit"] == over_bound for t in d["trials"]):
            over = f"; exit {over_bound}: a sample also over the kit's bound, a code it names before the gate's"
        same, slow = ratios("unchanged"), ratios("slower")
        n_same, n_slow = len(trials("unchanged")), len(trials("slower"))
        m = d["machine"]
        return (
            f"- unchanged code passed the rule **{held('unchanged')} of {n_same}** times (each label's {stat} "
            f"{min(same):.2f}x to {max(same):.2f}x the baseline's; the kit's {exits('unchanged')});\n"
            f"- a stop {d['slowdown']:g}x slower failed it **{n_slow - held('slower')} of {n_slow}** times (each "
            f"label's {stat} {min(slow):.2f}x to {max(slow):.2f}x the baseline's; the kit's {exits('slower')}"
            f"{over}).\n\n"
            + (
                f"Not {n_slow} of {n_slow}: the machine's load changed under the run "
                f"({d['load_1min']['min']:.1f} to {d['load_1min']['max']:.1f}): on a machine quieter than when "
                f"the baseline was taken, unchanged code ran at down to {min(same):.2f}x the baseline's {stat}, "
                f"and a {d['slowdown']:g}x slower stop at as little as {min(slow):.2f}x: no threshold on one "
                "baseline tells these apart when the load moves that much. Take the baseline under the load the "
                "check runs under.\n\n"
                if held("slower")
                else ""
            )
            + f"MEASURED: `{d['command']}` (`{self.gate_name}`, {d['time']}): the kit's own `--compare` and "
            f"`--compare-fail {d['rule']}`, `--stopper {d['stopper']}`, kinds "
            + ", ".join(f"`{k}`" for k in d["kinds"])
            + f", {d['repeat']} samples per kind, beside {d['hogs']} CPU hogs (`python3 -c 'while True: pass'`; "
            f"1-minute load {d['load_1min']['min']:.1f} to {d['load_1min']['max']:.1f}), the baseline taken beside "
            f"them too; the baseline's {stat}s: "
            + "; ".join(f"{k} {seconds(v[stat])}" for k, v in sorted(base.items()))
            + f". Linux {m.get('kernel', '?')}, {m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}. The "
            f"slower stop is the same adapter sleeping, after its stop returned, {d['slowdown'] - 1:g} times "
            f"the stop's own time (`SlowerRunner`)."
        )

    def kit_kinds(self) -> str:
        return ", ".join(f"`{v.id}` ({v.label})" for v in _module("kit").VICTIMS)

    def signature(self, name: str) -> str:
        if name != "measure":
            raise RenderError(f"template names signature {name!r}; only `measure` is known")
        sig = inspect.signature(_module("_recorder").Recorder.measure)
        params = [p for p in sig.parameters.values() if p.name != "self"]
        return f"with stop_latency.measure({', '.join(str(p) for p in params)}) as m:"

    def project(self, key: str) -> str:
        """A fact of pyproject.toml's [project] (the plugin's name: its pytest11 entry point)."""
        proj = _pyproject()["project"]
        if key == "requires-python":
            return f"Python {proj['requires-python']} (DERIVED: `pyproject.toml: requires-python`)"
        if key == "summary":
            return f"the distribution `{proj['name']}`, DERIVED from `pyproject.toml`"
        if key == "plugin":
            (name,) = proj["entry-points"]["pytest11"]
            return name
        raise RenderError(f"template names project fact {key!r}")

    def installs(self) -> str:
        py = _pyproject()
        proj, tool = py["project"], py["tool"]["setuptools"]
        ((plugin, module),) = proj["entry-points"]["pytest11"].items()
        scripts = ", ".join(f"`{k}` (`{v}`)" for k, v in proj["scripts"].items())
        packages = [p for p in tool["packages"] if "." not in p]
        deps = ", ".join(f"`{d}`" for d in proj["dependencies"])
        return "\n".join(
            [
                f"- the plugin, `{module}`, registered with pytest as `{plugin}` (entry point `pytest11`): "
                "nothing to add to `conftest.py`;",
                f"- the top-level packages {', '.join(f'`{p}`' for p in packages)} (with their subpackages);",
                f"- the command(s) {scripts} on the environment's `PATH`;",
                f"- the runtime dependencies {deps}.",
            ]
        )

    def examples(self) -> str:
        rows = ["| example | the behaviour (strict xfail) | the fix beside it |", "|---|---|---|"]
        files = sorted(self.examples_dir.glob("test_*.py"))
        if not files:
            raise RenderError(f"no examples in {self.examples_dir}")
        for f in files:
            tree = ast.parse(f.read_text(encoding="utf-8"))
            doc = (ast.get_docstring(tree) or "").strip().splitlines()
            if not doc:
                raise RenderError(f"{f.name} has no module docstring")
            reasons, fixes = [], []
            for node in tree.body:
                if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                    continue
                reason = _xfail_reason(node)
                (reasons if reason else fixes).append(reason or f"`{node.name}`")
            rows.append(
                f"| `examples/{f.name}`: {doc[0]} | {'<br>'.join(sorted(set(reasons))) or '-'} "
                f"| {'<br>'.join(fixes) or '-'} |"
            )
        return "\n".join(rows)


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _xfail_reason(fn: ast.FunctionDef) -> str | None:
    for dec in fn.decorator_list:
        if (
            isinstance(dec, ast.Call)
            and isinstance(dec.func, ast.Attribute)
            and dec.func.attr == "xfail"
            and any(k.arg == "strict" and getattr(k.value, "value", None) is True for k in dec.keywords)
        ):
            for k in dec.keywords:
                if k.arg == "reason":
                    return str(ast.literal_eval(k.value))
    return None


def render(template: str, ctx: Context) -> str:
    refuse_typed_durations(template)

    def sub(m: re.Match) -> str:
        kind, arg = m.group(1), m.group(2)
        if arg is not None and kind in (
            "help",
            "const",
            "default",
            "kind",
            "measured",
            "example",
            "signature",
            "project",
            "kit_help",
            "strangers_rule",
        ):
            return getattr(ctx, kind)(arg.strip())
        if arg is None and kind in (
            "leak_cost",
            "leak_load",
            "idle_cost",
            "leak_strangers",
            "leak_demo",
            "latency_demo",
            "examples",
            "routes",
            "installs",
            "kit_adapters",
            "kit_exit_codes",
            "kit_kinds",
            "gate_figures",
        ):
            return getattr(ctx, kind)()
        raise RenderError(f"unknown placeholder {m.group(0)!r}")

    text = _PLACEHOLDER.sub(sub, template)
    missing = [k for k in _module("victim").KINDS if k not in ctx.kinds_seen]
    if missing:
        raise RenderError(f"victim kinds not described in the template: {', '.join(missing)}")
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="render_plugin", description="render docs/plugin.md")
    ap.add_argument("--template", type=Path, default=HERE / "plugin.template.md")
    ap.add_argument("--measure", type=Path, default=HERE / "measure.json")
    ap.add_argument("--bench", type=Path, default=HERE / "process-leaks-bench.json")
    ap.add_argument("--examples", type=Path, default=ROOT / "examples")
    ap.add_argument("--demo", type=Path, default=HERE / "process-leaks-demo.json")
    ap.add_argument("--latency-demo", type=Path, default=HERE / "stop-latency-demo.json")
    ap.add_argument("--stop-bench", type=Path, default=HERE / "bench.json")
    ap.add_argument("--strangers", type=Path, default=HERE / "leaks-strangers.json")
    ap.add_argument("--gate", type=Path, default=HERE / "gate.json")
    ap.add_argument("--out", type=Path, default=HERE / "plugin.md")
    ap.add_argument("--check", action="store_true", help="fail with a diff if --out differs from a fresh render")
    args = ap.parse_args(argv)
    try:
        ctx = Context(
            _load(args.measure),
            _load(args.bench),
            f"docs/{args.bench.name}",
            args.examples,
            _load(args.demo),
            f"docs/{args.demo.name}",
            _load(args.latency_demo),
            f"docs/{args.latency_demo.name}",
            _load(args.stop_bench),
            f"docs/{args.stop_bench.name}",
            _load(args.strangers),
            f"docs/{args.strangers.name}",
        )
        ctx.gate, ctx.gate_name = _load(args.gate), f"docs/{args.gate.name}"
        text = render(args.template.read_text(encoding="utf-8"), ctx)
    except (RenderError, ValueError, KeyError) as exc:
        print(f"render_plugin: {exc}", file=sys.stderr)
        return 2
    return write_or_check(args.out, text, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
