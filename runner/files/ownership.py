"""Whose directories the runner acts on (git's `safe.directory` after CVE-2022-24765,
OpenSSH's `StrictModes`).

`runner run` and `runner resume` act on a run directory only if this user owns it and no
one else can write in it, and only if the directory the runner creates it in (`run`)
can be written by no one but this user or root, or carries the sticky bit (/tmp). Anyone
else who can write there could plant a link, a file or a whole run for the runner (and
for root's runner above all) to act on. Refused with one line and `FOREIGN_DIR`, unless
the user says otherwise: `--allow-foreign-dir`, or RUNNER_ALLOW_FOREIGN_DIR=1.

A stop is different: an administrator must be able to stop anyone's run. A stopper that
may not even read the directory gets one line and `NOT_PERMITTED` (`check_access`).
"""

from __future__ import annotations

import os
import stat

from runner.errors import ForeignDir, NotPermitted

ALLOW_ENV = "RUNNER_ALLOW_FOREIGN_DIR"
ALLOW_OPTION = "--allow-foreign-dir"


def allowed_by_env() -> bool:
    return os.environ.get(ALLOW_ENV, "") not in ("", "0")


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _why(st: os.stat_result, *, owner_may_be_root: bool) -> str | None:
    me = os.geteuid()
    if st.st_uid != me and not (owner_may_be_root and st.st_uid == 0):
        return f"owned by {_user(st.st_uid)}, not by you, {_user(me)}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        who = (
            "group and others"
            if st.st_mode & stat.S_IWOTH and st.st_mode & stat.S_IWGRP
            else ("others" if st.st_mode & stat.S_IWOTH else "its group")
        )
        return f"writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}, no sticky bit)"
    return None


def check(run_dir: str | os.PathLike[str], *, creating_in: str | os.PathLike[str] | None = None) -> None:
    """ForeignDir if `run_dir` (or `creating_in`, the directory `run` creates it in) is
    not this user's alone. Either may not exist yet: then nothing to check there."""
    for path, parent in ((creating_in, True), (run_dir, False)):
        if path is None:
            continue
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise NotPermitted(f"{path}: cannot be examined ({exc.strerror or exc})") from None
        _refuse(path, _why(st, owner_may_be_root=parent))


def _refuse(path: str | os.PathLike[str], why: str | None) -> None:
    if why is not None:  # ablate: foreign-dir-refusal
        raise ForeignDir(
            f"{os.path.abspath(path)}: {why}: refused, another user's directory is not trusted"
            f" (pass {ALLOW_OPTION} or set {ALLOW_ENV}=1 if you trust it)"
        )


def check_pinned(run_dir: str | os.PathLike[str], fd: int) -> None:
    """The directory `runner run` just made or found and pinned (`fd`) is this user's
    alone: closes the window between `check` and the mkdir, in which someone who may
    write in the parent (a sticky /tmp) could put a directory of their own there."""
    _refuse(run_dir, _why(os.fstat(fd), owner_may_be_root=False))


def check_access(run_dir: str | os.PathLike[str]) -> None:
    """NotPermitted when this user may not act on `run_dir` (another user's run): it
    cannot reach it, or cannot read its files and write its stop request. Said as it
    is, never as "no run there" or as a stop of nothing."""
    path = os.path.abspath(run_dir)
    try:
        st = os.stat(path)
    except PermissionError:
        blocker = _unreachable_from(path)
        raise NotPermitted(
            f"{path}: you, {_user(os.geteuid())}, may not reach it ({blocker}):"
            " nothing was signalled or written (ask its owner or root)"
        ) from None
    except OSError:
        return  # missing: the caller's "no run there"
    if not stat.S_ISDIR(st.st_mode):
        return
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK) or not _readable_spec(os.path.join(path, "spec.toml")):
        raise NotPermitted(
            f"{path}: owned by {_user(st.st_uid)}; you, {_user(os.geteuid())}, have no permission to act on it:"
            " nothing was signalled or written (ask its owner or root)"
        )


def _readable_spec(spec: str) -> bool:
    """False only for a regular spec.toml this user may not read (someone else's, 0600);
    a damaged one (a link, a FIFO) is for the stop to name, not a question of rights."""
    try:
        st = os.lstat(spec)
    except OSError:
        return True
    return not stat.S_ISREG(st.st_mode) or os.access(spec, os.R_OK)


def _unreachable_from(path: str) -> str:
    """The first directory on the way to `path` this user may not search."""
    head = os.path.dirname(path)
    chain = []
    while head and head != os.path.dirname(head):
        chain.append(head)
        head = os.path.dirname(head)
    for d in reversed(chain):
        if not os.access(d, os.X_OK):
            try:
                return f"{d} is owned by {_user(os.stat(d).st_uid)} and closed to you"
            except OSError:
                return f"{d} is closed to you"
    return "permission denied"
