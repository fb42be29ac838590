"""`--svg` without matplotlib: the kinds x stoppers grid, each cell coloured by its verdict.

Plain SVG from the standard library, so that `--svg` gives a picture on a clean install
(the kit's runtime is pytest, psutil and the standard library). With the plots extra
installed, `pytest_stoplatency.pictures` draws the grid and the latency distribution.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

from . import stats


def stopper_name(s: dict[str, Any]) -> str:
    """A stopper's column: its adapter's name, or for `--start/--stop` its stop command."""
    how = s.get("how") or ""
    if s["id"] == "command" and ", stop `" in how:
        cmd = how.rsplit(", stop `", 1)[1].rstrip("`")
        return "stop: " + (cmd if len(cmd) <= 22 else cmd[:21] + "…")
    return str(s["id"])


COLOURS = {"whole": "#2e7d32", "over-bound": "#f9a825", "orphaned": "#c62828", "failed": "#616161"}
CELL_W, CELL_H, HEAD_W, HEAD_H = 150, 28, 170, 60


def _cell_text(row: dict[str, Any]) -> str:
    """From the statistic the colour comes from (the max; the samples not stopped), with n."""
    if row["verdict"] == "orphaned":
        return f"{row['n'] - row['stopped']}/{row['n']} orphaned ({row['orphans']} proc)"
    if row["verdict"] == "failed":
        return f"failed {len(row['errors'])} (n={row['n']})"
    return f"max {stats.seconds(row['max_s'])} n={row['n']}"


def grid(doc: dict[str, Any]) -> str:
    stoppers = [s for s in doc["stoppers"] if not s["skipped"]]
    kinds = [r["kind"] for r in stoppers[0]["rows"]] if stoppers else []
    width = HEAD_W + CELL_W * len(stoppers) + 10
    height = HEAD_H + CELL_H * len(kinds) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f"<title>Stop conformance: bound {doc['bound_s']:g} s, kill grace {doc['kill_grace_s']:g} s, "
        f"{doc['repeat']} sample(s) per cell</title>",
    ]
    for j, s in enumerate(stoppers):
        x = HEAD_W + j * CELL_W + CELL_W / 2
        name = escape(stopper_name(s))
        out.append(f'<text x="{x}" y="{HEAD_H - 10}" text-anchor="middle" font-weight="bold">{name}</text>')
    for i, kind in enumerate(kinds):
        y = HEAD_H + i * CELL_H
        out.append(f'<text x="{HEAD_W - 8}" y="{y + CELL_H * 0.65}" text-anchor="end">{escape(kind)}</text>')
        for j, s in enumerate(stoppers):
            row = s["rows"][i]
            x = HEAD_W + j * CELL_W
            out.append(
                f'<rect x="{x + 1}" y="{y + 1}" width="{CELL_W - 2}" height="{CELL_H - 2}" '
                f'fill="{COLOURS[row["verdict"]]}"><title>{escape(row["verdict"])}</title></rect>'
            )
            out.append(
                f'<text x="{x + CELL_W / 2}" y="{y + CELL_H * 0.65}" text-anchor="middle" fill="white">'
                f"{escape(_cell_text(row))}</text>"
            )
    legend = ", ".join(f"{v}: {c}" for v, c in COLOURS.items())
    out.append(
        f'<text x="10" y="{height - 12}" fill="#333">{escape(legend)}; a cell: its max, or its samples not '
        f"stopped, of n; exit {doc['exit_code']}</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"
