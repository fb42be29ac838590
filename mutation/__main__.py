"""python -m mutation: run the ablation campaign (`make mutate`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import BaselineFailed, SpecError, load, render_table, run, to_json
from .campaign import Interrupted


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mutation", description=__doc__)
    ap.add_argument("--config", default="mutation/mutations.toml")
    ap.add_argument("--root", default=".", help="the git working tree to copy (never edited)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--artifacts", default=".artifacts/mutate", help="inner pytest logs and probe files")
    ap.add_argument("--json", default="docs/mutate.json", help="where the verdicts are written")
    ap.add_argument("--table", default=None, help="also write the table here (default: beside --json)")
    ap.add_argument("--only", action="append", metavar="ID", help="run only this mutation (repeatable)")
    ap.add_argument(
        "--baseline-from",
        action="append",
        metavar="PYTEST_JSON",
        help="read the baseline from a probe report of the suite's own run of this tree "
        "(pytest -p mutation._pytest_probe with MUTATION_PROBE_DIR set; repeatable) instead of running it",
    )
    args = ap.parse_args(argv)
    try:
        campaign = load(args.config)
    except SpecError as exc:
        print(f"mutate: {exc}", file=sys.stderr)
        return 2

    def progress(msg: str) -> None:
        print(f"mutate: {msg}", file=sys.stderr, flush=True)

    try:
        outcome = run(
            campaign,
            args.root,
            jobs=args.jobs,
            artifacts=args.artifacts,
            only=args.only,
            baseline_from=args.baseline_from,
            progress=progress,
        )
    except BaselineFailed as exc:
        print(f"mutate: {exc}", file=sys.stderr)
        return 3
    except Interrupted as exc:
        print(f"mutate: {exc}: inner runs killed, scratch copies removed, no verdicts written", file=sys.stderr)
        return 128 + exc.signum
    except ValueError as exc:
        print(f"mutate: {exc}", file=sys.stderr)
        return 2
    table = render_table(outcome)
    print(table, flush=True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(to_json(outcome), indent=2) + "\n")
    os.replace(tmp, out)
    table_path = Path(args.table) if args.table else out.with_suffix(".txt")
    table_path.write_text(table + "\n")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
