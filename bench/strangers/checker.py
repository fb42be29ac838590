"""The independent checker of `make leaks-strangers`: a process of its own, beside a stranger's
pytest session, that scans /proc for the processes that outlive the test (or wider fixture)
that started them. It shares no code with the plugin (standard library only), and its own
marks: the probe (probe.py, loaded into every pytest process of the session) puts its own
scope tag in the environment (LEAKCHECK_SCOPE), tells the checker when a scope starts and
ends, and waits at each end until the checker has looked.

Whose a process is: its own LEAKCHECK_SCOPE, else its nearest ancestor's; else, when it
descends from a pytest process that runs tests, the scope that process was running when the
process started (by start ticks). A process that descends from one already counted belongs to
it. At the end of a test's teardown (before the plugin's check: the probe waits for it), the
checker takes a snapshot of the living processes of the test and of the fixtures torn down
with it, and watches each through a pidfd (a thread records when each exits); a process of
the snapshot still alive GRACE seconds after the snapshot is done (when the plugin's check
begins), counted once. At the test's
end (after its report), what is alive of those scopes and not in a snapshot gets GRACE seconds
to exit (one pidfd wait) and is counted the same way. At the session's end,
what a gap (between tests, after the last) or a scope already ended started, the same. After
pytest has exited, what is left of the run (any of its tags, or under an ended scope) outlived
the session. pytest's own helpers are not the suite's: the plugin's session guardian,
multiprocessing's resource tracker and fork server.

Told to stop (the rule the plugin documents for --process-leaks-stop-grace): a process
exiting (PF_EXITING), with SIGTERM, SIGINT or SIGHUP pending, or sent one (to it or its process
group) by a pytest process of the session since it started (the probe tells each os.kill and
os.killpg), or whose parent or an ancestor below pytest was, decided when it is first seen
after its scope, gets STOP_GRACE seconds from then instead of GRACE (supervisord after its
SIGINT, and the listener it stops in turn). Both come from the harness, which reads them from
the plugin's defaults: this checker types in no figure of the rule it checks.

    python -m bench.strangers.checker --socket PATH --run ID --out PATH --grace S --stop-grace S

Messages (one JSON object a line; any of them may carry "told": [[target, signal, ticks], ...],
the signals its process sent since its last message): {"op": "start", "tag", "nodeid", "pid", "ticks"},
{"op": "snapshot", "tags": [...]} (answered), {"op": "end", "tags": [...], "nodeid"} (answered "ok"),
{"op": "session-end", "tags": [...]}
(answered), {"op": "final"} (from the harness, after pytest exited: answered with what outlived
the session, then the checker writes --out and exits).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import sys
import threading
import time

TAG = "LEAKCHECK_SCOPE"
_KEY = TAG.encode() + b"="
CLK_TCK = os.sysconf("SC_CLK_TCK")
HELPERS = (b"pytest_stoplatency._guardian", b"multiprocessing.resource_tracker", b"multiprocessing.forkserver")
STOP_SIGNALS = (15, 2, 1)  # SIGTERM, SIGINT, SIGHUP: the plugin's documented stop signals
_STOP_MASK = sum(1 << (sig - 1) for sig in STOP_SIGNALS)
PF_EXITING = 0x4  # include/linux/sched.h: the process is exiting


def now_ticks() -> int:
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * CLK_TCK)


def stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start ticks), or None if gone."""
    fields = _fields(pid)
    if fields is None:
        return None
    return fields[0].decode(), int(fields[1]), int(fields[19])


def _fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()


