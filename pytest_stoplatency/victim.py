"""The victim program: a process that the code under test must stop.

    python -m pytest_stoplatency.victim KIND [--sleep S] [--children N] [--cleanup S]

Imports nothing beyond the standard library (no pytest, no psutil): a victim is
started hundreds of times per suite and by other people's code, so it must start
as cheaply as the interpreter allows. The start path avoids the modules that pull
in enum, re and friends (argparse, json, signal's enum wrapper, select): they are
imported only on the rare paths that need them (an unusual argv, a token that needs
escaping, the respawner's loop). It is also runnable as a plain script
(``python -S victim.py``), which the env-scrubber's grandchild relies on: with its
environment dropped it cannot find the package through PYTHONPATH, and as a script
it needs no site-packages (-S skips site, about half of this venv's start).

The token (STOPLATENCY_VICTIM) and the ready file path (STOPLATENCY_READY) come
in through the environment, so a victim started by someone else with its file
descriptors closed still completes the handshake. The ready file is written only
once every process of the victim has installed its signal disposition.

No victim ever calls setsid on itself (whoever starts it decides its session) and
none uses PR_SET_PDEATHSIG: a victim must die because a stop reached it, never
because the process that started it died.
"""

import os
import sys
import time

try:
    import _signal as signal  # type: ignore[import-not-found]  # the C module behind `signal`, which imports enum (~4 ms without site)
except ImportError:  # an interpreter without it: the public module has the same functions
    import signal

TOKEN_ENV = "STOPLATENCY_VICTIM"
READY_ENV = "STOPLATENCY_READY"
# <id>.ready and <id>.extras, side by side in the owner's record directory (_records.py).
READY_SUFFIX, EXTRAS_SUFFIX = ".ready", ".extras"

KINDS = (
    "cooperative",
    "trap-term",
    "ignore-term",
    "slow-exit",
    "forker",
    "escapee",
    "double-fork",
    "pipe-holder",
    "respawner",
    "stopped",
    "env-scrubber",
    "zombie-leader",
    "setsid-spawner",
)

SPAWN_EVERY = 0.05
"""The setsid-spawner starts one more env-less, setsid process this often (seconds)..."""
SPAWN_CAP = 400
"""...until this many: a victim nothing stops must not fill the machine."""


