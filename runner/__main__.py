import signal
import sys

# `python -m runner` (the engine, and the tests' runner): the stop signals of a command
# that starts a run are blocked before even runner.cli is imported (cli.early_signals
# says why; it blocks them again, for the console script).
if sys.argv[1:2] in (["run"], ["resume"], ["_engine"]) and "--detach" not in sys.argv:
    signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))

from runner.cli import main  # noqa: E402  (after the mask: see above)

sys.exit(main())