def stopping(pid: int, ticks: int) -> tuple[bool, int] | None:
    """(exiting or a stop signal pending, its process group), or None if gone or another."""
    fields = _fields(pid)
    if fields is None or int(fields[19]) != ticks:
        return None
    if int(fields[6]) & PF_EXITING:
        return True, int(fields[2])
    pending = 0
    for line in read(f"/proc/{pid}/status").splitlines():
        if line.startswith((b"SigPnd:", b"ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return bool(pending & _STOP_MASK), int(fields[2])


def read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20)
    except OSError:
        return b""


def tag_of(pid: int) -> str | None:
    env = read(f"/proc/{pid}/environ")
    for entry in env.split(b"\0"):
        if entry.startswith(_KEY):
            return entry[len(_KEY) :].decode(errors="replace")
    return None


class Checker:
    def __init__(self, run: str, grace: float, stop_grace: float) -> None:
        self.run = run
        self.grace = grace
        self.stop_grace = max(stop_grace, grace)
        self.sent: list[tuple[int, int]] = []  # stop signals a pytest process sent: (target, ticks)
        self.deadlines: dict[tuple[int, int], float] = {}  # a snapshot's process: its grace's end
        self.me = os.getpid()
        self.born = now_ticks()
        self.scopes: dict[str, dict] = {}  # tag -> {nodeid, pid, start, end}
        self.timeline: dict[int, list[tuple[int, str]]] = {}  # pytest pid -> [(start ticks, tag)]
        self.leaks: list[dict] = []
        self.counted: set[tuple[int, int]] = set()
        self.outlived: list[dict] = []
        self.scans = 0
        self.scan_s = 0.0
        self.snaps: dict[str, list[tuple[dict, float]]] = {}  # tag -> [(candidate, snapshot time)]
        self.exits: dict[tuple[int, int], float] = {}  # when a watched process exited (monotonic)
        self._watched: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, start ticks)
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        threading.Thread(target=self._watch_exits, daemon=True).start()

    # -- attribution ------------------------------------------------------------------

    def _processes(self) -> dict[int, tuple[str, int, int]]:
        out = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                pid = int(entry)
                s = stat(pid)
                if s is not None:
                    out[pid] = s
        return out

    def _owner(
        self, pid: int, procs: dict, tags: dict, every: bool = False
    ) -> tuple[str | None, tuple[int, int] | None]:
        """(the scope tag it belongs to, the counted process it descends from)."""
        q, depth = pid, 0
        tag = None
        while q in procs and depth < 64:
            if tag is None:
                if q not in tags:
                    tags[q] = tag_of(q)
                tag = tags[q]
            ppid = procs[q][1]
            parent = procs.get(ppid)
            if not every and parent is not None and (ppid, parent[2]) in self.counted:
                return None, (ppid, parent[2])
            if tag is None and ppid in self.timeline:
                # Under a pytest process that runs tests, without any tag: the scope that process
                # was running when its child on the way here started.
                ticks = procs[q][2]
                for start, scope in reversed(self.timeline[ppid]):
                    if start <= ticks:
                        return scope, None
                return None, None
            if ppid <= 1:
                break
            q, depth = ppid, depth + 1
        return tag, None

    def _told(self, pid: int, procs: dict) -> bool:
        """Told to stop, or a parent or an ancestor below pytest was (a server stops its own
        children, with signals only it sent)."""
        q = pid
        for _ in range(64):
            if q not in procs or q <= 1 or q in self.timeline or q == self.me:
                return False
            ticks = procs[q][2]
            got = stopping(q, ticks)
            if got is None:
                return False
            if got[0] or any(t >= ticks and target in (q, -got[1]) for target, t in self.sent):
                return True
            q = procs[q][1]  # ablate: oracle-told-ancestry
        return False

    def _candidates(self, wanted, *, every: bool = False) -> list[dict]:
        """The living processes of the scopes `wanted` names; with `every` (the last look, after
        pytest exited) those already counted a leak of a test, and what they started, too:
        what outlived the session is all that is left, counted or not."""
        t0 = time.perf_counter()
        procs = self._processes()
        tags: dict[int, str | None] = {}
        out = []
        for pid, (state, _ppid, ticks) in procs.items():
            if pid == self.me or ticks < self.born or state in ("Z", "X", "x"):
                continue
            if not every and (pid, ticks) in self.counted:
                continue
            if pid in self.timeline:
                continue  # a pytest process itself
            cmdline = read(f"/proc/{pid}/cmdline")
            if any(h in cmdline for h in HELPERS):
                continue
            tag, lineage = self._owner(pid, procs, tags, every)
            if lineage is not None:
                continue
            if tag is not None and wanted(tag):
                cmd = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
                told = self._told(pid, procs)
                out.append({"pid": pid, "start_ticks": ticks, "cmdline": cmd, "tag": tag, "told": told})
        self.scans += 1
        self.scan_s += time.perf_counter() - t0
        return out

    def _wait(self, found: list[dict]) -> list[dict]:
        """Those still alive at the end of their grace (one wait on all their pidfds): GRACE
        from now, STOP_GRACE for one told to stop, or what was left of it when a snapshot
        first saw it outlive its scope."""
        fds = {}
        deadline = {}
        now = time.monotonic()
        for x in found:
            try:
                fd = os.pidfd_open(x["pid"])
            except OSError:
                continue
            s = stat(x["pid"])
            if s is None or s[2] != x["start_ticks"] or s[0] in ("Z", "X", "x"):
                os.close(fd)
                continue
            fds[fd] = x
            own = self.deadlines.pop((x["pid"], x["start_ticks"]), None)
            deadline[fd] = own if own is not None else now + (self.stop_grace if x.get("told") else self.grace)
        try:
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            left = set(fds)
            late = set()  # exited, but after its grace
            while left:
                now = time.monotonic()
                waiting = [deadline[fd] for fd in left if deadline[fd] > now]
                if not waiting:
                    break
                for fd, _ in poller.poll((max(waiting) - now) * 1000):
                    poller.unregister(fd)
                    left.discard(fd)
                    if time.monotonic() > deadline[fd]:
                        late.add(fd)
            alive = [fds[fd] for fd in late]
            for fd in left:
                s = stat(fds[fd]["pid"])
                if s is not None and s[0] not in ("Z", "X", "x"):
                    alive.append(fds[fd])
            return alive
        finally:
            for fd in fds:
                os.close(fd)

    def _watch_exits(self) -> None:
        """Record, as it happens, when each process of a snapshot exits."""
        while True:
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            with self._lock:
                for fd in self._watched:
                    poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll():
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                now = time.monotonic()
                with self._lock:
                    key = self._watched.pop(fd, None)
                    if key is not None:
                        self.exits.setdefault(key, now)
                        os.close(fd)

    def _snapshot(self, tags: set[str]) -> None:
        taken = []
        for x in self._candidates(tags.__contains__):
            try:
                fd = os.pidfd_open(x["pid"])
            except OSError:
                continue
            s = stat(x["pid"])
            if s is None or s[2] != x["start_ticks"] or s[0] in ("Z", "X", "x"):
                os.close(fd)
                continue
            with self._lock:
                self._watched[fd] = (x["pid"], x["start_ticks"])
            taken.append(x)
        os.write(self._wake_w, b"x")
        # The graces count from here: the snapshot done, the probe answered, the plugin's check
        # begins (the plugin's count from its own snapshot, after the probe's: a busy machine's
        # scan of /proc, here before this moment, made the oracle's stop grace end before the
        # plugin's, and a told process that exited within the plugin's a leak of the oracle's).
        t = time.monotonic()
        for x in taken:
            self.snaps.setdefault(x["tag"], []).append((x, t))

    def _judge_snapshots(self, tags: set[str], nodeid: str | None) -> None:
        """The snapshot's processes still alive GRACE seconds after it outlived their scope."""
        for tag in tags:
            for x, t in self.snaps.pop(tag, []):
                key = (x["pid"], x["start_ticks"])
                with self._lock:
                    gone = self.exits.get(key)
                allowed = t + (self.stop_grace if x["told"] else self.grace)
                if key in self.counted or (gone is not None and gone <= allowed):
                    continue
                if gone is None and time.monotonic() < allowed:
                    # Still within its grace (an end that comes at once): the scan below waits
                    # until then (a child of a server told to stop: told, even once the server is gone).
                    self.deadlines[key] = allowed
                    continue
                self.counted.add(key)
                scope = self.scopes.get(x["tag"], {})
                late = None if gone is None else round(gone - t, 3)  # exited this long after the snapshot
                self.leaks.append(
                    {
                        **x,
                        "scope": scope.get("nodeid", x["tag"]),
                        "found_at": nodeid,
                        "when": "snapshot",
                        "gone_after_s": late,
                    }
                )

    def _count(self, found: list[dict], when: str, nodeid: str | None) -> None:
        for x in self._wait(found):
            key = (x["pid"], x["start_ticks"])
            if key in self.counted:
                continue
            self.counted.add(key)
            scope = self.scopes.get(x["tag"], {})
            self.leaks.append({**x, "scope": scope.get("nodeid", x["tag"]), "found_at": nodeid, "when": when})

    # -- messages -----------------------------------------------------------------------

    def handle(self, msg: dict) -> dict | None:
        op = msg["op"]
        told = [(target, ticks) for target, sig, ticks in msg.get("told", ()) if sig in STOP_SIGNALS]
        self.sent += told  # ablate: oracle-told-signals
        if op == "start":
            self.scopes[msg["tag"]] = {"nodeid": msg["nodeid"], "pid": msg["pid"], "start": msg["ticks"]}
            self.timeline.setdefault(msg["pid"], []).append((msg["ticks"], msg["tag"]))
            return None
        if op == "snapshot":
            self._snapshot(set(msg["tags"]))
            return {"ok": True}
        if op == "end":
            self._judge_snapshots(set(msg["tags"]), msg.get("nodeid"))
            if msg.get("gap"):
                gap = msg["gap"]
                self.scopes[gap] = {"nodeid": f"after {msg.get('nodeid')}", "pid": msg["pid"], "start": msg["ticks"]}
                self.timeline.setdefault(msg["pid"], []).append((msg["ticks"], gap))
            ended = set(msg["tags"])
            for tag in ended:
                self.scopes.setdefault(tag, {"nodeid": tag})["ended"] = True
            self._count(self._candidates(ended.__contains__), "scope end", msg.get("nodeid"))
            return {"ok": True}
        if op == "session-end":
            gaps = set(msg["tags"])

            def wanted(tag: str) -> bool:
                return tag in gaps or self.scopes.get(tag, {}).get("ended", False)

            self._count(self._candidates(wanted), "session end", None)
            return {"ok": True}
        if op == "final":
            every = True  # ablate: oracle-last-look-takes-counted
            found = self._wait(self._candidates(lambda tag: tag.startswith(self.run), every=every))
            self.outlived = found
            return {"ok": True, "outlived": found}
        raise ValueError(f"unknown op {op!r}")

    def report(self) -> dict:
        return {
            "run": self.run,
            "grace_s": self.grace,
            "stop_grace_s": self.stop_grace,
            "leaks": self.leaks,
            "outlived_session": self.outlived,
            "scans": self.scans,
            "scan_s": round(self.scan_s, 3),
        }


def serve(path: str, checker: Checker, out: str) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    open(path + ".ready", "w").close()
    conns: dict[socket.socket, bytes] = {}
    done = False
    while not done:
        readable, _, _ = select.select([server, *conns], [], [])
        for s in readable:
            if s is server:
                conn, _ = server.accept()
                conns[conn] = b""
                continue
            data = s.recv(1 << 16)
            if not data:
                del conns[s]
                s.close()
                continue
            buf = conns[s] + data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                reply = checker.handle(msg)
                if reply is not None:
                    s.sendall(json.dumps(reply).encode() + b"\n")
                if msg["op"] == "final":
                    done = True
            if s in conns:
                conns[s] = buf
    with open(out, "w") as f:
        json.dump(checker.report(), f, indent=1)
    server.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--grace", type=float, required=True)
    ap.add_argument("--stop-grace", type=float, required=True)
    args = ap.parse_args(argv)
    serve(args.socket, Checker(args.run, args.grace, args.stop_grace), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
