"""Each kind's verdict and the command's exit code: stopped whole within the bound, or not."""

from __future__ import annotations

from typing import Any

OK, ORPHANED, USAGE, OVER_BOUND, FAILED, INTERRUPTED = 0, 1, 2, 3, 4, 130
"""Exit codes of `conformance` (2 is a usage error, as argparse's): 0 every kind of every
stopper stopped whole within the bound; 1 a kind left a process alive after a stop that
ran (whatever else); 3 every kind stopped whole, one over the bound; 4 a sample could not
start or its stop failed (the stopper's fault, and nothing was orphaned); 130 the kit was
interrupted (Ctrl-C, SIGTERM)."""

EXIT_CODES = {
    OK: "every kind stopped whole within the bound",
    ORPHANED: "a kind was not stopped whole (a process of the tree outlived a stop that ran)",
    USAGE: "usage error, an adapter that cannot be loaded, or an output path that cannot be written (nothing was run)",
    OVER_BOUND: "every kind stopped whole, but a latency was over the bound",
    FAILED: "a sample failed to start, or its stop failed: the stop command could not run, exited non-zero, "
    "outlived --stop-timeout or left processes of its own (each named on its row)",
    INTERRUPTED: "interrupted by Ctrl-C or SIGTERM: the samples that finished are in the table and the outputs, "
    "and nothing the kit started is left",
}


def of_cell(cell: dict[str, Any], bound: float) -> str:
    """`whole`, `orphaned`, `over-bound` or `failed`."""
    if cell["orphans"] or cell["stopped"] < cell["n"]:  # ablate: kit-verdict-orphans
        return "orphaned"
    if cell["errors"] or not cell["n"]:
        return "failed"
    if cell["max_s"] is not None and cell["max_s"] > bound:
        return "over-bound"
    return "whole"


def exit_code(verdicts: list[str]) -> int:
    if "orphaned" in verdicts:
        return ORPHANED
    if "failed" in verdicts:
        return FAILED
    if "over-bound" in verdicts:
        return OVER_BOUND
    return OK
