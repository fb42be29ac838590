"""For every test directory."""

import signal

# A background job of a non-interactive shell (a CI script's `cmd &`, `setsid ... &`)
# starts with SIGINT ignored, and so would every command a test starts: an ignored
# signal stays ignored across exec, so the runner commands the tests interrupt with
# Ctrl-C's SIGINT would never hear it (a held stopper then finished, exit 0, on such a
# run). The tests give their commands a terminal's disposition, whatever pytest's own.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
