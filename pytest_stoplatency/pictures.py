"""Pictures of stop latencies: `--stop-latency-svg`, the kit's `--svg` and docs/stop-latency.md.

Two pictures: the latency distribution per label (a strip plot, one dot per sample on a
log axis, each label's bound drawn as a red bar) and the kit's kinds x stoppers grid
(each cell coloured by its verdict). matplotlib draws them: an optional extra (`plots`),
imported only here and only when a picture is asked for, so the plugin's runtime never
needs it. The SVG is reproducible (fixed hash salt, no date, text as text), so a picture
rendered twice from one JSON is the same file.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from typing import Any


class PicturesUnavailable(RuntimeError):
    """matplotlib (the `plots` extra) is not installed: the message says how to install it."""


INSTALL = "pip install 'pytest-stoplatency[plots]'"
MISSING = f"a picture needs matplotlib, not installed here: {INSTALL}"

COLOURS = {"whole": "#2e7d32", "over-bound": "#f9a825", "orphaned": "#c62828", "failed": "#616161"}
FLOOR_S = 1e-4  # a log axis cannot show 0: faster samples are drawn here
# Any: matplotlib types rc_context's keys as a Literal of every rc name.
RC: Any = {"svg.hashsalt": "pytest-stoplatency", "svg.fonttype": "none", "font.size": 9}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise PicturesUnavailable(MISSING) from e
    # The object API, not pyplot: no global backend, so a user's own pyplot state is untouched.
    return Figure(figsize=(width, height), layout="constrained")


def _svg(fig: Any) -> str:
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    out = io.StringIO()
    with matplotlib.rc_context(RC):
        FigureCanvasSVG(fig).print_svg(out, metadata={"Date": None})
    return out.getvalue()


def strip(series: Sequence[tuple[str, Iterable[float], float | None]], title: str) -> str:
    """One row per (label, latencies in seconds, bound or None): each sample a dot, red past
    the bound; the bound a red bar."""
    import matplotlib

    with matplotlib.rc_context(RC):
        fig = _figure(9, _strip_height(series))
        _draw_strip(fig, series, title)
        return _svg(fig)


def _strip_height(series: Sequence[Any]) -> float:
    return 0.28 * len(series) + 1.2


def _draw_strip(fig: Any, series: Sequence[tuple[str, Iterable[float], float | None]], title: str) -> None:
    ax = fig.add_subplot()
    for i, (_, values, bound) in enumerate(series):
        xs = [max(v, FLOOR_S) for v in values]
        over = [bound is not None and v > bound for v in values]
        ax.scatter(xs, [i] * len(xs), s=14, alpha=0.6, marker="o", linewidths=0,
                   c=[COLOURS["orphaned"] if o else "#1565c0" for o in over])  # fmt: skip
        if bound is not None:
            ax.plot([bound, bound], [i - 0.4, i + 0.4], color=COLOURS["orphaned"], linewidth=2)
    ax.set_xscale("log")
    ax.set_yticks(range(len(series)), [label for label, _, _ in series])
    ax.set_ylim(len(series) - 0.5, -0.5)
    ax.set_xlabel("stop latency (s, log scale); red bar: the label's bound")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title)


def grid(
    columns: Sequence[str], kinds: Sequence[str], cells: dict[tuple[str, str], tuple[str, str]], title: str
) -> str:
    """Kinds (rows) x stoppers (columns); cells[(column, kind)] = (verdict, text)."""
    import matplotlib

    with matplotlib.rc_context(RC):
        fig = _figure(*_grid_size(columns, kinds))
        _draw_grid(fig, columns, kinds, cells, title)
        return _svg(fig)


def _grid_size(columns: Sequence[str], kinds: Sequence[str]) -> tuple[float, float]:
    return 1.4 * len(columns) + 2.2, 0.32 * len(kinds) + 2.0


def _draw_grid(
    fig: Any, columns: Sequence[str], kinds: Sequence[str], cells: dict[tuple[str, str], tuple[str, str]], title: str
) -> None:
    from matplotlib.patches import Patch, Rectangle

    ax = fig.add_subplot()
    for j, col in enumerate(columns):
        for i, kind in enumerate(kinds):
            verdict, text = cells.get((col, kind), ("failed", "-"))
            ax.add_patch(Rectangle((j + 0.03, i + 0.05), 0.94, 0.9, color=COLOURS[verdict]))
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", color="white", fontsize=7)
    ax.set_xlim(0, len(columns))
    ax.set_ylim(len(kinds), 0)
    ax.set_xticks([j + 0.5 for j in range(len(columns))], columns, rotation=30, ha="left")
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(len(kinds))], kinds)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    fig.legend(handles=[Patch(color=c, label=v) for v, c in COLOURS.items()], loc="outside lower center", ncols=4)
    fig.suptitle(title)


def stopper_name(s: dict[str, Any]) -> str:
    """A stopper's column: its adapter's name, or for `--start/--stop` its stop command."""
    if s["id"] == "command":
        m = re.search(r"stop `(.*)`$", s.get("how") or "")
        if m:
            cmd = m.group(1)
            return "stop: " + (cmd if len(cmd) <= 28 else cmd[:27] + "…")
    return str(s["id"])


def kit_cells(doc: dict[str, Any]) -> tuple[list[str], list[str], dict[tuple[str, str], tuple[str, str]]]:
    """The grid of a kit document (`conformance --json`)."""
    stoppers = [s for s in doc["stoppers"] if not s["skipped"]]
    kinds = [r["kind"] for r in stoppers[0]["rows"]] if stoppers else []
    cells = {}
    for s in stoppers:
        for row in s["rows"]:
            cells[(stopper_name(s), row["kind"])] = (row["verdict"], cell_text(row))
    return [stopper_name(s) for s in stoppers], kinds, cells


def _t(x: float) -> str:
    return f"{x * 1000:.3g} ms" if x < 1 else f"{x:.3g} s"


def cell_text(row: dict[str, Any]) -> str:
    """A cell's figure, from the statistic its colour comes from: the verdict is judged on the
    max (over the bound: over-bound) and on every sample (one not stopped: orphaned), so the
    cell shows the max, or how many of its n samples were not stopped; n always."""
    n = row.get("n", 0)
    if row["verdict"] == "orphaned" or row.get("orphans"):
        return f"{n - row.get('stopped', 0)}/{n} orphaned ({row['orphans']} proc)"
    if row["verdict"] == "failed" or row.get("max_s") is None:
        return f"failed {len(row.get('errors') or [])} (n={n})"
    return f"max {_t(row['max_s'])} n={n}"


def gate_series(doc: dict[str, Any]) -> list[tuple[str, float | None, float | None, bool]]:
    """(label, baseline's stat, this run's stat, failed) for the gate's side-by-side panel."""
    g = doc["gate"]
    return compare_series(g["baseline"], doc["labels"], g["stat"], g["failures"])