def start_ticks(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat: with the pid, the process's identity."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return int(data[data.rfind(b")") + 2 :].split()[19])


def _swallow(signum, frame):  # a handler, not SIG_IGN: children exec'd later get SIG_DFL back
    pass


def _trap():
    signal.signal(signal.SIGTERM, _swallow)


def _sleep_until(deadline: float) -> None:
    # A loop, because a swallowed signal may end time.sleep early on some paths.
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(left)


def _spawn(body, *, setsid: bool = False) -> int:
    """Fork a child that runs ``body(ready)``; return its pid once it called ready().

    The pipe is private to the handshake and closed on both sides right after it.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            if setsid:
                os.setsid()

            def ready():
                os.write(w, b"r")
                os.close(w)

            body(ready)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    try:
        if os.read(r, 1) != b"r":
            raise RuntimeError(f"victim child {pid} died before it was ready")
    finally:
        os.close(r)
    return pid


def _json(value) -> str:
    """JSON for the ready file's few types, without importing json (it pulls in re)."""
    if value is None:
        return "null"
    if type(value) is int:
        return str(value)
    if type(value) is str:
        if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
            return f'"{value}"'
        import json  # a token or path that needs escaping: rare, so the slow path is fine

        return json.dumps(value)
    if type(value) is list:
        return "[" + ", ".join(map(_json, value)) + "]"
    if type(value) is dict:
        return "{" + ", ".join(f"{_json(k)}: {_json(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no JSON for {type(value).__name__}")


def _write_ready(info: dict) -> None:
    path = os.environ.get(READY_ENV)
    if not path:
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(_json(info))
    os.replace(tmp, path)  # atomic: the reader never sees half a file


def _record_extra() -> None:
    """Append this process (pid + start ticks) to the victim's extras file.

    Called by a process that is about to drop its environment (the token), while it
    still has it: a kill at any moment after finds it by token or by this record.
    One O_APPEND write: concurrent writers never interleave within a line.
    """
    path = os.environ.get(READY_ENV)
    if not path:
        return
    if path.endswith(READY_SUFFIX):
        path = path[: -len(READY_SUFFIX)]
    pid = os.getpid()
    fd = os.open(path + EXTRAS_SUFFIX, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{pid} {start_ticks(pid)}\n".encode())
    finally:
        os.close(fd)


def _trapping_sleeper(deadline):
    def body(ready):
        _trap()
        ready()
        _sleep_until(deadline)

    return body


def _plain_sleeper(deadline):
    def body(ready):
        ready()
        _sleep_until(deadline)

    return body


def _respawn_loop(deadline, children: list[int]) -> None:
    """Replace each child as soon as it dies, until the deadline."""
    import select  # after the handshake: not on the start path

    while (left := deadline - time.monotonic()) > 0:
        fds: dict[int, int] = {}
        dead: list[int] = []
        for pid in children:
            try:
                fds[os.pidfd_open(pid)] = pid
            except (ProcessLookupError, FileNotFoundError):
                # ENOENT: newer kernels (pidfs) for a pid no living process holds.
                dead.append(pid)
        if not dead:
            readable, _, _ = select.select(list(fds), [], [], left)
            dead = [fds[fd] for fd in readable]
        for fd in fds:
            os.close(fd)
        for pid in dead:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            children.remove(pid)
            children.append(_spawn(_trapping_sleeper(deadline)))


def _leave_leader(deadline: float) -> None:
    """The zombie-leader: a second thread sleeps on, the main (leader) thread exits with
    pthread_exit. /proc/PID/stat then says Z while the process lives; the ready file is
    written by the second thread once the leader is seen gone. SIGTERM is caught and
    never handled (only the main thread runs Python's handlers): only SIGKILL ends it."""
    import _thread
    import ctypes  # only this kind needs it

    pid = os.getpid()
    token = os.environ.get(TOKEN_ENV)

    def sleeper() -> None:
        while True:  # until the leader has exited: the shape is in place
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
            if data[data.rfind(b")") + 2 :].split()[0] == b"Z":
                break
            time.sleep(0.001)
        info = {"pid": pid, "start_ticks": start_ticks(pid), "kind": "zombie-leader", "lang": "python"}
        info.update({"token": token, "children": [], "extras": []})
        _write_ready(info)
        _sleep_until(deadline)

    _thread.start_new_thread(sleeper, ())
    ctypes.CDLL(None).pthread_exit(None)


def _spawn_scrubbed(deadline: float, ready: bool = False) -> int:
    """Fork a process that records itself (extras), calls setsid and execs this program
    with an empty environment (as `env -i setsid ...`); it traps SIGTERM and sleeps.
    `ready`: wait for its handshake."""
    r, w = os.pipe() if ready else (-1, -1)
    pid = os.fork()
    if pid == 0:
        try:
            if ready:
                os.close(r)
                os.set_inheritable(w, True)
            _record_extra()  # before the token goes: never unrecorded
            os.setsid()
            left = str(max(deadline - time.monotonic(), 0.0))
            argv = [sys.executable, "-S", os.path.abspath(__file__), "--role", "scrubbed", "--sleep", left]
            os.execve(sys.executable, argv + ["--ready-fd", str(w)] if ready else argv, {})
        finally:
            os._exit(1)
    if ready:
        os.close(w)
        try:
            if os.read(r, 1) != b"r":
                raise RuntimeError("setsid-spawner's first process died before it was ready")
        finally:
            os.close(r)
    return pid


def _spawn_loop(deadline: float, children: list[int]) -> None:
    """The setsid-spawner's life after its handshake: one more env-less setsid process
    every SPAWN_EVERY seconds (each reaped when it dies), up to SPAWN_CAP."""
    n = len(children)
    while deadline - time.monotonic() > 0:
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if n < SPAWN_CAP:
            _spawn_scrubbed(deadline)
            n += 1
        time.sleep(SPAWN_EVERY)


def run(kind: str, sleep: float, n_children: int, cleanup: float) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    deadline = time.monotonic() + sleep
    children: list[int] = []
    extras: list[dict] = []
    main_loop = None

    if kind == "cooperative":
        pass
    elif kind in ("trap-term", "stopped"):
        _trap()
    elif kind == "ignore-term":
        # SIG_IGN survives fork and exec: the children never set it themselves.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        children = [_spawn(_plain_sleeper(deadline)) for _ in range(n_children)]
    elif kind == "slow-exit":

        def _slow(signum, frame):
            time.sleep(cleanup)
            os._exit(0)

        signal.signal(signal.SIGTERM, _slow)
    elif kind == "forker":
        _trap()
        children = [_spawn(_trapping_sleeper(deadline)) for _ in range(n_children)]
    elif kind == "escapee":
        _trap()
        children = [_spawn(_trapping_sleeper(deadline), setsid=True)]
    elif kind == "double-fork":
        _trap()

        def intermediate(ready):
            _spawn(_trapping_sleeper(deadline))  # the daemon, ready before we exit
            ready()
            # exits right away: the daemon is re-parented away from the victim

        mid = _spawn(intermediate)
        os.waitpid(mid, 0)
    elif kind == "pipe-holder":
        # The victim itself dies on SIGTERM; its child keeps stdout open after it.
        children = [_spawn(_trapping_sleeper(deadline))]
    elif kind == "respawner":
        _trap()
        children = [_spawn(_trapping_sleeper(deadline)) for _ in range(max(n_children, 1))]
        main_loop = lambda: _respawn_loop(deadline, children)  # noqa: E731
    elif kind == "env-scrubber":
        _trap()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                _record_extra()  # before the token goes (execve below): never unrecorded
                os.setsid()  # leaves the victim's group and session
                os.set_inheritable(w, True)
                # An empty environment, as env -i, sudo or ssh leave: no token any more.
                os.execve(
                    sys.executable,
                    [
                        sys.executable,
                        "-S",
                        os.path.abspath(__file__),
                        "--role",
                        "scrubbed",
                        "--ready-fd",
                        str(w),
                        "--sleep",
                        str(max(deadline - time.monotonic(), 0.0)),
                    ],
                    {},
                )
            finally:
                os._exit(1)
        os.close(w)
        try:
            if os.read(r, 1) != b"r":
                raise RuntimeError("env-scrubber grandchild died before it was ready")
        finally:
            os.close(r)
        children = [pid]
        extras.append({"role": "scrubbed", "pid": pid, "start_ticks": start_ticks(pid)})
    elif kind == "zombie-leader":
        _trap()
        _leave_leader(deadline)  # writes the ready file itself, once the leader has exited
    elif kind == "setsid-spawner":
        _trap()
        children = [_spawn_scrubbed(deadline, ready=True)]
        main_loop = lambda: _spawn_loop(deadline, children)  # noqa: E731
    else:
        raise SystemExit(f"unknown victim kind {kind!r}; one of {', '.join(KINDS)}")

    _write_ready(
        {
            "pid": os.getpid(),
            "start_ticks": start_ticks(os.getpid()),
            "kind": kind,
            "lang": "python",
            "token": os.environ.get(TOKEN_ENV),
            "children": children,
            "extras": extras,
        }
    )
    if kind == "stopped":
        os.kill(os.getpid(), signal.SIGSTOP)  # SIGTERM now stays pending; SIGKILL still works
    if main_loop:
        main_loop()
    else:
        _sleep_until(deadline)


def _run_scrubbed(ready_fd: int | None, sleep: float) -> None:
    """The env-scrubber's grandchild (a setsid-spawner's process) after its exec with an
    empty environment; it says it is ready on `ready_fd`, if it has one."""
    signal.signal(signal.SIGTERM, _swallow)
    if ready_fd is not None:
        os.write(ready_fd, b"r")
        os.close(ready_fd)
    _sleep_until(time.monotonic() + sleep)


_OPTIONS = {"--sleep": float, "--children": int, "--cleanup": float, "--role": str, "--ready-fd": int}


def _parse_plain(argv: list[str]) -> dict | None:
    """The usual argv, parsed without argparse (which costs more than the rest of the start).

    Anything unusual (an unknown or abbreviated option, a bad value, --help) returns
    None, and argparse then parses it, with its own messages and exit code.
    """
    a: dict[str, object] = {
        "kind": None,
        "--sleep": 7200.0,
        "--children": 2,
        "--cleanup": 1.0,
        "--role": None,
        "--ready-fd": None,
    }
    args = iter(argv)
    for arg in args:
        if arg.startswith("-"):
            name, eq, value = arg.partition("=")
            if name not in _OPTIONS:
                return None
            if not eq:
                following = next(args, None)
                if following is None:
                    return None
                value = following
            try:
                a[name] = _OPTIONS[name](value)
            except ValueError:
                return None
        elif a["kind"] is None and arg in KINDS:
            a["kind"] = arg
        else:
            return None
    if a["--role"] == "scrubbed":
        return a
    return a if a["--role"] is None and a["kind"] is not None else None


def _parse_argparse(argv) -> dict:
    import argparse

    p = argparse.ArgumentParser(prog="python -m pytest_stoplatency.victim")
    p.add_argument("kind", nargs="?", choices=KINDS)
    p.add_argument("--sleep", type=float, default=7200.0)
    p.add_argument("--children", type=int, default=2)
    p.add_argument("--cleanup", type=float, default=1.0)
    p.add_argument("--role", choices=("scrubbed",), help=argparse.SUPPRESS)
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.role is None and a.kind is None:
        p.error("KIND is required")
    return {
        "kind": a.kind,
        "--sleep": a.sleep,
        "--children": a.children,
        "--cleanup": a.cleanup,
        "--role": a.role,
        "--ready-fd": a.ready_fd,
    }


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = _parse_plain(argv) or _parse_argparse(argv)
    if a["--role"] == "scrubbed":
        _run_scrubbed(a["--ready-fd"], a["--sleep"])
    else:
        run(a["kind"], a["--sleep"], a["--children"], a["--cleanup"])


if __name__ == "__main__":
    main()
