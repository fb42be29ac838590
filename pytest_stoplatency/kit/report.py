"""The kit's outputs from one measurement: the document (JSON), the table, markdown."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from . import gate, stats, verdict

SCHEMA = 2
"""2: `labels` (per `STOPPER / KIND`, the plugin's --stop-latency-json label format) and
`machine` (its fingerprint) beside `stoppers`, so that either tool's file is a baseline for
the other's gate; `gate` when --compare was given."""


def document(result: dict[str, Any], *, bound: float, kill_grace: float) -> dict[str, Any]:
    """measure.run's result with each kind's verdict, per stopper, and the exit code."""
    stoppers, verdicts = [], []
    for s in result["stoppers"]:
        rows = []
        for v in result["victims"] if not s["skipped"] else []:
            cell = result["cells"][s["id"]][v["id"]]
            if result.get("interrupted") and not cell["samples"]:
                continue  # not reached before the interruption
            rows.append({"kind": v["id"], "label": v["label"], "verdict": verdict.of_cell(cell, bound), **cell})
        verdicts += [r["verdict"] for r in rows]
        stoppers.append({**s, "rows": rows})
    code = verdict.exit_code(verdicts) if verdicts else verdict.FAILED
    doc: dict[str, Any] = {"bound_s": bound, "stoppers": stoppers}
    if result.get("interrupted"):
        code = verdict.INTERRUPTED
    return {
        "schema": SCHEMA,
        "machine": gate.machine(),
        "labels": gate.kit_labels(doc),
        "repeat": result["n"],
        "bound_s": bound,
        "kill_grace_s": kill_grace,
        "settle_s": result["settle_s"],
        "stoppers": stoppers,
        "interrupted": bool(result.get("interrupted")),
        "exit_code": code,
        "exit_meaning": verdict.EXIT_CODES[code],
    }


def gated(doc: dict[str, Any], result: gate.Result, baseline: gate.Baseline, rule: gate.Rule | None) -> None:
    """The gate's outcome into the document: its table, failures, the baseline's labels (for
    the side-by-side picture) and, when the verdicts passed, its exit code."""
    doc["gate"] = {
        "rule": rule.text if rule else None,
        "stat": rule.stat if rule else gate.DEFAULT_STAT,
        "lines": result.lines,
        "failures": result.failures,
        "machine": result.machine,
        "baseline_machine": baseline.machine,
        "baseline": baseline.labels,
    }
    if result.code is not None and doc["exit_code"] == verdict.OK:
        doc["exit_code"] = result.code
        doc["exit_meaning"] = gate.EXIT_CODES[result.code]


def gate_text(doc: dict[str, Any]) -> list[str]:
    g = doc.get("gate")
    if not g:
        return []
    out = [f"conformance: {g['machine']}"] if g["machine"] else []
    out.append("compared with the baseline:")
    out += ["  " + line for line in g["lines"]]
    out += [f"gate failed: {f}" for f in g["failures"]]
    return out


def _outcome(row: dict[str, Any]) -> str:
    if row["verdict"] == "orphaned":
        alive = row["n"] - row["stopped"]
        return f"ORPHANED {row['orphans']} ({row['label']}; {alive}/{row['n']} samples not stopped)"
    if row["verdict"] == "failed":
        return f"FAILED: {row['errors'][0] if row['errors'] else 'no sample'}"
    return "OVER BOUND" if row["verdict"] == "over-bound" else "stopped whole"


P95_MIN_N = 20
"""Below this many latencies the table prints no p95: the nearest-rank p95 of fewer is the max."""

HEADS = ("kind", "stopped", "min", "median", "p95", "max", "verdict")


def rows(stopper: dict[str, Any]) -> list[list[str]]:
    return [
        [
            r["kind"],
            f"{r['stopped']}/{r['n']}",
            *(stats.seconds(r[k]) for k in ("min_s", "median_s")),
            stats.seconds(r["p95_s"]) if r["stopped"] >= P95_MIN_N else "-",
            stats.seconds(r["max_s"]),
            _outcome(r),
        ]
        for r in stopper["rows"]
    ]


def _title(doc: dict[str, Any], s: dict[str, Any]) -> str:
    return f"{s['id']}: {s['how'] or s['label']}".rstrip(": ")


def table(doc: dict[str, Any]) -> str:
    """One block per stopper, one row per victim kind, then the verdict."""
    out = []
    for s in doc["stoppers"]:
        out.append(_title(doc, s))
        if s["skipped"]:
            out.append(f"  skipped: {s['skipped']}")
            continue
        body = [list(HEADS), *rows(s)]
        widths = [max(len(r[i]) for r in body) for i in range(len(HEADS))]
        out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    out.append(
        f"bound {doc['bound_s']:g} s, kill grace {doc['kill_grace_s']:g} s, {doc['repeat']} sample(s) per kind: "
        f"exit {doc['exit_code']} ({doc['exit_meaning']})"
    )
    return "\n".join(out)


def markdown(doc: dict[str, Any]) -> str:
    """The same table for a README or an issue."""
    out = [f"# Stop conformance (bound {doc['bound_s']:g} s, kill grace {doc['kill_grace_s']:g} s)", ""]
    for s in doc["stoppers"]:
        out += [f"## `{s['id']}`", "", s["how"] or s["label"], ""]
        if s["skipped"]:
            out += [f"Skipped: {s['skipped']}.", ""]
            continue
        out += ["| " + " | ".join(HEADS) + " |", "|" + "---|" * len(HEADS)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows(s)]
        out.append("")
    if doc.get("gate"):
        out += ["## The gate", "", "```", *gate_text(doc), "```", ""]
    out.append(f"Exit {doc['exit_code']}: {doc['exit_meaning']}.")
    return "\n".join(out) + "\n"


def write(path: Path, text: str) -> None:
    """Whole or not at all: a temporary file beside it, renamed (removed if the write fails)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def unwritable(path: Path) -> str | None:
    """Why `write(path, ...)` would fail, found before anything runs (None: it can write).
    Leaves nothing behind: a probe file beside the path is made and removed."""
    if path.is_dir():
        return "is a directory"
    here = path.parent
    while not here.exists() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        return f"{here} is not a directory"
    if here != path.parent:  # write() makes the missing directories
        return None if os.access(here, os.W_OK | os.X_OK) else f"{here} is not writable"
    probe = here / f".{path.name}.probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        return exc.strerror or str(exc)
    probe.unlink()
    return None


def json_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
