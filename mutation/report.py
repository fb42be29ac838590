"""The verdict table (text) and the JSON that docs/stop-latency.md renders from."""

from __future__ import annotations

from .campaign import Outcome

SCHEMA = 1


def to_json(outcome: Outcome) -> dict:
    return {
        "schema": SCHEMA,
        "time": outcome.time,
        "git_commit": outcome.git_commit,
        "machine": outcome.machine,
        "ok": outcome.ok,
        "baseline_seconds": round(outcome.baseline_seconds, 1),
        "baseline_from": outcome.baseline_from,
        "total_seconds": round(outcome.total_seconds, 1),
        "mutations": [
            {
                "id": r.mutation.id,
                "path": r.mutation.path,
                "why": r.mutation.why,
                "file": r.mutation.file,
                "killers": list(r.mutation.killers),
                "survivors": list(r.mutation.survivors),
                "verdict": r.verdict.verdict,
                "detail": r.verdict.detail,
                "killed_by": r.verdict.killed_by,
                "survivors_red": r.verdict.survivors_red,
                "seconds": round(r.duration, 1),
            }
            for r in outcome.results
        ],
    }


def render_table(outcome: Outcome) -> str:
    rows = [("mutation", "verdict", "s", "killed by / detail", "survivors")]
    for r in outcome.results:
        v = r.verdict
        what = ", ".join(v.killed_by) if v.killed_by else v.detail
        surv = (
            "-"
            if not r.mutation.survivors
            else ("RED: " + ", ".join(v.survivors_red) if v.survivors_red else f"{len(r.mutation.survivors)} green")
        )
        rows.append((r.mutation.id, v.verdict, f"{r.duration:.0f}", what, surv))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[j]) for j, c in enumerate(row[:4])) + "  " + row[4])
        if i == 0:
            lines.append("-" * (sum(widths) + 8 + len(row[4])))
    bad = [r for r in outcome.results if r.verdict.verdict != "killed" or r.verdict.survivors_red]
    lines.append(
        f"{len(outcome.results)} mutations: "
        f"{sum(r.verdict.verdict == 'killed' for r in outcome.results)} killed, {len(bad)} not ok "
        + (
            f"(baseline from the suite's own runs, total {outcome.total_seconds:.0f} s)"
            if outcome.baseline_from
            else f"(baseline {outcome.baseline_seconds:.0f} s, total {outcome.total_seconds:.0f} s)"
        )
        + "".join(f"; {r.mutation.id}: {r.verdict.verdict}" for r in bad)
    )
    # Named again after the count: a CI log is often read from its tail, where the table is cut.
    for r in bad:
        v = r.verdict
        what = v.detail or ("survivors red: " + ", ".join(v.survivors_red))
        lines.append(f"not ok: {r.mutation.id} ({v.verdict}): {what}")
    return "\n".join(lines)
