"""`python -m pytest_stoplatency conformance`: any stopper against the victim zoo.

Each sample starts one victim tree with the stopper, stops it (timed), and counts what
of the tree is still alive; whatever is left is then killed (by the tree's marker, never
another process), so the command leaves nothing behind, whatever the stopper does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from runner import defaults

from . import gate, load, measure, report, verdict, zoo
from .adapters import BUILTIN
from .command import Command

KILL_GRACE = defaults.KILL_GRACE
"""The kill grace every stopper gets by default (the runner's own default, runner.defaults)."""
BOUND_MARGIN = 2.0
"""The default bound: the kill grace plus this (the kill, the reap and a busy machine)."""

HELP_START = (
    "start the victim the way the tool under test starts work: a shell command whose {argv} is the "
    "prepared victim's command line, quoted for a shell (default: the kit starts it in a session of its own)"
)
HELP_STOP = "stop it: a shell command; {pid} is the started process, {pgid} its process group"
HELP_STOPPER = (
    "a built-in adapter by name or a Python adapter as module:Class (the Stopper protocol, "
    "pytest_stoplatency.kit.Stopper); may be given more than once"
)
HELP_REPEAT = (
    f"samples per victim kind (default 1; the gate's default rule, {gate.DEFAULT_RULE}, was measured "
    f"with {gate.DEFAULT_REPEAT})"
)
HELP_KILL_GRACE = f"seconds each stopper waits between its TERM and its KILL (default {KILL_GRACE:g})"
HELP_BOUND = f"the latency each kind must stop within (default: the kill grace + {BOUND_MARGIN:g} s)"
HELP_KINDS = "victim kinds, comma-separated (default: every kind of the zoo)"
HELP_JSON = "write every sample, each kind's verdict and the exit code here"
HELP_MARKDOWN = "write the table as markdown here"
HELP_SVG = (
    "write the kinds x stoppers grid and the latency distribution per stopper and kind as an SVG here "
    "(matplotlib, the plots extra; without it, the grid alone, in plain SVG)"
)
HELP_COMPARE = (
    "compare each STOPPER / KIND label with a baseline: a previous --json of this command or a "
    "pytest --stop-latency-json file"
)
HELP_COMPARE_FAIL = (
    "with --compare: fail (exit 5) when a label's STAT (min, median, p95, max) is slower than the "
    "baseline's by more than THRESH, relative (median:25%) or absolute (median:5ms, max:+50ms) "
    f"(without it the comparison is shown, and only failed samples and --compare's refusals fail; the measured "
    f"default rule: {gate.DEFAULT_RULE})"
)
HELP_COMPARE_ALLOW_NEW = "with --compare: pass when no label is in the baseline (without it: exit 6)"


def _ids(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def parser() -> argparse.ArgumentParser:
    kinds = ", ".join(v.id for v in zoo.VICTIMS)
    ap = argparse.ArgumentParser(
        prog="python -m pytest_stoplatency conformance",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: " + "; ".join(f"{c} {m}" for c, m in {**verdict.EXIT_CODES, **gate.EXIT_CODES}.items()),
    )
    ap.add_argument("--start", metavar="CMD", help=HELP_START)
    ap.add_argument("--stop", metavar="CMD", help=HELP_STOP)
    ap.add_argument(
        "--stopper",
        metavar="NAME",
        action="append",
        default=[],
        help=f"{HELP_STOPPER} (built-in: {', '.join(BUILTIN)})",
    )
    ap.add_argument("--repeat", type=int, default=1, metavar="N", help=HELP_REPEAT.replace("%", "%%"))
    ap.add_argument("--kill-grace", type=float, default=KILL_GRACE, metavar="S", help=HELP_KILL_GRACE)
    ap.add_argument("--bound", type=float, metavar="S", help=HELP_BOUND)
    ap.add_argument("--kinds", type=_ids, metavar="K,K", help=f"{HELP_KINDS}: {kinds}")
    ap.add_argument("--compare", type=Path, metavar="PATH", help=HELP_COMPARE)
    ap.add_argument("--compare-fail", metavar="STAT:THRESH", help=HELP_COMPARE_FAIL.replace("%", "%%"))
    ap.add_argument("--compare-allow-new", action="store_true", help=HELP_COMPARE_ALLOW_NEW)
    ap.add_argument("--json", type=Path, metavar="PATH", help=HELP_JSON)
    ap.add_argument("--markdown", type=Path, metavar="PATH", help=HELP_MARKDOWN)
    ap.add_argument("--svg", type=Path, metavar="PATH", help=HELP_SVG)
    return ap


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[type], list[zoo.VictimSpec]]:
    ap = parser()
    args = ap.parse_args(argv)
    if args.start is not None and args.stop is None:
        ap.error("--start needs --stop (how the tool stops what it started)")
    if args.stop is None and not args.stopper:
        ap.error("nothing to measure: give --stop (and --start) or --stopper NAME")
    if args.repeat < 1:
        ap.error("--repeat: at least 1")
    if not 0 < args.kill_grace <= 60:
        ap.error("--kill-grace: seconds above 0, at most 60")
    if args.bound is None:
        args.bound = args.kill_grace + BOUND_MARGIN
    elif not args.bound > 0:
        ap.error("--bound: seconds above 0")
    known = {v.id: v for v in zoo.VICTIMS}
    bad = [k for k in args.kinds or [] if k not in known]
    if bad:
        ap.error(f"--kinds: unknown {', '.join(bad)}; one of {', '.join(known)}")
    if args.kinds == []:
        ap.error("--kinds: name at least one kind")
    classes = []
    for name in args.stopper:
        try:
            classes.append(load.stopper_class(name))
        except load.UnknownStopper as exc:
            ap.error(str(exc))
    victims = [known[k] for k in args.kinds] if args.kinds else list(zoo.VICTIMS)
    args.rule, args.baseline = None, None
    try:
        if args.compare_fail is not None:
            args.rule = gate.parse_rule(args.compare_fail, "--compare-fail")
            if args.compare is None:
                ap.error("--compare-fail needs --compare PATH")
        if args.compare is not None:
            args.baseline = gate.load(args.compare, "--compare")
    except gate.GateError as exc:
        ap.error(str(exc))
    if args.compare_allow_new and args.compare is None:
        ap.error("--compare-allow-new needs --compare PATH")
    return args, classes, victims


_KIT_PID = os.getpid()


def _interrupted(signum: int, frame: Any) -> None:
    if os.getpid() != _KIT_PID:
        # A fork of the kit (a user's adapter's pool worker) dies of it as by default: the
        # kit's own unwinding is no behaviour of the stopper under test.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    # A stop of the kit unwinds through every finally: what it started is killed there.
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    global _KIT_PID
    args, classes, victims = parse(argv)
    _KIT_PID = os.getpid()
    signal.signal(signal.SIGTERM, _interrupted)
    work = Path(tempfile.mkdtemp(prefix="stop-conformance-"))
    try:
        stoppers = [c(work, args.kill_grace) for c in classes]
        if args.stop is not None:
            stoppers.insert(0, Command(work, args.kill_grace, start=args.start, stop=args.stop))
        result = measure.run(
            stoppers, victims, args.repeat, work, log=lambda m: print(f"conformance: {m}", file=sys.stderr)
        )
    finally:
        zoo.clean_up(work, "conformance")
    doc = report.document(result, bound=args.bound, kill_grace=args.kill_grace)
    if args.baseline is not None:
        compared = gate.compare(
            args.baseline, doc["labels"], args.rule, here=doc["machine"], allow_new=args.compare_allow_new
        )
        report.gated(doc, compared, args.baseline, args.rule)
    print(report.table(doc))
    for line in report.gate_text(doc):
        print(line)
    if args.json:
        report.write(args.json, report.json_text(doc))
    if args.markdown:
        report.write(args.markdown, report.markdown(doc))
    if args.svg:
        from .. import pictures  # only when asked for

        if pictures.available():
            report.write(args.svg, pictures.kit_svg(doc))
        else:
            from . import picture

            report.write(args.svg, picture.grid(doc))
            print(f"conformance: --svg: the grid alone; the latency distribution too: {pictures.MISSING}")
    return int(doc["exit_code"])
