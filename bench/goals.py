"""The goals of issues 20 and 32, each beside the figure that `make bench` measures for it.

Targets, not measurements: written into docs/bench.json with the run, so that the
document shows each figure against its goal (rendered, never typed).
"""

from __future__ import annotations

GOALS = {
    "engine_sigterm_cooperative_s": 0.005,
    "engine_sigterm_trapping_over_grace_s": 0.010,
    "runner_stop_cooperative_s": 0.040,
    "runner_stop_trapping_over_grace_s": 0.040,
    "scale_ratio_to_killpg": 1.2,
    "items_rate_fraction_of_100": 0.8,
    "items_per_second_at_5000": 50,
    "items_peak_mb_at_20000": 64,
    "journal_extra_s": 0.100,
    "journal_peak_mb": 100,
    "plugin_idle_cost_s": 0.002,
    "list_s_at_500_runs": 0.300,
    "first_poll_s_at_500_runs": 0.300,
    "stop_all_s_at_500_runs": 1.0,
    "poll_memory_mb": 3.0,
    "items_peak_mb_at_50000": 64,
    "first_poll_s_at_500_runs_loaded": 0.300,
    "page_bytes_per_s_at_500_runs_3_live": 50_000,
    "page_polls_per_s_idle": 1.0,
}
"""SIGTERM to the engine: cooperative within 5 ms, trapping within kill_grace + 10 ms.
`runner stop` and `--now`: cooperative within 40 ms, trapping within kill_grace + 40 ms.
1,000 processes within 1.2x a raw killpg. Items: 20,000 at no less than 80 % of the
100-item rate, at least 50 a second at 5,000, under 64 MB at 20,000. A 1 GB journal:
each command within 100 ms of a fresh run's, under 100 MB. The unused plugin: within
noise, 2 ms. With 500 runs under one directory (issue 32): `runner list` and the
dashboard's first `/api/runs` within 300 ms, `stop --all` with nothing live within 1 s,
the dashboard server's memory within 3 MB over a thousand polls; the engine under 64 MB
at 50,000 items. Issue 42: at 500 runs the first `/api/runs` within 300 ms beside two CPU
hogs, an open page's traffic with three runs live at most 50 KB/s, and at most one poll a
second while nothing is live."""
