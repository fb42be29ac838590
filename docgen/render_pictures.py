"""Render the pictures docs/stop-latency.md embeds, from the committed measurements.

    python docgen/render_pictures.py            # write them (make docs; needs the plots extra)
    python docgen/render_pictures.py --check    # fail when one is stale (make docs-check)

- docs/stop-latency-measure.svg: the latency distribution per label of docs/measure.json
  (`make measure`), each label's bound drawn.
- docs/stop-latency-bench.svg: the kinds x stoppers grid of docs/bench.json (`make bench`).

Each picture carries, in a comment, the SHA-256 of what it was drawn from (its JSON, the
drawing code pytest_stoplatency/pictures.py and this file). `--check` compares that stamp
with the files as they are now: fast, and it needs no matplotlib, so `make docs-check`
verifies the pictures on any venv (matplotlib's SVG may differ by a byte between its
releases; the stamp does not).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "docs"  # the documents: templates, data, output
ROOT = HERE.parent
CODE = (ROOT / "pytest_stoplatency" / "pictures.py", Path(__file__).resolve())
STAMP = re.compile(r"<!-- drawn from sha256:([0-9a-f]{64}) -->")


def stamp(source: Path) -> str:
    h = hashlib.sha256()
    for path in (source, *CODE):
        h.update(path.read_bytes())
    return h.hexdigest()


def bench_cells(doc: dict) -> tuple[list[str], list[str], dict]:
    """docs/bench.json's peer table as grid cells: orphans, errors or the median."""
    from pytest_stoplatency.pictures import cell_text

    table = doc["stoppers"]["cells"]
    columns = sorted(table)
    kinds = sorted({kind for col in table.values() for kind in col})
    cells = {}
    for col in columns:
        for kind, cell in table[col].items():
            verdict = "orphaned" if cell["orphans"] else "failed" if cell["errors"] else "whole"
            cells[(col, kind)] = (verdict, cell_text({**cell, "verdict": verdict}))
    return columns, kinds, cells


def draw(name: str, source: Path) -> str:
    from pytest_stoplatency import pictures

    doc = json.loads(source.read_text(encoding="utf-8"))
    if name == "measure":
        svg = pictures.samples_svg(doc["samples"], f"stop latency per label ({source.name}, `make measure`)")
    else:
        n = doc["stoppers"]["n"]
        svg = pictures.grid(*bench_cells(doc), f"peer stoppers x victim kinds ({source.name}, {n} samples per cell)")
    return svg.rstrip("\n") + f"\n<!-- drawn from sha256:{stamp(source)} -->\n"


SOURCES = {"measure": "measure.json", "bench": "bench.json"}


def out_path(docs: Path, name: str) -> Path:
    return docs / f"stop-latency-{name}.svg"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="render_pictures", description="render docs/stop-latency-*.svg")
    ap.add_argument("--check", action="store_true", help="fail when a picture's stamp is not its sources' now")
    ap.add_argument("--docs", type=Path, default=HERE, help="the directory of the JSON files and the pictures")
    args = ap.parse_args(argv)
    stale = 0
    for name, source_name in SOURCES.items():
        source, out = args.docs / source_name, out_path(args.docs, name)
        if args.check:
            found = STAMP.search(out.read_text(encoding="utf-8")) if out.exists() else None
            if found is None or found.group(1) != stamp(source):
                print(
                    f"{out} is stale (drawn from another {source.name} or drawing code): run `make docs`",
                    file=sys.stderr,
                )
                stale += 1
            else:
                print(f"{out} is up to date")
            continue
        from pytest_stoplatency import pictures

        try:
            svg = draw(name, source)
        except pictures.PicturesUnavailable as exc:
            print(f"render_pictures: {exc}", file=sys.stderr)
            return 2
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(svg, encoding="utf-8")
        tmp.replace(out)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
