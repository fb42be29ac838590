"""Every default of the runner, in one place.

The spec loader reads its defaults from here, and docs/stop-latency.md derives its
DERIVED figures from these names (it imports this module; nothing is copied by hand).
Units are seconds unless the name says otherwise.
"""

# [provider]
CALL_TIMEOUT = 7200.0
"""Longest single provider call; 0 disables. Bounds the graceful stop's worst case."""
IDLE_TIMEOUT = 120.0
"""Longest silence of a provider call; any output chunk resets it; 0 disables."""

# [stop]
STOP_GRACE = 10.0
"""How long `runner stop` waits for the engine's own teardown before force-killing."""
KILL_GRACE = 1.0
"""SIGTERM to SIGKILL when the runner kills a process group."""
CONTAINMENT = "auto"
""""auto", "group" or "cgroup"."""
STOP_CHANNEL = "auto"
""""signal", "file" or "auto": how `runner stop` reaches the engine. "auto" is the
signal channel (request file lodged, then SIGTERM) on every machine the runner runs on."""
STOP_CHANNELS = ("signal", "file", "auto")
"""The values `[stop] channel` may take."""

# [[hooks.post_session]], [[hooks.post_run]], [[verify]]
HOOK_TIMEOUT = 120.0
"""Each post_session / post_run hook."""
VERIFY_TIMEOUT = 1800.0
"""Each verify command."""

# [repair], [retry]
REPAIR_MAX_ATTEMPTS = 2
"""Repair sessions per item after a fixable verify failure."""
RETRY_BACKOFF = 5.0
"""Wait before each repair attempt; the STOP file is read every tick of it."""

# [output]
OUTPUT_CAP_BYTES = 8 * 1024 * 1024
"""Captured output kept per command; the rest is counted, not stored."""

# Engine internals (not spec keys).
RESERVE_BYTES = 1024 * 1024
"""The engine's reserve: a file of at least this size (and of twice the run's state file
plus 64 KiB, for a large queue), preallocated in the run directory, that the engine gives
up when a write fails for want of space, so that it can still record how the run ended
on a full disk (runner/files/reserve.py)."""
BACKOFF_TICK = 0.1
"""A backoff re-reads the STOP file every tick."""
PAUSE_POLL = 0.25
"""While paused, the STOP and PAUSE files are re-read this often."""
WATCHDOG_POLL = 0.1
"""The control-file watchdog reads stop-request.json at least this often."""
CONFIRM_TIMEOUT = 1.0
"""After SIGKILL, how long a reaper waits to confirm the kill before naming a process
unkillable (uninterruptible sleep)."""
KILL_ROUNDS_BOUND = 5.0
"""Without a cgroup, SIGKILL rounds repeat (one pass over /proc each) until one finds no
process of the run it had not seen, for at most this long; a SIGKILLed process that is
not in uninterruptible sleep but has not died yet is waited for this long again. What
is still alive then is named: UNKILLABLE if in state D, else LEFT_RUNNING."""
SNAPSHOT_EVERY = 0.5
"""A running child's descendants are snapshotted this often, so an escapee that left the
group is still known when the call ends."""

# Waits of the commands and the engine (not spec keys).
ENGINE_START_TIMEOUT = 30.0
"""How long `runner run` and `runner resume` wait for a new engine to write its identity."""
IDENTITY_WAIT = 5.0
"""How long a stopper waits for a starting engine to write its identity: the engine
takes its lock first and writes engine.json last, once a SIGTERM is a clean stop."""
LOCK_WAIT = 1.0
"""How long a stopper waits for the run's lock to record a stop, held by another stopper
recording the same stop (milliseconds: a state save and one journal line). A stopper
frozen while it holds it costs the next one this much, never more (a term of every
forcing stop's worst case, events.StopKind): the stop is then left to that stopper, or
completed by the next `runner stop` once it is gone."""
REQUEST_LOCK_WAIT = 0.5
"""How long a stopper (or the engine consuming) waits for stop-request.lock, held by
another stopper for a read and an atomic write of the request (milliseconds). Past it
the stopper goes on without lodging (the signal still reaches the engine) and the
engine takes no request this time: a frozen holder never holds a stop up (a term of
every stop's worst case, events.StopKind)."""
LOCK_PROBE_RETRY = 0.1
"""How long acquire_lock retries a lock that is held: long enough to outlast a
liveness probe, far too short to wait out an engine."""
WATCHDOG_JOIN = 2.0
"""How long the engine waits for its watchdog thread at exit (it wakes at once)."""
WAIT_SLICE = 3600.0
"""`runner wait` with no timeout waits in slices of this long (an endless wait is a loop
of bounded ones, so no single call can overflow a timeout)."""
ENGINE_START_POLL = 0.005
"""How often `runner run` looks for the new engine's identity file while it starts."""
FOREGROUND_POLL = 0.05
"""How often a foreground `runner run` forwards the terminal's signals to the engine."""

