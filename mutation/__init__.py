"""The ablation runner: proves each stop path load-bearing by deleting it.

Public API:

    load(path) -> Campaign                      # mutations.toml, validated
    run(campaign, root, *, jobs, artifacts, only=None, progress=None) -> Outcome
    render_table(outcome) -> str
    to_json(outcome) -> dict

`python -m mutation` is the command line (`make mutate`).
"""

from .campaign import BaselineFailed, Outcome, run
from .report import render_table, to_json
from .spec import Campaign, Mutation, SpecError, load

__all__ = [
    "BaselineFailed",
    "Campaign",
    "Mutation",
    "Outcome",
    "SpecError",
    "load",
    "render_table",
    "run",
    "to_json",
]
