"""`python -m runner`, and the `runner` command (pyproject's entry point is `entry`)."""

import sys


def entry() -> int:
    try:
        from runner.cli import main

        return main()
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM/SIGHUP, which a command that starts no run turns into one)
        # before main's own handler is in place: while the command's modules load, or
        # between its signal set-up and that handler. Nothing was done yet. Still one line
        # and a documented code: Python's own answer is a traceback and exit 1.
        import signal

        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        from runner.exitcodes import INTERRUPTED_LINE, Exit

        print(INTERRUPTED_LINE, file=sys.stderr)
        return int(Exit.INTERRUPTED)


if __name__ == "__main__":
    sys.exit(entry())
