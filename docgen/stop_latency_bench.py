"""docs/stop-latency.md's benchmark sections (docs/bench.json): the peer table, scale and load,
sizes, the dashboard, runs, the container's PID 1, costs and goals. A part of
render_stop_latency.Context."""

from __future__ import annotations

from stop_latency_text import (
    _measured,
    _seconds,
)


def _dashboard_side(side: dict | None) -> str:
    if not side:
        return "| not measured | | | | |"
    if "error" in side:
        return f"| not measured ({side['error']}) | | | | |"
    return (
        f"| {side['cpu_percent']:g} % | {side['cpu_ms_per_poll']:g} ms | {side['polls_per_s']:g} | "
        f"{side['not_modified']} of {side['polls']} | {side['bytes_per_poll']:,} |"
    )


class BenchSection:
    def _bench_part(self, part: str) -> dict | None:
        return (self.bench or {}).get(part) or None

    def _bench_absent(self, what: str) -> str:
        if not self.bench:
            return (
                f"*{what}: not measured: no benchmark run recorded (`{self.bench_name}` absent); "
                "`make bench` writes it.*"
            )
        return f"*{what}: not measured: the run recorded in `{self.bench_name}` has no such part.*"

    def _bench_tag(self) -> str:
        b = self.bench or {}
        mach = b.get("machine", {})
        kind = "a reduced CI run of `make bench`" if b.get("ci") else "`make bench`"
        load = mach.get("loadavg_at_start")
        load = f", load average {load[0]:g} at start" if load else ""
        grace = b.get("kill_grace")
        grace = f"{grace:g} s" if isinstance(grace, (int, float)) else "?"
        return (
            f"MEASURED by {kind}, bench `python -m bench.stoppers` (`{self.bench_name}`, {b.get('date', '?')}; "
            f"{mach.get('hostname', '?')}, "
            f"Linux {mach.get('kernel', '?')}, {mach.get('cpus', '?')} CPUs{load}, Python {mach.get('python', '?')}; "
            f"commit `{b.get('git_commit') or 'unknown'}`; kill grace {grace} for every stopper)"
        )

    @staticmethod
    def _bench_cell(cell: dict) -> str:
        if not cell.get("n"):
            return "not measured (" + "; ".join(cell.get("errors") or ["no sample"]) + ")"
        text = f"{cell['stopped']}/{cell['n']} stopped"
        if cell["stopped"]:
            text += f", median {_measured(cell['median_s'])}, max {_measured(cell['max_s'])}"
        if cell["orphans"]:
            text += f"; **{cell['orphans']} orphan{'s' if cell['orphans'] != 1 else ''} left**"
        if cell.get("errors"):
            text += f"; {len(cell['errors'])} sample(s) failed: " + "; ".join(cell["errors"])
        return text

    def bench_stoppers(self) -> str:
        part = self._bench_part("stoppers")
        if not part:
            return self._bench_absent("The stoppers compared")
        victims = part["victims"]
        rows = [
            "| stopper | " + " | ".join(v["label"] for v in victims) + " |",
            "|---" * (len(victims) + 1) + "|",
        ]
        for s in part["stoppers"]:
            if s.get("skipped"):
                rows.append(f"| {s['label']} | not measured: {s['skipped']} |" + " - |" * (len(victims) - 1))
                continue
            cells = part["cells"][s["id"]]
            rows.append(f"| {s['label']} | " + " | ".join(self._bench_cell(cells[v["id"]]) for v in victims) + " |")
        how = "\n".join(f"- {s['label']}: {s['how']}" for s in part["stoppers"])
        return (
            f"{self._bench_tag()}; n={part['n']} per cell. A tree is stopped when the stopper has returned "
            "and no process of the tree is left; the latency runs from the stop's first action until both "
            "are true (median and max over the stopped samples). An orphan is a process of the tree still "
            f"alive {_seconds(part['settle_s'])} after the stopper returned, found by the tree's marker in "
            "its argv (the environment alone would miss the env-scrubber's grandchild).\n\n"
            + "\n".join(rows)
            + "\n\nWhat each stopper does:\n\n"
            + how
        )

    @staticmethod
    def _bench_figure(summary: dict, n: int | None = None) -> str:
        if summary.get("median_s") is None:
            return "not stopped"
        shown = f"median {_measured(summary['median_s'])}, max {_measured(summary['max_s'])}"
        return shown + (f" (n={n})" if n is not None else "")

    def _bench_scale(self) -> str:
        part = self._bench_part("scale")
        if not part:
            return self._bench_absent("At scale")
        rows = [
            "| processes in the tree | raw `killpg(SIGKILL)` | `runner stop --now`: forced phase minus kill grace "
            "| `runner stop --now` end to end | runner / raw (medians) | orphans (raw, runner) |",
            "|---|---|---|---|---|---|",
        ]
        for r in part["rows"]:
            ratio = f"{r['ratio']:.2f}×" if r.get("ratio") is not None else "-"
            rows.append(
                f"| {r['processes']:,} | {self._bench_figure(r['raw'], r['raw']['n'])} "
                f"| {self._bench_figure(r['runner_forced_minus_grace'], r['runner_forced_minus_grace']['n'])} "
                f"| {self._bench_figure(r['runner_end_to_end'], r['runner_end_to_end']['n'])} | {ratio} "
                f"| {r['raw']['orphans']}, {r['runner_end_to_end']['orphans']} |"
            )
        own = f" {self._part_tag(part)}; n={part['n']} per size and side." if part.get("date") else ""
        loads = [
            f"{r['processes']:,}: median {r['loadavg_1m']['median']:g} ({r['loadavg_1m']['min']:g}-"
            f"{r['loadavg_1m']['max']:g})"
            for r in part["rows"]
            if (r.get("loadavg_1m") or {}).get("median") is not None
        ]
        load = f" The 1-minute load average after each pair, by size: {'; '.join(loads)}." if loads else ""
        return (
            f"**At scale.**{own} The tree: one {part['tree']} of N processes, every one trapping SIGTERM, "
            "all in one process group. Raw: one `killpg(SIGKILL)` until the last process is dead. Runner: "
            "a real run whose provider is the tree; its forced phase is the time `runner stop --now` reports, "
            "minus the kill grace it waits out before its SIGKILL (every process traps SIGTERM). "
            "Both sides in the same run, alternating, each side first in every other pair; the ratio is "
            f"of the two sides' medians.{load}\n\n" + "\n".join(rows)
        )

    def _bench_load(self) -> str:
        part = self._bench_part("load")
        if not part:
            return self._bench_absent("Under load")
        rows = [
            "| stopped by | runs stopped | latency per run | p95 | slowest stop command | exit codes | orphans |",
            "|---|---|---|---|---|---|---|",
        ]
        for m in part["modes"]:
            mode = m["mode"]
            label = f"`runner {mode}`" + (" (one command)" if "--all" in mode else " (one command per run)")
            if "skipped" in m:
                rows.append(f"| {label} | not measured: {m['skipped']} | - | - | - | - | - |")
                continue
            p95 = _measured(m["p95_s"]) if m.get("p95_s") is not None else "-"
            slowest = _measured(m["command_max_s"]) if m.get("command_max_s") is not None else "-"
            # n counts runs, not commands: one `--all` command stops them all.
            if m.get("commands") == 1:
                figure = f"{_measured(m['max_s'])} (n=1: one command for {m['runs']} runs, each done when it returned)"
            else:
                figure = self._bench_figure(m) + f" (n={m['n']} runs, one command each)"
            rows.append(
                f"| {label} | {m['stopped']}/{m['runs']} | {figure} | {p95} "
                f"| {slowest} | {m['codes']} | {m['orphans']} |"
            )
        return (
            f"**Under load.** {part['runs']} runs live at once, each with its own {part['tree']} tree as "
            "its provider, released together; a run's latency runs from the release until its stop command "
            "has returned and no process of its tree is left. Exit code -1: a stop command the benchmark "
            f"killed after {_seconds(part.get('command_wait_s', 0))} (its run counts as not stopped).\n\n"
            + "\n".join(rows)
        )

    def bench_scale_load(self) -> str:
        if not self.bench:
            return self._bench_absent("At scale and under load")
        return f"{self._bench_tag()}.\n\n" + self._bench_scale() + "\n\n" + self._bench_load()

    def _part_tag(self, part: dict) -> str:
        b = self.bench or {}
        mach = b.get("machine", {})
        load = part.get("loadavg_at_start")
        load = f", load average {load[0]:g} at start" if load else ""
        return (
            f"MEASURED by `make bench`, bench `python -m bench.stoppers` (`{self.bench_name}`, "
            f"{part.get('date', '?')}; {mach.get('hostname', '?')}, "
            f"{mach.get('cpus', '?')} CPUs{load}; commit `{part.get('git_commit') or 'unknown'}`)"
        )

    def bench_sizes(self) -> str:
        items, journal = self._bench_part("items"), self._bench_part("journal")
        out = []
        if not items:
            out.append(self._bench_absent("Items"))
        else:
            rows = [
                "| items | done in the window | items per second | of the bare loop's spawns per second "
                "| engine CPU per item | engine peak memory |",
                "|---|---|---|---|---|---|",
            ]
            for r in items["rows"]:
                rate = f"{r['items_per_second']:g}" if r.get("items_per_second") else "-"
                share = f"{r['of_bare_loop']:.0%}" if r.get("of_bare_loop") else "-"
                cpu = f"{r['engine_cpu_ms_per_item']:g} ms" if r.get("engine_cpu_ms_per_item") else "-"
                peak = f"{r['engine_peak_mb']:g} MB" if r.get("engine_peak_mb") else "-"
                done = f"{r['done']:,}" + (" (all)" if r.get("completed") else "")
                rows.append(f"| {r['items']:,} | {done} | {rate} | {share} | {cpu} | {peak} |")
            bare = items.get("bare_loop_per_second")
            bare_text = (
                f" The physical limit beside it: a bare loop that spawns the same `true` the same way (its own "
                f"session, its output to a file, waited for) and nothing else spawned {bare:g} a second "
                "(the best of three runs of it, before, between and after the items); the share is the items' "
                "rate over it."
                if bare
                else " (No bare loop in this run.)"
            )
            out.append(
                f"**Items.** {self._part_tag(items)}. A spec of N items whose provider is `true`, run "
                f"detached for at most {_seconds(items['window'])}, each count twice in alternating order "
                "(the row: the sample of the higher rate); items per second from the journal (items done "
                "after the first, over the time from the first `item-done` to the last); the engine's own CPU "
                "time per item over the same span (what a loaded machine changes least); the engine's peak "
                "memory is its VmHWM." + bare_text + "\n\n" + "\n".join(rows)
            )
        if not journal:
            out.append(self._bench_absent("Journal size"))
        else:
            sides = [journal["fresh"], *journal["large"]]
            head = ["fresh run"] + [f"journal of {s['journal_bytes'] / (1 << 20):,.0f} MiB" for s in journal["large"]]
            rows = ["| command | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
            labels = {
                "stop": "`runner stop` (live run)",
                "stop_now": "`runner stop --now` (live run)",
                "stop_stopped": "`runner stop` again (stopped run)",
                "status": "`runner status --json`",
                "list": "`runner list`",
                "logs": "`runner logs`",
            }
            for key, label in labels.items():
                cells = [
                    f"{_measured(s[key]['seconds'])}, {s[key]['max_rss_mb']:g} MB, exit {s[key]['rc']}" for s in sides
                ]
                rows.append(f"| {label} | " + " | ".join(cells) + " |")
            out.append(
                f"**Journal size.** {self._part_tag(journal)}. Live runs (provider `sleep`); the large ones' "
                "journals padded, in the current attempt, with `hook-result` records. Each command: wall time, "
                "peak memory (its `ru_maxrss`, forked from a small process of the benchmark's, whose own few MB it "
                "counts), exit code; the median of three for the commands that leave the run as it was. Exit 6 "
                "(NO_LIVE_RUN): the second `runner stop` finds the run already stopped.\n\n" + "\n".join(rows)
            )
        return "\n\n".join(out)

    def bench_dashboard(self) -> str:
        part = self._bench_part("dashboard")
        if not part:
            return self._bench_absent("The dashboard with a page open")
        from runner.dashboard import connections  # the tree's own limits, as _defaults()

        sides = part.get("sides", {})
        labels = {
            "previous": f"before (commit `{str(part.get('reference_commit'))[:10]}`), polled as its page polled",
            "unconditional": "now, polled without `If-None-Match` (every answer a 200 with the body)",
            "conditional": "now, polled as its page polls (the ETag sent back: 304 while nothing changed)",
        }
        rows = [
            "| dashboard | server CPU (of one core) | CPU per poll | polls per second | answered 304 "
            "| bytes per poll |",
            "|---|---|---|---|---|---|",
        ]
        rows += [f"| {label} " + _dashboard_side(sides.get(key)) for key, label in labels.items()]
        return (
            f"{self._part_tag(part)}. {part['runs']} real runs under the dashboard's directory ({part['live']} of "
            f"them live), one client polling `/api/runs` as the page does (every {part['poll_ms']} ms after the "
            "previous answer, on one keep-alive connection); the server process's own CPU time "
            "(`/proc/PID/stat`) over the measured window, the three sides one after the other on the same "
            "runs. "
            f"The server's limits (DERIVED, `runner/dashboard/connections.py`): {connections.WORKERS} worker threads "
            f"whatever the number of connections; a connection idle for {_seconds(connections.IDLE_TIMEOUT)}, or "
            f"whose request has not arrived whole within {_seconds(connections.REQUEST_TIMEOUT)}, is closed; at most "
            f"{connections.MAX_CONNECTIONS} connections.\n\n" + "\n".join(rows)
        )

    def bench_traffic(self) -> str:
        part = self._bench_part("traffic")
        if not part:
            return self._bench_absent("The dashboard's traffic")
        if "live_window" not in part:
            return f"{self._part_tag(part)}: not measured ({part.get('error', 'no page')})."
        f, lw, iw = part["first_poll_loaded"], part["live_window"], part["idle_window"]
        kb = lambda x: f"{x / 1000:,.1f} KB"  # noqa: E731
        rows = [
            "| at {:,} runs | figure |".format(part["runs"]),
            "|---|---|",
            f"| the first `/api/runs` of a dashboard just started, beside {f['hogs']} CPU hogs (median of "
            f"{len(f['samples_s'])}) | {_measured(f['seconds'])} ({_measured(f['cpu_s'])} of the server's CPU; "
            f"load {f['loadavg'][0]:.1f}) |",
            f"| that whole answer | {kb(f['answer_bytes'])} ({kb(f['answer_gzip_bytes'])} gzip-compressed, as sent "
            "to a browser) |",
            f"| the page, {part['live']} runs live, over {lw['seconds']:g} s | {kb(lw['bytes_per_s'])}/s, "
            f"{lw['polls_per_s']:g} polls a second, the largest answer {lw['largest_answer_bytes']:,} B |",
            f"| the page, nothing live, over {iw['seconds']:g} s | {kb(iw['bytes_per_s'])}/s, "
            f"{iw['polls_per_s']:g} polls a second ({iw['not_modified']} of {iw['polls']} answered 304) |",
        ]
        return (
            f"{self._part_tag(part)}. {part['runs']:,} real runs under one directory, {part['live']} of them live "
            "beside them (items of 0.3 s each: their rows change at nearly every poll). The first answer: a "
            "server just started, request to last byte, beside CPU hogs (`while True: pass`). The page: Debian's "
            "chromium (Playwright) in a 1280 px window on the dashboard, every byte of its `/api/runs` answers as "
            "Chrome received them (headers included), after a warm-up that holds its first answer; then the live "
            "runs stopped, the same page while nothing is live.\n\n" + "\n".join(rows)
        )

    def bench_runs(self) -> str:
        part = self._bench_part("runs")
        if not part:
            return self._bench_absent("Many runs under one directory")
        ms = _measured

        def cell(x: dict) -> str:
            return f"{ms(x['seconds'])} ({ms(x['cpu_s'])} CPU)"

        def memory(m: dict) -> str:
            return f"{m['rss_first_mb']:g} → {m['rss_last_mb']:g} MB (range {m['rss_max_mb'] - m['rss_min_mb']:.1f} MB)"

        rows = [
            "| runs | runner | `runner list` | `runner stop --all` (nothing live) | first `/api/runs` "
            "| server memory over the polls, as the page polls | the same, without `If-None-Match` |",
            "|---|---|---|---|---|---|---|",
        ]
        names = {"before": f"before (commit `{str(part.get('reference_commit'))[:10]}`)", "now": "now"}
        for r in part["rows"]:
            for side in ("before", "now"):
                s = r["sides"].get(side)
                if s:
                    rows.append(
                        f"| {r['runs']:,} | {names[side]} | {cell(s['list'])} | {cell(s['stop_all'])} "
                        f"| {cell(s['first_poll'])} | {memory(s['memory_page'])} | "
                        f"{memory(s['memory_unconditional'])} |"
                    )
        missing = (
            f" ({part['reference_missing']}: the before side is missing.)" if part.get("reference_missing") else ""
        )
        return (
            f"{self._part_tag(part)}. Real finished runs (three items each) under one directory, each side's made by "
            "its own runner; both sides run as `python -m runner` from their own tree, one after the other. "
            f"`runner list` and `stop --all`: the median of {part['repeats']} (wall time, and the command's own CPU "
            "time, which a loaded machine stretches much less); `stop --all` exits 6 (NO_LIVE_RUN) with nothing live. "
            f"First `/api/runs`: a server just started, request to last byte, the median of {part['repeats']} "
            "servers (and the server's CPU for it). Server memory: its VmRSS after the first poll → after the "
            f"last, and its range over {part['polls']:,} polls back to back on one connection, "
            f"{part['live_while_polled']} runs live beside the finished ones." + missing + "\n\n" + "\n".join(rows)
        )

    def bench_container_init(self) -> str:
        part = self._bench_part("pid1")
        if not part:
            return self._bench_absent("A container's PID 1")
        if part.get("skipped"):
            return f"*A container's PID 1: not measured ({part['skipped']}).*"
        rows = [
            "| PID 1 | beside | n | seen deaf for at least: median, max | deaf for at most: median, p95, max |",
            "|---|---|---|---|---|",
        ]
        names = {
            "runner": "`runner` (no init)",
            "tini": "`tini` (the recipe's)",
            "tini-static": "`tini-static`",
        }
        for r in part["rows"]:
            name = names.get(r["pid1"], f"`{r['pid1']}`")
            if r.get("skipped"):
                rows.append(f"| {name} | not measured: {r['skipped']} | | | |")
                continue
            lo, hi = r["at_least"], r["at_most"]
            beside = "two CPU hogs" if r["cpu_hogs"] else "nothing"
            failed = f" ({len(r['errors'])} samples failed)" if r.get("errors") else ""
            if not hi["n"]:
                rows.append(f"| {name} | {beside} | 0{failed} | - | - |")
                continue
            rows.append(
                f"| {name} | {beside} | {hi['n']}{failed} | {_measured(lo['median_s'])}, {_measured(lo['max_s'])} "
                f"| {_measured(hi['median_s'])}, {_measured(hi['p95_s'])}, {_measured(hi['max_s'])} |"
            )
        return (
            f"{self._part_tag(part)}; `bench/pid1_window.py`. Each sample starts `unshare --pid --fork "
            "--mount-proc PID1` with nothing blocked, as a container runtime does, and reads PID 1's "
            '`/proc/PID/status` as fast as the benchmark can: "seen deaf for at least" spans the samples '
            "that showed it exec'd with SIGTERM neither blocked nor caught (0: none fell in the window); "
            '"deaf for at most" runs from the last moment it had not exec\'d to the first sample showing '
            "SIGTERM held, and grows when the benchmark itself is kept off the CPU.\n\n" + "\n".join(rows)
        )

    # -- issue 20's goals beside their figures (bench/goals.py, in docs/bench.json) ------
    _FAIR = (
        ("runner-engine-sigterm", "SIGTERM to the engine"),
        ("runner-stop", "`runner stop`"),
        ("runner-stop-now", "`runner stop --now`"),
        ("timeout", "`timeout -k`"),
        ("tini-pid1", "tini, PID 1"),
    )

    def _cell_median(self, stopper: str, victim: str) -> float | None:
        cells = (self._bench_part("stoppers") or {}).get("cells", {})
        cell = cells.get(stopper, {}).get(victim)
        if not cell or not cell.get("n") or cell["stopped"] < cell["n"] or cell.get("orphans"):
            return None
        return cell["median_s"]

    @staticmethod
    def _verdict(value: float | None, goal: float, *, at_least: bool = False) -> str:
        if value is None:
            return "not measured"
        return "met" if (value >= goal if at_least else value <= goal) else "**not met**"

    def _fair_table(self) -> str:
        part = self._bench_part("stoppers")
        if not part:
            return self._bench_absent("SIGTERM to the engine")
        present = [(sid, label) for sid, label in self._FAIR if sid in part["cells"]]
        victims = [v for v in part["victims"] if v["kind"] in ("cooperative", "trap-term", "forker")]
        rows = [
            "| victim tree | " + " | ".join(label for _, label in present) + " |",
            "|---" * (len(present) + 1) + "|",
        ]
        for v in victims:
            cells = [self._bench_cell(part["cells"][sid][v["id"]]) for sid, _ in present]
            rows.append(f"| {v['label']} | " + " | ".join(cells) + " |")
        return "\n".join(rows)

    def _goal_rows(self, goals: dict, grace: float) -> list[tuple[str, float | None, str, str]]:
        """(what, measured, goal as text, verdict) for each goal of the stop and the sizes."""
        ms = _measured
        out: list[tuple[str, float | None, str, str]] = []
        for victim, label in (
            ("cooperative", "cooperative"),
            ("bash-trap", "bash trap"),
            ("python-trap-kids", "python trap + 3 kids"),
        ):
            trapping = victim != "cooperative"
            for sid, who, key in (
                ("runner-engine-sigterm", "SIGTERM to the engine", "engine_sigterm"),
                ("runner-stop", "`runner stop`", "runner_stop"),
                ("runner-stop-now", "`runner stop --now`", "runner_stop"),
            ):
                goal = goals.get(f"{key}_trapping_over_grace_s" if trapping else f"{key}_cooperative_s")
                if goal is None:
                    continue
                if victim not in (self._bench_part("stoppers") or {}).get("cells", {}).get(sid, {}):
                    continue  # this run left that cell out
                value = self._cell_median(sid, victim)
                shown = None if value is None else (value - grace if trapping else value)
                text = f"kill grace + {ms(goal)}" if trapping else ms(goal)
                figure = "not measured" if value is None else (f"kill grace + {ms(shown)}" if trapping else ms(value))
                out.append(
                    (f"{who}, {label} (median)", shown, f"within {text}", figure + " · " + self._verdict(shown, goal))
                )
        return out

    def bench_stopper_cost(self) -> str:
        """The stopper's own cost beside a bare Python start-up (bench part `cost`)."""
        part = self._bench_part("cost")
        if not part:
            return self._bench_absent("The stopper's own cost")
        ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
        b, s = part["bare_python"], part["stop_now"]
        load = ", ".join(f"{x:.2f}" for x in part.get("loadavg_at_start", []))
        cpu = f"{part['startups_cpu']:.2f}" if part.get("startups_cpu") is not None else ""
        command = part.get("command", "python -m runner")
        i = part.get("imports_only")
        imports = (
            f"| its start-up and imports alone (nothing run) | {ms(i['wall_median_s'])} | {ms(i['cpu_median_s'])} |\n"
            if i
            else ""
        )
        return (
            f"MEASURED: n={part['n']} each, `{self.bench_name}` ({part.get('date', '?')}, load average "
            f"at the start {load or '?'}).\n\n"
            "| command | wall (median) | CPU (median) |\n|---|---|---|\n"
            f"| `python -c pass` | {ms(b['wall_median_s'])} | {ms(b['cpu_median_s'])} |\n"
            f"{imports}"
            f"| `{command} stop --now`, cooperative run | {ms(s['wall_median_s'])} | {ms(s['cpu_median_s'])} |\n"
            f"| in Python start-ups | {part['startups']:.2f} | {cpu} |"
        ) + self._stopper_cost_split(part)

    @staticmethod
    def _stopper_cost_split(part: dict[str, object]) -> str:
        """The `--now` samples split at the request lodged and the engine gone."""
        sp: dict = part.get("split") or {}  # type: ignore[assignment]
        floor = part.get("floor_startups")
        mini: dict = part.get("minimal_imports") or {}  # type: ignore[assignment]
        if not sp.get("n") or not isinstance(floor, float) or not mini:
            return ""
        ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
        to_request, engine, after = (
            ms(sp[k]) for k in ("to_request_median_s", "engine_stop_median_s", "after_engine_median_s")
        )
        return (
            f"\n\nThe same `--now` samples (n={sp['n']}), split at the request lodged and the engine gone:\n\n"
            "| span | wall (median) |\n|---|---|\n"
            f"| the command's start to its request lodged (start-up, imports, proofs) | {to_request} |\n"
            f"| the request lodged to the engine gone (the engine's own stop) | {engine} |\n"
            f"| the engine gone to the command's exit (its record step, its result) | {after} |\n"
            f"| `python -c '{mini['what']}'`, what reading a run needs imported | {ms(mini['wall_median_s'])} |\n"
            f"| that plus the engine's own stop, in Python start-ups (the floor) | {floor:.2f} |"
        )

    def bench_goals(self) -> str:
        b = self.bench or {}
        goals = b.get("goals")
        if not goals:
            return self._bench_absent("The goals")
        grace = b.get("kill_grace") or 0.0
        rows = ["| what | goal | measured · verdict |", "|---|---|---|"]
        for what, _, goal, shown in self._goal_rows(goals, grace):
            rows.append(f"| {what} | {goal} | {shown} |")
        scale = self._bench_part("scale")
        biggest = max((scale or {}).get("rows", []), key=lambda r: r["processes"], default=None)
        ratio = biggest.get("ratio") if biggest else None
        rows.append(
            f"| {biggest['processes']:,} processes: `runner stop --now` forced phase over raw `killpg` (medians"
            + (f", n={biggest['raw']['n']} a side" if biggest.get("raw") else "")
            + (
                (f", load average {biggest['loadavg_1m']['median']:g}")
                if (biggest.get("loadavg_1m") or {}).get("median") is not None
                else ""
            )
            + ") "
            f"| at most {goals['scale_ratio_to_killpg']:g}× | "
            + (
                f"{ratio:.2f}× · {self._verdict(ratio, goals['scale_ratio_to_killpg'])} |"
                if ratio
                else "not measured |"
            )
            if biggest
            else "| 1,000 processes | - | not measured |"
        )
        items = self._bench_part("items")
        if items:
            by = {r["items"]: r for r in items["rows"]}
            base = (by.get(100) or {}).get("items_per_second")
            for n, r in sorted(by.items()):
                if n == 100:
                    continue
                rate = r.get("items_per_second")
                if base and rate:
                    frac = rate / base
                    want = goals["items_rate_fraction_of_100"]
                    rows.append(
                        f"| {n:,} items: rate over the 100-item rate | at least {want:.0%} "
                        f"| {frac:.0%} ({rate:g} / {base:g} items/s) · {self._verdict(frac, want, at_least=True)} |"
                    )
                if n == 5000:
                    want = goals["items_per_second_at_5000"]
                    rows.append(
                        f"| 5,000 items: items per second | at least {want:g} "
                        f"| {rate if rate else '-'} · {self._verdict(rate, want, at_least=True)} |"
                    )
                if n == 20000:
                    peak = r.get("engine_peak_mb")
                    rows.append(
                        f"| 20,000 items: engine peak memory | under {goals['items_peak_mb_at_20000']:g} MB "
                        f"| {peak if peak else '-'} MB · {self._verdict(peak, goals['items_peak_mb_at_20000'])} |"
                    )
            if 50000 in by and "items_peak_mb_at_50000" in goals:
                peak = by[50000].get("engine_peak_mb")
                want = goals["items_peak_mb_at_50000"]
                rows.append(
                    f"| 50,000 items: engine peak memory | under {want:g} MB "
                    f"| {peak if peak else '-'} MB · {self._verdict(peak, want)} |"
                )
        many = self._bench_part("runs")
        if many and "list_s_at_500_runs" in goals:
            at = next((r for r in many["rows"] if r["runs"] == 500), None)
            now = (at or {}).get("sides", {}).get("now")
            if now:
                for key, what, goal in (
                    ("list", "`runner list`", "list_s_at_500_runs"),
                    ("first_poll", "the dashboard's first `/api/runs`", "first_poll_s_at_500_runs"),
                    ("stop_all", "`runner stop --all` (nothing live)", "stop_all_s_at_500_runs"),
                ):
                    value, cpu = now[key]["seconds"], now[key]["cpu_s"]
                    rows.append(
                        f"| 500 runs: {what} | within {_measured(goals[goal])} "
                        f"| {_measured(value)} ({_measured(cpu)} of CPU) · {self._verdict(value, goals[goal])} |"
                    )
                for key, how in (("memory_page", "as the page polls"), ("memory_unconditional", "without an ETag")):
                    m = now[key]
                    # The farthest the server's memory went from where the first poll left it.
                    off = round(max(m["rss_max_mb"] - m["rss_first_mb"], m["rss_first_mb"] - m["rss_min_mb"]), 1)
                    rows.append(
                        f"| 500 runs: the dashboard server's memory over {m['polls']:,} polls, {how} "
                        f"| within ±{goals['poll_memory_mb']:g} MB of the first poll's | at most {off:g} MB off · "
                        f"{self._verdict(off, goals['poll_memory_mb'])} |"
                    )
        traffic = self._bench_part("traffic")
        if traffic and "live_window" in traffic and "page_bytes_per_s_at_500_runs_3_live" in goals:
            first = traffic["first_poll_loaded"]
            want = goals["first_poll_s_at_500_runs_loaded"]
            rows.append(
                f"| {traffic['runs']:,} runs: the dashboard's first `/api/runs` beside {first['hogs']} CPU hogs "
                f"| within {_measured(want)} | {_measured(first['seconds'])} (load {first['loadavg'][0]:.1f}) · "
                f"{self._verdict(first['seconds'], want)} |"
            )
            rate, want = traffic["live_window"]["bytes_per_s"], goals["page_bytes_per_s_at_500_runs_3_live"]
            rows.append(
                f"| {traffic['runs']:,} runs, {traffic['live']} live: an open page's traffic | at most "
                f"{want / 1000:g} KB/s | {rate / 1000:,.1f} KB/s · {self._verdict(rate, want)} |"
            )
            polls, want = traffic["idle_window"]["polls_per_s"], goals["page_polls_per_s_idle"]
            rows.append(
                f"| {traffic['runs']:,} runs, nothing live: an open page's polls | at most {want:g} a second "
                f"| {polls:g} a second · {self._verdict(polls, want)} |"
            )
        journal = self._bench_part("journal")
        if journal and journal.get("large"):
            fresh, big = journal["fresh"], max(journal["large"], key=lambda s: s["journal_bytes"])
            keys = ("stop", "stop_now", "stop_stopped", "status", "list", "logs")
            extra = max(big[k]["seconds"] - fresh[k]["seconds"] for k in keys)
            peak = max(big[k]["max_rss_mb"] for k in keys)
            size = f"{big['journal_bytes'] / (1 << 20):,.0f} MiB"
            want = goals["journal_extra_s"]
            sign = "+" if extra >= 0 else "−"
            rows.append(
                f"| journal of {size}: slowest command over the fresh run's | within {_measured(want)} "
                f"| {sign}{_measured(abs(extra))} · {self._verdict(extra, want)} |"
            )
            rows.append(
                f"| journal of {size}: highest peak memory of a command | under {goals['journal_peak_mb']:g} MB "
                f"| {peak:g} MB · {self._verdict(peak, goals['journal_peak_mb'])} |"
            )
        plugin = self._bench_part("plugin")
        if plugin:
            cost, noise = plugin["cost_cpu_s"], plugin["noise_cpu_s"]
            met = "met" if cost <= max(goals["plugin_idle_cost_s"], noise) else "**not met**"
            rows.append(
                f"| the plugin installed but unused: CPU per session over `-p no:stoplatency` | within noise or "
                f"{_measured(goals['plugin_idle_cost_s'])} | {'+' if cost >= 0 else '−'}{_measured(abs(cost))} "
                f"(noise ±{_measured(noise)}) · {met} |"
            )
        out = [
            f"{self._bench_tag()}. Each figure from the same run as its reference; the goals are issues 20's and 32's "
            "(`bench/goals.py`, written into the JSON with the run). The machine's load varies during a run: "
            "the medians are what to read.",
            "\n".join(rows),
            "**SIGTERM to the engine**, beside the runner's own stops and the stoppers that are already running "
            "when the stop arrives (`timeout`, tini): the engine gets the SIGTERM a container runtime, systemd or "
            "`kill` sends; the stop is over when the engine has exited and no process of the tree is left.",
            self._fair_table(),
        ]
        if plugin:
            ms = _measured
            on, off = plugin["installed"], plugin["disabled"]
            out.append(
                f"**The plugin, installed but unused.** {self._part_tag(plugin)}. `{plugin['command']}` of one "
                f"passing test, {plugin['rounds']} sessions a side, alternating; CPU is the session's user + system "
                "time (its children's too).\n\n"
                "| session | wall (median) | CPU (median) |\n|---|---|---|\n"
                f"| plugin installed, unused | {ms(on['wall_median_s'])} | {ms(on['cpu_median_s'])} |\n"
                f"| `-p no:stoplatency` | {ms(off['wall_median_s'])} | {ms(off['cpu_median_s'])} |\n"
                f"| difference (median of the pairs) | {ms(plugin['cost_wall_s'])} | {ms(plugin['cost_cpu_s'])} |"
            )
        return "\n\n".join(out)
