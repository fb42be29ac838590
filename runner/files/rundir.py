"""The run directory: its layout, the engine lock, and finding runs.

The engine holds an exclusive flock on `lock` for its whole life. The kernel drops the
lock when the engine dies, however it dies, so "is a live engine here?" is answered by
probing the lock, never by trusting a pid that may have been reused.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from runner import defaults, ident
from runner.errors import BadInput, CopyOfRun, Damaged, NoLiveRun, RunLocked
from runner.files import dirfd, links, untrusted
from runner.files.atomic import atomic_write_text, temp_file, write_synced

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Self


class EngineLock:
    """The engine's exclusive lock on its run directory; held until release() or exit.
    `broken`: the links `lock` had when the engine broke them to write its pid (links.py;
    the engine journals it), else 0."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self.fd = path, fd
        self.broken = 0

    def release(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)  # closing the only descriptor drops the flock

    @classmethod
    def holding(cls, path: Path, fd: int) -> EngineLock:
        """The lock now held on `fd`, with this process's pid written into the file for a
        human reading the directory (liveness is the flock, never this pid). A `lock` a
        backup shares (`cp -al`) is first replaced by a copy of its own, locked before
        its rename: the backup's inode is never written, and the lock is never free."""
        broken = links.shared(fd)
        if broken:
            new = links.break_link(path, fd, lock=True)
            os.close(fd)  # the old inode's flock goes once every copy of it is closed
            fd = new
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        lock = cls(path, fd)
        lock.broken = broken
        return lock

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_FILES = {
    "spec": dirfd.SPEC_NAME,
    "state": "state.json",
    "journal": "journal.jsonl",
    "engine_identity": "engine.json",
    "lock": "lock",
    "children": "children",
    "cgroup_file": "cgroup",
    "output": "output",
    "stop_request": "stop-request.json",
    "stop_request_lock": "stop-request.lock",
    "stop_file": "STOP",
    "pause_file": "PAUSE",
    "archive": "archive",
    "engine_log": "engine.log",
    "run_id_file": "run-id",
    "dir_identity_file": "dir-identity",
}
"""Attribute -> the file's name in the run directory."""


