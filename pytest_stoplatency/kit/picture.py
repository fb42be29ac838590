"""`--svg` without matplotlib: the kinds x stoppers grid, each cell coloured by its verdict.

Plain SVG from the standard library, so that `--svg` gives a picture on a clean install
(the kit's runtime is pytest, psutil and the standard library). With the plots extra
installed, `pytest_stoplatency.pictures` draws the grid and the latency distribution.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

from . import stats

COLOURS = {"whole": "#2e7d32", "over-bound": "#f9a825", "orphaned": "#c62828", "failed": "#616161"}
CELL_W, CELL_H, HEAD_W, HEAD_H = 150, 28, 170, 60


def _cell_text(row: dict[str, Any]) -> str:
    if row["verdict"] == "orphaned":
        return f"orphaned {row['orphans']}"
    if row["verdict"] == "failed":
        return "failed"
    return f"{stats.seconds(row['median_s'])} median"


def grid(doc: dict[str, Any]) -> str:
    stoppers = [s for s in doc["stoppers"] if not s["skipped"]]
    kinds = [r["kind"] for r in stoppers[0]["rows"]] if stoppers else []
    width = HEAD_W + CELL_W * len(stoppers) + 10
    height = HEAD_H + CELL_H * len(kinds) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f"<title>Stop conformance: bound {doc['bound_s']:g} s, kill grace {doc['kill_grace_s']:g} s</title>",
    ]
    for j, s in enumerate(stoppers):
        x = HEAD_W + j * CELL_W + CELL_W / 2
        out.append(f'<text x="{x}" y="{HEAD_H - 10}" text-anchor="middle" font-weight="bold">{escape(s["id"])}</text>')
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
    out.append(f'<text x="10" y="{height - 12}" fill="#333">{escape(legend)}; exit {doc["exit_code"]}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