CONTAINER_GRACE_MARGIN = 2.0
"""What a container's grace period (`runner bound --container`: Kubernetes'
terminationGracePeriodSeconds, `docker stop -t`) adds to the hard stop's worst case: the
stopper's interpreter start and the engine's last writes, as the forced-stop test's
margin allows them."""

# Limits on what a spec may ask for (runner/files/spec.py enforces them; the generated
# document prints them). A value past a limit is refused with one line naming its key.
MAX_DURATION = 30 * 24 * 3600.0
"""Longest duration any spec key may hold (a timeout, a grace, a backoff): 30 days."""
MAX_ITEMS = 100_000
"""Most items one run may queue."""
MAX_COUNT = 1000
"""Largest count a spec may hold (`[repair] max_attempts`)."""
MAX_OUTPUT_CAP_BYTES = 1024 * 1024 * 1024
"""Largest `[output] cap_bytes`: 1 GiB kept per command."""
SPEC_MAX_BYTES = 1024 * 1024
"""Largest spec file read (the spec path, and the copy frozen into a run directory)."""
SPEC_MAX_DEPTH = 32
"""Deepest nesting of arrays and inline tables a spec may use."""
MAX_ARG_BYTES = 128 * 1024 - 1
"""Longest single argument of a command after substitution (Linux's MAX_ARG_STRLEN is
32 pages, 128 KiB, with its NUL); longer ones fail exec with E2BIG."""
STOP_JOURNAL_TAIL_BYTES = 1024 * 1024
"""Most bytes of the journal's end a stopper reads for the attempt's `run-stop` (it is the
engine's last record, so it is in the last ones whatever the journal's size)."""
STATUS_JOURNAL_TAIL_BYTES = 1024 * 1024
"""Most bytes of the journal's end `runner status` folds: a fresh run's cost, whatever the
journal's size; a longer journal loses the phase times and failures of what is before."""
FILE_POLL = 0.01
"""How often a command re-tries a lock held by another command (a stopper recording, a
stopper forcing)."""

MAX_STOPPERS = 64
"""`stop --all` stops this many runs at a time, each in its own thread."""

# `runner logs --follow` and the foreground progress
LOGS_FOLLOW_POLL = 0.1
"""How often `--follow` looks for new output and new files."""
PROGRESS_REDRAW = 0.2
"""The live line is redrawn at most this often."""
PROGRESS_RELIST = 1.0
"""The captured output directory is listed again at most this often (for the running
command's file), and at once when a phase starts."""
PROGRESS_JOURNAL_CHUNK = 256 * 1024
"""Most journal bytes read per tick: a resumed run's long past is read over several
ticks, each short, so the foreground is back to its signals at once."""

# `runner dashboard`
DASHBOARD_POLL = 0.25
"""The page asks the server for every run's state this often while a run is live (the
issue's bound: 0.5 s)."""
DASHBOARD_IDLE_POLL = 1.0
"""And this often while no run is live (issue 42: at most once a second)."""
DASHBOARD_MIN_AGE = 0.1
"""Polls closer together than this (several pages open) share one snapshot."""
DASHBOARD_GONE_SHOWN = 300.0
"""How long a run removed while shown stays on the page as an error row."""
DASHBOARD_JOURNAL_TAIL_BYTES = 16 * 1024
"""Most bytes of each run's journal end the page reads for its last records."""
DASHBOARD_JOURNAL_TAIL_RECORDS = 8
"""How many of a run's last journal records the page shows."""
DASHBOARD_FIELD_CHARS = 80
"""A field shown on the page is cut to this many characters."""
DASHBOARD_LINE_CHARS = 240
"""A journal line shown on the page is cut to this many characters."""
DASHBOARD_ITEM_CHARS = 10_000
"""An item's name is sent whole up to this (the page clips it, its tooltip shows it)."""
DASHBOARD_LIVE_MAX_AGE = 1.0
"""A live run whose files have not changed is read again after this long anyway (its
children come and go; their pid files are in a directory the fingerprint watches)."""