class RunDir:
    # Each file's path is made on first use (__getattr__), not in __init__: `runner list`
    # and the dashboard make a RunDir per run and read three or four of its files, and
    # sixteen pathlib joins per run were a fifth of a 500-run list.
    spec: Path
    state: Path
    journal: Path
    engine_identity: Path
    lock: Path
    children: Path
    cgroup_file: Path
    output: Path
    stop_request: Path
    stop_request_lock: Path
    stop_file: Path
    pause_file: Path
    archive: Path
    engine_log: Path
    run_id_file: Path
    dir_identity_file: Path

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.abspath(path))

    def __getattr__(self, name: str) -> Path:
        file = _FILES.get(name)
        if file is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self.path / file
        setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def run_id(self) -> str:
        """The run's id: unique on this machine, so that RUNNER_RUN_ID tags and cgroup
        names of two runs never collide, even when both run directories are called
        `run` (a --run-dir is the caller's choice; the id is not). Damaged if the file
        is not a small regular file holding an id of the documented shape."""
        try:
            text = untrusted.read_text(self.run_id_file)
        except FileNotFoundError:
            return self.path.name
        return checked_run_id(text, self.run_id_file)

    def measured_identity(self) -> str | None:
        """The identity of the directory this command opened, "<st_dev>-<st_ino>" (None
        if it is gone): measured, never read from a file. `mv` within a file system
        keeps it; a copy, a restored backup or a planted directory has its own."""
        fd = dirfd.pinned(self.path)  # a process that pinned it measures what it holds (a moved run)
        try:
            st = os.stat(self.path) if fd is None else os.fstat(fd)
        except OSError:
            return None
        return f"{st.st_dev}-{st.st_ino}"

    def recorded_identity(self) -> str | None:
        """The identity the run's directory had when the run was created (`dir-identity`),
        None when the file is missing. Damaged if it is not of the shape written."""
        record = self._identity_record()
        return None if record is None else record[0]

    def recorded_boot(self) -> str | None:
        """The boot the identity was recorded in (None: not said, as in a record written
        by hand with `stat -c %d-%i`)."""
        record = self._identity_record()
        return None if record is None else record[1]

    def _identity_record(self) -> tuple[str, str | None] | None:
        try:
            text = untrusted.read_text(self.dir_identity_file)
        except FileNotFoundError:
            return None
        return identity_record(text, self.dir_identity_file)

    def recorded_elsewhere(self) -> bool:
        """The identity was recorded in another boot, or on another machine: a volume
        mounted again (a new pod's, another node's) may give the directory another
        device number, and no process of that boot can still be alive, so a mismatch
        there makes no copy of a live run. Such a directory is the run's own; `resume`
        records its identity anew (readopt_identity)."""
        boot = self.recorded_boot()
        return boot is not None and boot != ident.boot_id()

    def readopt_identity(self) -> bool:
        """Record the measured identity where the recorded one is of another boot (the
        caller holds the engine lock); True if it was rewritten."""
        here = self.measured_identity()
        if here is None or not self.recorded_elsewhere() or self.recorded_identity() == here:
            return False
        atomic_write_text(self.dir_identity_file, f"{here} {ident.boot_id()}\n")
        return True

    def key(self, run_id: str | None) -> str | None:
        """The run's membership key: its RUNNER_RUN_ID tag value and cgroup name,
        "<run id>.<measured identity>". It ends with the identity of the directory
        opened, so a copy, or a planted directory naming another run's id, derives a
        key that no process and no cgroup of any other run carries, whatever its files
        say. (The id is in it too: a removed directory's inode can be reused.)"""
        return key_of(run_id, self.measured_identity())

    def exists(self) -> bool:
        """The directory holds a run (its frozen spec is there, whatever shape it is in:
        a damaged run is still a run, and still stoppable)."""
        return os.path.lexists(self.spec)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        spec_path: str | os.PathLike[str],
        data: bytes | None = None,
        *,
        refuse_foreign: bool = False,
    ) -> RunDir:
        """Make the run directory and freeze a copy of the spec into it.

        Refuses (BadInput) a directory that already holds a run. The frozen spec is
        published with os.link, which fails if the name exists: of two `runner run`
        racing for one directory exactly one wins, and the copy is never seen half-written.
        """
        rd = cls(path)
        if os.path.islink(rd.path):
            raise BadInput(f"{rd.path}: {SYMLINK_REFUSED}; a run directory is a directory of its own")
        try:
            # `data`: the bytes the caller validated; re-reading could freeze another spec.
            data = Path(spec_path).read_bytes() if data is None else data
        except OSError as e:
            raise BadInput(f"{spec_path}: cannot read the spec ({e.strerror or e})") from None
        try:
            _make_dirs(rd.path)
        except OSError as e:
            raise BadInput(f"{rd.path}: cannot create the run directory ({e.strerror or e})") from None
        if rd.exists():
            raise BadInput(f"{rd.path}: already holds a run (use `runner resume` or another --run-dir)")
        rd.pin()
        dfd = dirfd.pinned(rd.path)
        assert dfd is not None
        if refuse_foreign:  # before anything is written in it (ownership.py)
            from runner.files import ownership

            ownership.check_pinned(rd.path, dfd)
        fd, tmp = temp_file(str(rd.path), ".spec.", dir_fd=dfd)
        try:
            write_synced(dfd, fd, data)
            try:
                os.link(tmp, rd.spec.name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                raise BadInput(f"{rd.path}: already holds a run (use `runner resume` or another --run-dir)") from None
        finally:
            os.unlink(tmp, dir_fd=dfd)
        for sub in (rd.children, rd.output, rd.archive):
            dirfd.mkdir(sub)
        run_id = rd.path.name if re.fullmatch(_RUN_ID, rd.path.name) else new_run_id()
        # The directory's identity, measured on the directory the spec was just linked
        # into (the pinned descriptor), written before the id: a run id is never found
        # without it.
        st = os.fstat(dfd)
        atomic_write_text(rd.dir_identity_file, f"{st.st_dev}-{st.st_ino} {ident.boot_id()}\n")
        # Written only once the spec link is won, so a losing create never overwrites the
        # winner's id; atomic, so a later command never reads half an id.
        atomic_write_text(rd.run_id_file, run_id + "\n")
        os.fsync(dfd)
        return rd

    def pin(self) -> None:
        """From now on every file of this run directory is opened relative to one
        descriptor of it, never through its path again (dirfd.py): no link below it
        followed, and a move of the directory changes nothing for this process."""
        dirfd.pin(self.path)

    def acquire_lock(self, *, record: bool = True) -> EngineLock:
        """Take the engine lock (LOCK_EX|LOCK_NB); RunLocked if a live engine holds it.

        The descriptor is non-inheritable (O_CLOEXEC; Popen closes fds anyway), so a child
        that outlives the engine cannot keep the run looking alive. `record`: write this
        process's pid into it (the engine); `runner run` and `resume` only lock, so that
        a refusal after the lock writes nothing, and hand it to the engine, which does.
        A `lock` a backup shares is locked where it is (a lock writes nothing); once
        held, the name must still name it, else another engine broke the link first and
        the name is locked again.
        """
        # is_live() probes with a shared lock for an instant: a `runner status` at the
        # moment an engine starts must not make that engine exit REFUSED.
        deadline = time.monotonic() + defaults.LOCK_PROBE_RETRY
        while True:
            fd = untrusted.open_regular(self.lock, flags=os.O_RDWR | os.O_CREAT, shared=True)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                if time.monotonic() > deadline:
                    raise RunLocked(f"{self.path}: a live engine holds this run directory") from None
                time.sleep(0.005)
                continue
            if not links.moved_on(self.lock, fd):
                break
            os.close(fd)
            if time.monotonic() > deadline:  # replaced again and again: someone else's doing
                raise RunLocked(f"{self.lock}: replaced while it was being locked; try again")
        return EngineLock.holding(self.lock, fd) if record else EngineLock(self.lock, fd)

    def adopt_lock(self, fd: int) -> EngineLock:
        """The engine lock handed down by `runner run` or `resume` (an inherited, locked
        descriptor): checked to be this run's `lock` file and locked, then kept
        non-inheritable so no child of the engine can keep the run looking alive."""
        try:
            held, here = os.fstat(fd), os.stat(self.lock, follow_symlinks=False)
        except OSError as e:
            raise RunLocked(f"{self.lock}: the handed-down lock descriptor {fd} is unusable ({e})") from None
        if (held.st_dev, held.st_ino) != (here.st_dev, here.st_ino):
            raise RunLocked(f"{self.lock}: descriptor {fd} is not this run's lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # already ours: a no-op that proves it
        except OSError:
            raise RunLocked(f"{self.path}: a live engine holds this run directory") from None
        os.set_inheritable(fd, False)
        return EngineLock.holding(self.lock, fd)

    def is_live(self) -> bool:
        """A live engine holds the lock. Probed on a separate descriptor with LOCK_SH|LOCK_NB,
        so the probe never blocks and never creates a lock file. Damaged if `lock` is
        not a regular file (a FIFO there would otherwise block the probe forever)."""
        try:
            fd = untrusted.open_regular(self.lock)
        except FileNotFoundError:
            return False
        return held(fd)


def held(fd: int) -> bool:
    """Whether a live engine holds the lock `fd` is open on (RunDir.is_live's probe);
    closes `fd`, which also drops the shared lock if the probe got it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)
    return False


def checked_run_id(text: str, source: str | os.PathLike[str]) -> str:
    """The run id `run-id` holds (`text`, its content), if it has the documented shape."""
    text = text.strip()
    if not RUN_ID_SHAPE.fullmatch(text):
        raise Damaged(source, "not a run id (letters, digits, '.', '_', '-'; at most 128)")
    return text


def identity_record(text: str, source: str | os.PathLike[str]) -> tuple[str, str | None]:
    """(identity, boot or None) from the content of `dir-identity`, if of the shape written."""
    match = _DIR_IDENTITY_SHAPE.fullmatch(text.strip())
    if match is None:
        raise Damaged(source, "not a directory identity (<device>-<inode> [<boot id>])")
    return match.group(1), match.group(2)


def key_of(run_id: str | None, here: str | None) -> str | None:
    """The membership key of a run of id `run_id` in the directory whose measured
    identity is `here` (RunDir.key)."""
    if not run_id or here is None:
        return None
    return f"{run_id}.{here}"  # ablate: dir-identity-key


def _make_dirs(path: Path) -> None:
    """mkdir -p, each directory made here 0700 whatever the umask: the runner's own
    directories are written by no one else (ownership.py refuses one that others can
    write in)."""
    if path.is_dir():
        return
    if path.parent != path:
        _make_dirs(path.parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    os.chmod(path, 0o700)


_RUN_ID = r"\d{8}-\d{6}-[0-9a-f]{6}"  # compiled on first use (re's cache): only `run` needs it
RUN_ID_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""What a run id read back from `run-id` may look like: it names a cgroup directory and
is matched in environments, so no '/', no '=', no control character."""


_DIR_IDENTITY_SHAPE = re.compile(r"(\d{1,20}-\d{1,20})(?: ([0-9a-f-]{36}))?")


def _copied(rd: RunDir) -> str | None:
    """The recorded identity when `rd` is a copy (readable, and not the measured one).
    `dir-identity` is read once (a 500-run `list` reads it for every run)."""
    try:
        record = rd._identity_record()
    except Damaged:
        return None
    return copied(record, rd.measured_identity())


def copied(record: tuple[str, str | None] | None, here: str | None) -> str | None:
    """The recorded identity (`record`: identity_record's) when it makes the directory
    measured as `here` a copy, else None."""
    if record is None or here is None:
        return None
    recorded, boot = record
    if boot is not None and recorded != here and boot != ident.boot_id():
        return None  # recorded in another boot: the run's own directory (recorded_elsewhere)
    return None if recorded == here else recorded  # ablate: dir-identity-check


def copy_origin(rd: RunDir) -> str | None:
    """None when `rd` is not a copy; else the run's own directory, or "" when it is not
    found beside the copy or under the default base."""
    return origin_of_copy(rd, _copied(rd))


def origin_of_copy(rd: RunDir, recorded: str | None) -> str | None:
    """copy_origin, given what `copied` said of `rd`."""
    if recorded is None:
        return None
    original = _original_of(rd, recorded)
    return "" if original is None else str(original)


def copy_line(rd: RunDir) -> str | None:
    """One line when `rd` is a copy of a run (its recorded identity is readable and is
    not the measured one), else None. A missing or damaged record is not a copy: the
    readers name it as damage, and the membership key is the measured one anyway."""
    original = copy_origin(rd)
    if original is None:
        return None
    try:
        run_id = rd.run_id
    except Damaged:
        run_id = "?"
    where = f", live in {original}" if original else ""
    return (
        f"{rd.path}: a copy of run {run_id}{where} (its directory is not the one the run was "
        f"created in); a copy is read-only: nothing was signalled or written"
    )


def _original_of(rd: RunDir, recorded: str) -> Path | None:
    """The run's own directory, when it is among the runs beside the copy or under the
    default base: the one whose measured identity is the copy's recorded one, holding
    the same run id."""
    seen: set[Path] = {rd.path}
    for base in (rd.path.parent, default_base()):
        for other in list_runs(base):
            if other.path in seen:
                continue
            seen.add(other.path)
            if other.measured_identity() == recorded and _same_id(rd, other):
                return other.path
    return None


def _same_id(a: RunDir, b: RunDir) -> bool:
    try:
        return a.run_id == b.run_id
    except Damaged:
        return False


def refuse_copy(rd: RunDir) -> None:
    """CopyOfRun when `rd` is a copy: asked by every command that would act on a run
    (stop, resume, wait) before it reads further or writes anything."""
    line = copy_line(rd)
    if line is not None:
        raise CopyOfRun(line)


SYMLINK_REFUSED = "a symlink (never followed)"
"""Why a run-id-shaped name that is a symlink, or a --run-dir naming one, is not a run."""


def new_run_id() -> str:
    """UTC timestamp (sorts by start time to the second) plus 24 random bits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(3).hex()


def default_base() -> Path:
    return Path(".runner/runs")


class RunEntry:
    """One entry under a base directory named like a run: `rd` when it is a run, else
    `error`, one line saying why it is not acted on (a plain class: see values.py)."""

    __slots__ = ("name", "rd", "error")

    def __init__(self, name: str, rd: RunDir | None, error: str | None = None) -> None:
        self.name, self.rd, self.error = name, rd, error


def run_entries(base: str | os.PathLike[str], rundirs: dict[str, RunDir] | None = None) -> list[RunEntry]:
    """The one rule for which directories under `base` are runs, for every command that
    lists them (`list`, `stop --all`, a plain `stop`/`resume`, the dashboard): a name of
    a run id's shape (no '/', no leading '.'), a real directory (a symlink is refused,
    never followed: a run is its directory, principle 10), holding a frozen spec. Sorted
    by name (run ids sort by start time). A symlink named like a run, or an entry that
    cannot be looked at, is an entry with its `error`; anything else is not listed. A
    directory reached by two names (a bind mount) is listed once, by the first.
    `rundirs`: a caller that lists again and again (the dashboard) keeps its RunDirs,
    made once per name (pathlib's cost was half a poll's CPU with sixty runs)."""
    try:
        with os.scandir(base) as it:
            found = sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[RunEntry] = []
    seen: set[tuple[int, int]] = set()
    for entry in found:
        if not RUN_ID_SHAPE.fullmatch(entry.name):
            continue
        try:
            if entry.is_symlink():  # ablate: list-refuses-links
                out.append(RunEntry(entry.name, None, SYMLINK_REFUSED))
            elif entry.is_dir(follow_symlinks=False) and os.path.lexists(os.path.join(entry.path, "spec.toml")):
                # One directory, one run: a bind mount (or any other mount) that shows a
                # run's directory under a second name is that same directory (the same
                # device and inode): listed once, by its first name.
                st = entry.stat(follow_symlinks=False)
                if (st.st_dev, st.st_ino) in seen:  # ablate: list-once-per-directory
                    continue
                seen.add((st.st_dev, st.st_ino))
                rd = rundirs.get(entry.name) if rundirs is not None else None
                if rd is None:
                    rd = RunDir(entry.path)
                    if rundirs is not None:
                        rundirs[entry.name] = rd
                out.append(RunEntry(entry.name, rd))
        except OSError as exc:  # gone or unreadable between the listing and the look
            out.append(RunEntry(entry.name, None, f"cannot look at it ({exc.strerror or exc})"))
    return out


def list_runs(base: str | os.PathLike[str]) -> list[RunDir]:
    """Every run under `base` (run_entries' rule), oldest id first."""
    return [e.rd for e in run_entries(base) if e.rd is not None]


def _live_run(rd: RunDir) -> bool:
    """A live engine holds the lock, and the directory is not a copy (a `cp -al` copy
    shares the run's very lock file)."""
    return rd.is_live() and copy_line(rd) is None


def resolve(
    run_dir: str | os.PathLike[str] | None,
    base: str | os.PathLike[str] | None = None,
    *,
    want: Callable[[RunDir], bool] | None = None,
    what: str = "live",
) -> RunDir:
    """The run a command acts on.

    Given `run_dir`: it must hold a run (NoLiveRun otherwise). Not given: exactly one run
    under `base` (default_base()) must satisfy `want` (default: RunDir.is_live); with none
    or several, NoLiveRun with one line naming the candidates. `what` names the kind of
    run in that message (a caller passing its own `want`, e.g. resume, says "resumable").
    """
    if run_dir is not None:
        rd = RunDir(run_dir)
        if os.path.islink(rd.path):  # ablate: run-dir-refuses-links
            # The rule `list` and `stop --all` follow (run_entries): a run is its
            # directory, never a link to one (`--run-dir A`, A -> B, used to stop B).
            raise NoLiveRun(f"{rd.path}: {SYMLINK_REFUSED}; name the run's own directory")
        if not rd.exists():
            raise NoLiveRun(f"{rd.path}: no run there (no spec.toml)")
        rd.pin()
        return rd
    base = Path(base) if base is not None else default_base()
    want = want or _live_run
    runs = list_runs(base)
    matches = [r for r in runs if want(r)]
    if len(matches) == 1:
        matches[0].pin()
        return matches[0]
    if not matches:
        msg = f"no {what} run under {base}"
        if runs:
            recent = ", ".join(r.run_id for r in runs[-3:])
            msg += f" (most recent runs: {recent}); pass --run-dir"
        raise NoLiveRun(msg)
    names = ", ".join(str(r.path) for r in matches)
    raise NoLiveRun(f"{len(matches)} {what} runs, pass --run-dir with one of: {names}")
