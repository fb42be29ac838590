"""`python -m runner`, and the `runner` command (pyproject's entry point is `entry`)."""

import os
import sys


def entry() -> int:
    try:
        from runner.cli import main

        code = main()
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM/SIGHUP, which a command that starts no run turns into one)
        # before main's own handler is in place: while the command's modules load, or
        # between its signal set-up and that handler. Nothing was done yet. Still one line
        # and a documented code: Python's own answer is a traceback and exit 1.
        import signal

        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        from runner.exitcodes import INTERRUPTED_LINE, Exit

        print(INTERRUPTED_LINE, file=sys.stderr)
        code = int(Exit.INTERRUPTED)
    if sys.argv[1:2] == ["stop"]:
        # A stop is done once its code is decided: everything it wrote is closed (and what
        # must be durable, fsynced) and no thread of it runs on. Its lines flushed, it exits
        # without the interpreter's teardown of every module it loaded (about 14 M
        # instructions by valgrind, more than a third of a bare start-up, between its last
        # line and its exit: issue 26.7), as the engine skips it (cli._dispatch). Here, not
        # in cli.main, which tests call in-process.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass  # a reader that went away: the code still tells
        os._exit(code)  # ablate: stop-skips-teardown
    return code


if __name__ == "__main__":
    sys.exit(entry())
