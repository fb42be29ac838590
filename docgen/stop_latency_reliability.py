"""docs/stop-latency.md's Reliability section: the soak's figures (docs/soak.json), the faults
at the seams and the stop under faults. A part of render_stop_latency.Context."""

from __future__ import annotations

from stop_latency_text import (
    _human,
    _seconds,
)


class ReliabilitySection:
    def reliability(self) -> str:
        s = self.soak
        if not s:
            return f"*No soak run recorded (`{self.soak_name}` absent): run `make soak`.*"
        crash, hard, now, many = s["crash_and_resume"], s["load_stop"], s["load_stop_now"], s["many_stoppers"]
        commit = s.get("git_commit") or "not recorded in the JSON"
        grace = s.get("kill_grace")
        grace = f"`kill_grace` {grace:g} s" if isinstance(grace, (int, float)) else "`kill_grace` not recorded"
        src = (
            f"MEASURED by `make soak` (`reliability/soak.py`, `{self.soak_name}`, {s.get('date', '?')}, "
            f"{s.get('cpus', '?')} CPUs, seed {s.get('seed')}, commit `{commit}`; every run's {grace}, "
            "a provider that traps SIGTERM, a stop's latency is its command's wall time; "
            'the benchmark\'s "Under load" rows below stop a whole trapping tree at its own kill grace)'
        )
        rows = [
            "| what | figure |",
            "|---|---|",
            f"| engine SIGKILLs at random points, each followed by `runner resume` | {crash['kills']} over "
            f"{crash['runs']} runs ({crash['engine_group_kills']} with the engine's whole group, "
            f"{crash['child_group_kills']} with a call's group too) |",
            "| the phase each kill landed in | "
            + (", ".join(f"{k} {v}" for k, v in crash.get("phases", {}).items()) or "not recorded")
            + " |",
            f"| torn or unreadable state, lost or re-run items, leftovers after resume | {len(crash['problems'])} |",
            f"| {hard['runs']} runs stopped at once by `runner stop` | median {_human(hard['median_s'])}, "
            f"p95 {_human(hard['p95_s'])}; exit codes {hard['codes']}; problems {len(hard['problems'])} |",
            f"| {now['runs']} runs stopped at once by `runner stop --now` | median {_human(now['median_s'])}, "
            f"p95 {_human(now['p95_s'])}; exit codes {now['codes']}; problems {len(now['problems'])} |",
            f"| {many['stoppers']} concurrent stoppers (hard, `--now`, graceful) on one run | exit codes "
            f"{many['codes']}; problems {len(many['problems'])} |",
        ]
        modes, all_now = s.get("stop_modes"), s.get("all_now")
        if modes:
            # reliability/modes.py: every way to stop a run, every victim, both containments.
            for mode, m in modes["modes"].items():
                rows.append(
                    f"| stop mode `{mode}`, every victim and containment (reliability/modes.py) | "
                    f"{m['trials']} trials; "
                    f"{m['with_problems']} broke an invariant; {m['exit0_with_something_left']} exit 0 with "
                    f"something left; exit codes {m['codes']} |"
                )
        if all_now:
            rows.append(
                f"| {all_now['runs']} runs stopped by one `runner stop --all --now` | {all_now['with_a_failure']} "
                f"with a session or item recorded failed; exit {all_now['code']} |"
            )
        return (
            src
            + ":\n\n"
            + "\n".join(rows)
            + self._faults(s.get("faults"), (s.get("disk_and_pidns_faults") or {}).get("faults"))
            + self._seams(s.get("seam_faults"))
        )

    def _seams(self, seams: dict | None) -> str:
        """The faults at the seams (reliability/soak_seams.py, issue 27): one row per fault, with
        its own figure (a bound, a backup's bytes, a refusal's bytes)."""
        faults = (seams or {}).get("faults") or {}
        skipped = (seams or {}).get("skipped") or {}
        if not faults and not skipped:
            return ""
        stamp = (seams or {}).get("stamp") or {}
        when = (
            f"measured on its own (`--parts seams --merge`, {stamp.get('date', '?')}, {stamp.get('cpus', '?')} CPUs, "
            f"seed {stamp.get('seed')}, commit `{stamp.get('git_commit') or 'not recorded'}`)"
            if stamp
            else "from the same soak"
        )
        rows = [
            "",
            "",
            f"Faults at the seams, {when} (`reliability/soak_seams.py`): per fault, the trials, the "
            "processes of the run and the cgroups left, every exit code seen and how many of them "
            "docs/exit-codes.md does not list for that command (INTERNAL never counts as listed), and "
            "the fault's own figure.",
            "",
            "| fault | trials | processes left | cgroups left | exit codes (not listed) | figure |",
            "|---|---|---|---|---|---|",
        ]
        for what, f in faults.items():
            codes = sorted(int(c) for c in f.get("codes", {}))
            figure = []
            if "max_s" in f:
                figure.append(
                    f"slowest {_human(f['max_s'])} (bound {_human(f['bound_s'])}); over the bound "
                    f"{f.get('over_bound', 0)}"
                )
            if "not_one_line" in f:
                figure.append(f"not one line {f['not_one_line']}")
            if "rm_failed" in f:
                figure.append(
                    f"the one `rm -rf` failed {f['rm_failed']} (a file made meanwhile: the directory left half "
                    "removed, stopped all the same)"
                )
            elif f.get("rm_again"):
                figure.append(f"`rm -rf` run again {f['rm_again']} (a file made meanwhile)")
            if "backups_changed" in f:
                figure.append(f"backups changed {f['backups_changed']}")
            if "bytes_changed" in f:
                figure.append(f"names or bytes changed {f['bytes_changed']}; not refused {f.get('not_refused', 0)}")
            rows.append(
                f"| {what} | {f['trials']} | {f['processes_left']} | {f.get('cgroups_left', 0)} "
                f"| {codes} ({f.get('undocumented', 0)}) | {'; '.join(figure) or '-'} |"
            )
        for what, why in sorted(skipped.items()):
            rows.append(f"| {what} | skipped: {why} | | | | |")
        return "\n".join(rows)

    _FAULTS = (
        ("stopper_sigkill", "a stopper (`--now` or plain) SIGKILLed at a random moment, then a plain `runner stop`"),
        ("stopper_sigint", "a stopper (`--now` or plain) SIGINTed at a random moment, then a plain `runner stop`"),
        ("fork_storm", "a fork storm (SIGTERM ignored, setsid, re-fork) without a cgroup, `runner stop --now`"),
        ("early_sigterm_foreground", "SIGTERM to a foreground `runner run` at 0.02 to 1 s after its start"),
        ("early_sigterm_pid1", "SIGTERM to `runner run` as PID 1 of a pid namespace at 0.02 to 1 s after its start"),
        (
            "run_local_sigterm",
            "SIGTERM to the PID 1 (tini) of the container recipe's entrypoint under `examples/kubernetes/run-local`, "
            "at each moment after PID 1 came to exist",
        ),
        ("run_local_sigterm_hog", "the same, beside two CPU hogs"),
    )

    def _faults(self, faults: dict | None, disk: dict | None = None) -> str:
        """The stop under faults (reliability/faults.py, reliability/soak_disk.py): one row per fault,
        when the soak ran them."""
        if not faults and not disk:
            return ""
        faults = faults or {}
        rows = [
            "",
            "",
            "The stop under faults, from the same soak: per fault, the trials, the runs left running, "
            "the processes of the run left, the stops that exited 0 with something left, the stops not "
            "recorded, and every exit code seen (the first stopper's too; -9 is its SIGKILL).",
            "",
            "| fault | trials | runs left running | processes left | exit 0, something left | stops not recorded "
            "| exit codes |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, what in self._FAULTS:
            f = faults.get(key)
            if not f:
                continue
            note = ""
            early = f.get("before_first_instruction")
            if early and key.endswith("pid1"):
                note = (
                    f" ({early} of the signals would have fallen in the interpreter's start-up, before the "
                    "runner's first instruction, where the kernel drops an init's SIGTERM: they were sent "
                    "once the mask was in place)"
                )
            elif early:
                note = (
                    f" ({early} of the signals fell in the interpreter's start-up, before the runner's first "
                    "instruction: the command died of it (-15) having started nothing)"
                )
            if f.get("max_stop_s") is not None:
                note += f"; slowest stop {_human(f['max_stop_s'])} after the signal or the engine's start"
            if f.get("by_moment"):
                note = "; per moment: " + ", ".join(
                    f"{_seconds(float(at))}: {m['trials']} ({m['stopped']} stopped and recorded, "
                    f"{m['never_started']} never started"
                    + (f", **{m['problems']} otherwise**" if m["problems"] else "")
                    + ")"
                    for at, m in f["by_moment"].items()
                )
                note += (
                    " (never started: tini's 143, the SIGTERM ended the entrypoint before `runner`'s first instruction)"
                )
            rows.append(
                f"| {what}{note} | {f['trials']} | {f['runs_left_running']} | {f['processes_left']} "
                f"| {f['exit0_with_something_left']} | {f['stops_not_recorded']} | {f['codes']} |"
            )
        for what, f in sorted((disk or {}).items()):
            if "trials" not in f or "codes" not in f:
                continue
            codes = sorted(int(c) for c in f["codes"])
            if "read-only" in what:
                what += " (exit NOT_RECORDED: its one line says the stop could not be recorded, and why)"
            rows.append(
                f"| {what} | {f['trials']} | {f['runs_left_running']} | {f['processes_left']} "
                f"| {f['exit0_with_something_left']} | {f['stops_not_recorded']} | {codes} |"
            )
        resumed = (disk or {}).get("resume after space freed")
        if resumed:
            rows += [
                "",
                f"After the disk was full at the stop, space freed: {resumed['completed']} of "
                f"{resumed['trials']} runs resumed and completed.",
            ]
        return "\n".join(rows)

    # -- the benchmark (docs/bench.json, `make bench`) --------------------------------