def compare_series(
    base: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]], stat: str, failures: Sequence[str]
) -> list[tuple[str, float | None, float | None, bool]]:
    failed = {f.split(":")[0] for f in failures}

    def n(side: dict[str, dict[str, Any]], label: str) -> str:
        return str(side[label].get("n", "?")) if label in side else "-"

    return [
        (
            f"{label} (n={n(base, label)} / {n(now, label)})",
            base.get(label, {}).get(stat),
            now.get(label, {}).get(stat),
            label in failed,
        )
        for label in sorted(set(base) | set(now))
    ]


def _draw_gate(fig: Any, series: Sequence[tuple[str, float | None, float | None, bool]], title: str) -> None:
    """Per label two bars, the baseline's (grey) above this run's (blue; red when it fails the
    gate), each with its figure; a missing side says so."""
    ax = fig.add_subplot()
    top = max([v for _, b, c, _ in series for v in (b, c) if v is not None], default=1.0)
    for i, (_, base, now, failed) in enumerate(series):
        for dy, value, colour, who in (
            (-0.2, base, "#9e9e9e", "baseline"),
            (0.2, now, COLOURS["orphaned"] if failed else "#1565c0", "this run"),
        ):
            if value is None:
                ax.text(0, i + dy, f" {who}: no stopped sample", va="center", fontsize=7)
                continue
            ax.barh(i + dy, value, height=0.38, color=colour)
            ax.text(value, i + dy, f" {who} {_t(value)}", va="center", fontsize=7)
    ax.set_xlim(0, top * 1.45)
    ax.set_yticks(range(len(series)), [label for label, *_ in series])
    ax.set_ylim(len(series) - 0.5, -0.5)
    ax.set_xlabel("seconds; grey: the baseline, blue: this run, red: this run failed the gate; n: baseline / this run")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title)


