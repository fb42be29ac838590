"""docs/stop-latency.md's limits and stop-modes sections: the spec's limits, each stop mode's
worst case, exit codes and measured rows, the directory-gone cases. A part of
render_stop_latency.Context."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from stop_latency_text import (
    HERE,
    RenderError,
    _defaults,
    _exitcodes,
    _human,
    _measured,
    _seconds,
)


class StopModesSection:
    def limits(self) -> str:
        """The spec's limits, each with the keys it applies to: docs/spec.md's list, from
        runner/files/spec.py's SCHEMA (docgen/render_spec.py)."""
        here = str(Path(__file__).resolve().parent)  # docgen/, beside this renderer
        if here not in sys.path:
            sys.path.append(here)
        import render_spec

        return render_spec.Context().spec_limits()

    # -- the ways to stop a run ------------------------------------------------------
    _LOCK_WAITS = ("REQUEST_LOCK_WAIT", "LOCK_WAIT")
    """The worst-case terms that are waits for a lock another stopper (or the engine) holds."""

    def _worst(self, way) -> str:
        """A way's worst case: its StopKind's terms (runner/events.py), each a constant of
        runner/defaults.py at the default spec (DERIVED), lock waits named as such."""
        d = _defaults()
        terms = way.kind.worst_case(d.STOP_GRACE, d.KILL_GRACE, by=way.by)
        for name, value in terms:
            if abs(float(getattr(d, name)) - value) > 1e-9:
                raise RenderError(f"{way.label}: the worst-case term {name} is not runner/defaults.py's {name}")
        total = sum(value for _, value in terms)
        parts = " + ".join(f"`{n}` {_seconds(v)}" + (" (lock wait)" if n in self._LOCK_WAITS else "") for n, v in terms)
        shown = f"**{_seconds(total)}**" + (f" ({_human(total)})" if total >= 120 else "") + f" = {parts}"
        if way.kind.name == "hard" and way.by == "stopper":
            # The code's own sum (what `runner bound` prints), checked against the terms.
            from runner.files.spec import StopSpec

            spec = StopSpec(grace=d.STOP_GRACE, kill_grace=d.KILL_GRACE, containment=d.CONTAINMENT, channel="auto")
            if abs(spec.hard_worst_case - total) > 1e-9:
                raise RenderError("StopSpec.hard_worst_case is not the sum of StopKind.HARD's terms")
            shown += " (`StopSpec.hard_worst_case`, `runner bound`)"
        if way.kind.mode.label == "graceful":
            shown += " (one hook, one verify command)"
        if way.by == "engine" and way.kind.name == "hard":
            shown += "; a wedged engine is not forced by anyone"
        return shown

    def _by_command(self) -> dict[str, set[str]]:
        """docs/exit-codes.md's "By command" table (tests/runner/test_exit_codes_doc.py
        holds it to runner/exitcodes.py)."""
        out: dict[str, set[str]] = {}
        for line in (HERE / "exit-codes.md").read_text(encoding="utf-8").splitlines():
            m = re.match(r"\| `runner ([^`]+)` \| ([A-Z_, ]+) \|$", line)
            if m:
                out[m.group(1)] = {c.strip() for c in m.group(2).split(",")}
        return out

    def _codes(self, command: str, names: tuple[str, ...]) -> str:
        Exit = _exitcodes()
        documented = self._by_command().get(command)
        if documented is None:
            raise RenderError(f"docs/exit-codes.md has no row for `runner {command}`")
        for name in names:
            if name not in documented:
                raise RenderError(f"`runner {command}` does not return {name} in docs/exit-codes.md")
        return ", ".join(f"`{n}` {int(Exit[n])}" for n in names) + f" (`runner {command}`)"

    def _short_measured(self, label: str) -> str:
        stats = (self.measure or {}).get("labels", {}).get(label)
        if not stats:
            return "not measured"
        tests = ", ".join(f"`{n}`" for n in self._nodeids(label)) or "test not recorded"
        return f'median {_measured(stats["median"])} (n={stats["n"]}; "{label}", test {tests})'

    def _bench_mode(self, mode: str) -> str:
        part = self._bench_part("load")
        m = next((m for m in (part or {}).get("modes", []) if m.get("mode") == mode), None)
        if not m or m.get("median_s") is None:
            return "not measured"
        if m.get("commands") == 1:
            figure = f"{_measured(m['max_s'])} for {m['runs']} runs (n=1: one command)"
        else:
            figure = f"median {_measured(m['median_s'])} per run (n={m['n']} runs, one command each)"
        return f"`{mode}`: {figure}; bench `python -m bench.stoppers`, part `load`, `{self.bench_name}`"

    _WAYS = {
        # events.WAYS label: (what it signals, measured: labels or "bench:MODE", exit codes, resumable)
        "runner stop": (
            "lodges a hard request, SIGTERMs the engine (file channel: no signal before `grace`); the engine "
            "kills every child group (SIGTERM, `kill_grace`, SIGKILL); after `grace` the stopper forces",
            ("runner stop (signal) / trap-term provider", "runner stop (file) / long verify"),
            ("stop", ("OK", "STOP_FORCED", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED", "INTERRUPTED")),
            "yes",
        ),
        "runner stop --now": (
            "lodges a hard request, then the stopper itself: SIGTERM to every proven process group of the run, "
            "the engine's included, and to the engine's children and their lineage (read before it), "
            "`kill_grace`, SIGKILL, then the confirmation",
            ("runner stop --now / trap-term",),
            ("stop --now", ("OK", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED", "INTERRUPTED")),
            "yes",
        ),
        "runner stop --graceful": (
            "lodges a graceful request and returns; no signal: the engine stops at the end of the phase in flight",
            (),
            ("stop --graceful", ("OK", "INTERRUPTED")),
            "yes",
        ),
        "runner stop --graceful --wait": (
            "as `--graceful`, then waits for the run to end",
            (),
            ("stop --graceful --wait", ("STOPPED", "OK", "FAILED", "INTERRUPTED")),
            "yes",
        ),
        "runner stop --all": (
            "each live run as its own `runner stop` would, all at once from one process "
            "(up to {MAX_STOPPERS} at a time)",
            ("bench:stop --all",),
            ("stop --all", ("OK", "STOP_FORCED", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED", "NO_LIVE_RUN")),
            "yes",
        ),
        "runner stop --all --now": (
            "each live run as its own `runner stop --now` would, all at once from one process",
            ("bench:stop --all --now",),
            ("stop --all", ("OK", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED", "NO_LIVE_RUN")),
            "yes",
        ),
        "runner stop --all --graceful": (
            "each live run as its own `runner stop --graceful` would",
            (),
            ("stop --all", ("OK", "NO_LIVE_RUN")),
            "yes",
        ),
        'dashboard "Stop"': (
            "`runner stop`'s own pipeline (`stop.stop(rd, StopKind.HARD)`, origin `dashboard`)",
            ("dashboard Stop / click to run-stop",),
            ("stop", ("OK", "STOP_FORCED", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED")),
            "yes",
        ),
        'dashboard "Stop now"': (
            "`runner stop --now`'s own pipeline (`StopKind.NOW`, origin `dashboard`)",
            ("dashboard Stop now / click to run-stop",),
            ("stop --now", ("OK", "UNKILLABLE", "LEFT_RUNNING", "NOT_RECORDED")),
            "yes",
        ),
        'dashboard "Stop gracefully"': (
            "`runner stop --graceful`'s own pipeline (`StopKind.GRACEFUL`, origin `dashboard`)",
            (),
            ("stop --graceful", ("OK",)),
            "yes",
        ),
        "Ctrl-C once (foreground)": (
            "the pipeline's hard stop from the foreground `runner run`/`resume`: a hard request, SIGINT "
            "forwarded to the engine; after `grace` the command forces",
            (),
            ("run", ("STOPPED",)),
            "yes",
        ),
        "Ctrl-C twice (foreground)": (
            "as `runner stop --now`, from the foreground command",
            (),
            ("run", ("STOPPED",)),
            "yes",
        ),
        "SIGTERM or SIGHUP to a foreground `runner run`": (
            "as Ctrl-C once (PID 1 of a container included): forwarded to the engine, forced after `grace`",
            (),
            ("run", ("STOPPED",)),
            "yes",
        ),
        "SIGTERM to the engine": (
            "the engine's own handler, as for `runner stop`'s signal; nobody forces it after `grace`",
            (),
            ("wait", ("STOPPED",)),
            "yes",
        ),
        "the STOP file": (
            "`touch RUNDIR/STOP`: nothing is signalled; the engine reads the file at the top of each item and "
            "between phases (also while paused and in a backoff) and stops gracefully",
            ("STOP file / while paused", "STOP file / during backoff"),
            ("run", ("STOPPED",)),
            "yes",
        ),
    }

    def _row_label(self, label: str) -> str:
        return f"`{label}`" if label.startswith("runner ") else label

    def stop_modes(self) -> str:
        """Every way to stop a run (runner/events.py's WAYS, each with its StopKind): its
        worst case from the kind's terms, lock waits included, and `touch RUNDIR/PAUSE`
        beside them (not a stop)."""
        from runner.events import WAYS

        rows = [
            "| way | kind | what it signals | worst case (DERIVED, default spec) | measured | exit codes | resumable |",
            "|---|---|---|---|---|---|---|",
        ]
        missing = [w.label for w in WAYS if w.label not in self._WAYS]
        if missing:
            raise RenderError(f"no row text for the ways {missing} (runner/events.py WAYS)")
        for way in WAYS:
            what, measured, codes, resumable = self._WAYS[way.label]
            cells = [
                self._bench_mode(m[len("bench:") :]) if m.startswith("bench:") else self._short_measured(m)
                for m in measured
            ]
            shown = "<br>".join(cells) or "not measured"
            if "{MAX_STOPPERS}" in what:
                n = _defaults().MAX_STOPPERS
                what = what.replace("{MAX_STOPPERS}", f"{n} (DERIVED: `runner/defaults.py: MAX_STOPPERS`)")
            kind = f"`{way.kind.name}`" + (" (by the engine)" if way.by == "engine" else "")
            rows.append(
                f"| {self._row_label(way.label)} | {kind} | {what} | {self._worst(way)} | {shown} "
                f"| {self._codes(*codes)} | {resumable} |"
            )
        rows.append(
            "| `touch RUNDIR/PAUSE` | not a stop | nothing: the engine holds at its next landing point (as a graceful "
            "stop's) until the file is removed | none (the run goes on) | not measured | none (the run goes on) "
            "| the run is not stopped: remove the file and it goes on |"
        )
        return "\n".join(rows)

    _GONE = (
        # command (docs/exit-codes.md row), before, during, after: (what it does, codes)
        (
            "stop",
            (
                "its engine, found by its pinned directory, deleted or half removed (no `spec.toml` left: an "
                "`rm -rf` that failed), by `vanished.py`, is stopped as `--now` stops it, by its tag and cgroup; "
                "one line says the directory is gone and nothing could be recorded; no such engine: no run there",
                ("OK", "LEFT_RUNNING", "UNKILLABLE", "NO_LIVE_RUN"),
            ),
            (
                "the kill is finished (the engine stops a run whose directory is removed; the stopper kills what "
                "is left by the run's tag and cgroup); one line says the directory is gone and nothing could be "
                "recorded; never `INTERNAL`",
                ("OK", "LEFT_RUNNING", "UNKILLABLE"),
            ),
            ("nothing more: the stop was recorded in the directory before it went", ("OK", "STOP_FORCED")),
        ),
        (
            "stop --now",
            ("as `runner stop`", ("OK", "LEFT_RUNNING", "UNKILLABLE", "NO_LIVE_RUN")),
            ("as `runner stop`", ("OK", "LEFT_RUNNING", "UNKILLABLE")),
            ("as `runner stop`", ("OK",)),
        ),
        (
            "stop --graceful",
            ("no run there: nothing to lodge a request in", ("NO_LIVE_RUN",)),
            ("no run there, if the request could not be lodged any more", ("NO_LIVE_RUN",)),
            ("the engine stops the run hard (origin `vanished`): nothing of it could be recorded", ("OK",)),
        ),
        (
            "stop --graceful --wait",
            (
                "its engine, found as `runner stop` finds it, is stopped as `--now` stops it (the hard stop the "
                "engine makes of a vanished run, finished); one line; no such engine: no run there",
                ("STOPPED", "LEFT_RUNNING", "UNKILLABLE", "NO_LIVE_RUN"),
            ),
            (
                "the engine stops the run hard (origin `vanished`); the waiter finishes the kill by the run's tag "
                "and cgroup and says, on one line, that the directory is gone and nothing could be recorded",
                ("STOPPED", "LEFT_RUNNING", "UNKILLABLE"),
            ),
            ("nothing more: the run's end was read before the directory went", ("STOPPED",)),
        ),
        (
            "stop --all",
            ("each engine whose directory is gone is found and stopped, one line each", ("OK", "LEFT_RUNNING")),
            ("as `runner stop`, for that run", ("OK", "LEFT_RUNNING", "UNKILLABLE")),
            ("nothing more", ("OK",)),
        ),
        (
            "wait",
            ("no run there", ("NO_LIVE_RUN",)),
            ("as `runner stop --graceful --wait`", ("STOPPED", "LEFT_RUNNING", "UNKILLABLE")),
            ("nothing more", ("STOPPED", "OK", "FAILED")),
        ),
    )

    def directory_gone(self) -> str:
        """What each command does when the run directory goes away before, during or
        after it: codes checked against docs/exit-codes.md's rows."""
        rows = [
            "| command | directory gone before it starts | gone while it runs | gone after it returned |",
            "|---|---|---|---|",
        ]
        for command, *cases in self._GONE:
            cells = [f"{what}: {self._codes(command, codes)}" for what, codes in cases]
            rows.append(f"| `runner {command}` | " + " | ".join(cells) + " |")
        return "\n".join(rows)
