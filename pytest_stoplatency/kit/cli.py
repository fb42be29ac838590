"""`python -m pytest_stoplatency conformance`: any stopper against the victim zoo.

Each sample starts one victim tree with the stopper, stops it (timed), and counts what
of the tree is still alive; whatever is left is then killed (by the tree's marker, never
another process), so the command leaves nothing behind, whatever the stopper does. What
a `--start` or `--stop` command starts is held (pytest_stoplatency.hold: the kit's own
cgroup, else a subreaper and a tag) and killed when its sample ends; a guardian (the
plugin's) kills all of it, and removes the kit's scratch directory, if the kit dies by
any signal, SIGKILL included.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_stoplatency import hold as holding
from runner import defaults

from . import gate, load, measure, report, verdict, zoo
from .adapters import BUILTIN
from .command import PLACEHOLDERS_START, PLACEHOLDERS_STOP, START_TIMEOUT, STOP_TIMEOUT_MARGIN, WAIT_MARGIN, Command

KILL_GRACE = defaults.KILL_GRACE
"""The kill grace every stopper gets by default (the runner's own default, runner.defaults)."""
BOUND_MARGIN = 2.0
"""The default bound: the kill grace plus this (the kill, the reap and a busy machine)."""

HELP_START = (
    "start the victim the way the tool under test starts work: a shell command whose {argv} is the "
    "prepared victim's command line, quoted for a shell (default: the kit starts it in a session of its own)"
)
HELP_STOP = (
    "stop it: a shell command; {pid} is the started process (the victim itself where the start command "
    "exited before the victim's handshake, a launcher), {pgid} its process group, {grace} the kill grace in seconds"
)
HELP_STOP_TIMEOUT = (
    f"seconds a --stop command may run before it is killed and its sample failed (default: the kill grace "
    f"+ {STOP_TIMEOUT_MARGIN:g} s); a --start command has {START_TIMEOUT:g} s to bring the victim up"
)
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
    ap.add_argument("--stop-timeout", type=float, metavar="S", help=HELP_STOP_TIMEOUT)
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
    if args.start is not None and not any(p in args.start for p in PLACEHOLDERS_START):
        ap.error("--start: the command must contain {argv} (where the victim's command line goes)")
    if args.stop is not None and not any(p in args.stop for p in PLACEHOLDERS_STOP):
        ap.error("--stop: the command must contain {pid} or {pgid} (what it stops)")
    if args.stop is None and not args.stopper:
        ap.error("nothing to measure: give --stop (and --start) or --stopper NAME")
    if args.repeat < 1:
        ap.error("--repeat: at least 1")
    if not 0 < args.kill_grace <= 60:
        ap.error("--kill-grace: seconds above 0, at most 60")
    if args.bound is None:
        args.bound = args.kill_grace + BOUND_MARGIN
    elif not 0 < args.bound < float("inf"):
        ap.error("--bound: seconds above 0")
    if args.stop_timeout is None:
        args.stop_timeout = args.kill_grace + STOP_TIMEOUT_MARGIN
    elif not 0 < args.stop_timeout <= 3600:
        ap.error("--stop-timeout: seconds above 0, at most 3600")
    for opt in ("json", "markdown", "svg"):
        path = getattr(args, opt)
        if path is not None and (why := report.unwritable(path)):
            ap.error(f"--{opt} {path}: cannot be written: {why}")
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
    # Each kind once, in the order given (a kind named twice is one row).
    victims = [known[k] for k in dict.fromkeys(args.kinds)] if args.kinds else list(zoo.VICTIMS)
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
_STOPPING = False


def _interrupted(signum: int, frame: Any) -> None:
    global _STOPPING
    if os.getpid() != _KIT_PID:
        # A fork of the kit (a user's adapter's pool worker) dies of it as by default: the
        # kit's own unwinding is no behaviour of the stopper under test.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _STOPPING:
        return  # a second Ctrl-C while the kit cleans up: the clean-up is bounded, let it end
    _STOPPING = True
    # A stop of the kit unwinds through every finally: what it started is killed there.
    raise KeyboardInterrupt


def _duration(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def worst_case(args: argparse.Namespace, samples: int) -> float:
    """The longest a --stop command's samples can take: each start waited for, each stop
    killed at --stop-timeout, the started process waited for, the settle, twice."""
    return samples * (START_TIMEOUT + args.stop_timeout + args.kill_grace + WAIT_MARGIN + 2 * measure.SETTLE)


def _fail(message: str, code: int) -> int:
    print(f"conformance: {message}", file=sys.stderr)
    return code


def main(argv: list[str]) -> int:
    global _KIT_PID, _STOPPING
    args, classes, victims = parse(argv)
    _KIT_PID, _STOPPING = os.getpid(), False
    log = lambda m: print(f"conformance: {m}", file=sys.stderr)  # noqa: E731
    work = Path(tempfile.mkdtemp(prefix="stop-conformance-"))
    hold: holding.Hold | None = None
    result = None
    try:
        signal.signal(signal.SIGTERM, _interrupted)
        signal.signal(signal.SIGINT, _interrupted)
        # Before anything starts: if the kit dies, even by SIGKILL, its guardian kills what
        # it started (victims by token, commands by tag and cgroup) and removes `work`.
        holding.guard([work])
        holding.tag_environment("conformance")  # a Python adapter's own processes too
        if args.stop is not None:  # the Python adapters' own processes are theirs to start
            hold = holding.Hold.open()
        try:
            stoppers = [c(work, args.kill_grace) for c in classes]
        except Exception as exc:  # a user's adapter whose constructor raises: its fault, one line
            return _fail(f"--stopper: cannot build the adapter: {type(exc).__name__}: {exc}", verdict.USAGE)
        if hold is not None:
            stoppers.insert(
                0,
                Command(
                    work, args.kill_grace, start=args.start, stop=args.stop, hold=hold, stop_timeout=args.stop_timeout
                ),
            )
            n = len(victims) * args.repeat
            log(
                f"{len(victims)} kind(s) x {args.repeat} sample(s) of the --stop command, held by {hold.how}; "
                f"worst case {_duration(worst_case(args, n))} (a start has {START_TIMEOUT:g} s, "
                f"a stop {args.stop_timeout:g} s: --stop-timeout)"
            )
        result = measure.run(stoppers, victims, args.repeat, work, log=log)
    except KeyboardInterrupt:
        log("interrupted before the first sample")
        return verdict.INTERRUPTED
    finally:
        _STOPPING = True  # a signal now would only cut the clean-up short: it ends anyway
        if hold is not None:
            hold.close()
        zoo.clean_up(work, "conformance")
        holding.release()
    doc = report.document(result, bound=args.bound, kill_grace=args.kill_grace)
    if args.baseline is not None:
        compared = gate.compare(
            args.baseline, doc["labels"], args.rule, here=doc["machine"], allow_new=args.compare_allow_new
        )
        report.gated(doc, compared, args.baseline, args.rule)
    print(report.table(doc))
    for line in report.gate_text(doc):
        print(line)
    try:
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
    except OSError as exc:
        return _fail(f"cannot write {exc.filename}: {exc.strerror or exc}", verdict.USAGE)
    return int(doc["exit_code"])