def gate_svg(series: Sequence[tuple[str, float | None, float | None, bool]], title: str) -> str:
    import matplotlib

    with matplotlib.rc_context(RC):
        fig = _figure(9, 0.5 * len(series) + 1.4)
        _draw_gate(fig, series, title)
        return _svg(fig)


def kit_svg(doc: dict[str, Any]) -> str:
    """The kit's `--svg`: the kinds x stoppers grid above the latency distribution of every
    stopper and kind (one strip per cell, n in its label; a kind with samples not stopped is
    marked ORPHANED there, never left out), and, with --compare, the baseline beside this run."""
    import matplotlib

    columns, kinds, cells = kit_cells(doc)
    title = (
        f"stop conformance: bound {doc['bound_s']:g} s, kill grace {doc['kill_grace_s']:g} s, "
        f"{doc['repeat']} sample(s) per cell (n), exit {doc['exit_code']}; a cell: its max, or its samples not stopped"
    )
    series = []
    for s in doc["stoppers"]:
        if s["skipped"]:
            continue
        for row in s["rows"]:
            values = [x["latency_s"] for x in row["samples"] if x.get("latency_s") is not None]
            mark = f"n={len(values)}"
            if row["n"] - row["stopped"]:
                mark = f"n={len(values)} stopped; {row['n'] - row['stopped']}/{row['n']} ORPHANED"
            elif row["errors"]:
                mark += f"; {len(row['errors'])} FAILED"
            series.append((f"{stopper_name(s)} / {row['kind']} ({mark})", values, doc["bound_s"]))
    gate = gate_series(doc) if doc.get("gate") else []
    with matplotlib.rc_context(RC):
        gw, gh = _grid_size(columns, kinds)
        sh = _strip_height(series) if series else 0.0
        ch = 0.5 * len(gate) + 1.4 if gate else 0.0
        fig = _figure(max(gw, 9), gh + sh + ch)
        parts = [gh] + ([sh] if series else []) + ([ch] if gate else [])
        panels = list(fig.subfigures(len(parts), 1, height_ratios=parts)) if len(parts) > 1 else [fig]
        _draw_grid(panels[0], columns, kinds, cells, title)
        if series:
            _draw_strip(panels[1], series, "stop latency per stopper and kind (each stopped sample a dot)")
        if gate:
            rule = doc["gate"]["rule"] or f"{doc['gate']['stat']}, no --compare-fail"
            _draw_gate(panels[-1], gate, f"the gate ({rule}): the baseline beside this run, {doc['gate']['stat']}")
        return _svg(fig)


def samples_svg(samples: Sequence[dict[str, Any]], title: str, gate: Sequence[Any] = ()) -> str:
    """`--stop-latency-svg`: the plugin's samples (`--stop-latency-json`'s), one row per label
    with its n (and its samples not stopped, marked); with --stop-latency-compare, the gate's
    panel (`gate_series`) below it."""
    by_label: dict[str, tuple[list[float], list[int], float | None]] = {}
    for x in samples:
        values, failed, bound = by_label.setdefault(x["label"], ([], [], x.get("bound")))
        if x.get("stopped", True) and x.get("latency") is not None:
            values.append(x["latency"])
        else:
            failed.append(1)
    series = [
        (f"{label} (n={len(values) + len(failed)}{f'; {len(failed)} NOT STOPPED' if failed else ''})", values, bound)
        for label, (values, failed, bound) in sorted(by_label.items())
    ]
    if not gate:
        return strip(series, title)
    import matplotlib

    with matplotlib.rc_context(RC):
        sh, ch = _strip_height(series), 0.5 * len(gate) + 1.4
        fig = _figure(9, sh + ch)
        top, bottom = fig.subfigures(2, 1, height_ratios=[sh, ch])
        _draw_strip(top, series, title)
        _draw_gate(bottom, gate, "the gate: the baseline beside this session")
        return _svg(fig)
