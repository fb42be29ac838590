"""runner.proc.identity: the one writer and reader of process identity."""

import json
import os
import shutil

import pytest

from runner.errors import IdentityError
from runner.files import identity_file
from runner.ident import Identity, boot_id
from runner.proc import identity


def test_current_round_trips_through_the_file_format(tmp_path, procs):
    """write() then read() gives back the identity current() saw, and the extra keys
    sit beside it. Ablation: drop a field from to_json and read() raises."""
    p = procs()
    ident = identity.current(p.pid)
    path = tmp_path / "child.json"
    identity_file.write(path, ident, name="provider", argv=["sleep", "60"])
    assert identity_file.read(path) == ident
    assert identity_file.read_extra(path) == {"name": "provider", "argv": ["sleep", "60"]}
    assert identity.is_running(identity_file.read(path))
    on_disk = json.loads(path.read_text())
    assert on_disk["start_ticks"] == ident.start_ticks and isinstance(on_disk["start_ticks"], int)


def test_stat_parses_a_command_name_with_spaces_and_parentheses(tmp_path, procs):
    """/proc/PID/stat is split after the LAST ')': a comm like 'x) (y z' must not shift
    the fields. Ablation: split on the first ')' and pgid/start_ticks come out wrong."""
    odd = tmp_path / "x) (y z"
    shutil.copy(shutil.which("sleep"), odd)
    p = procs([str(odd), "60"], process_group=0)
    st = identity.stat(p.pid)
    assert st.ppid == os.getpid()
    assert st.pgid == p.pid  # its own group
    assert st.sid == os.getsid(0)
    with open(f"/proc/{p.pid}/stat") as f:
        expected_ticks = int(f.read().split(") ")[-1].split()[19])
    assert st.start_ticks == expected_ticks


def test_zombie_and_dead_read_as_not_running(procs):
    """A zombie is dead for every purpose except pinning its pid; a reaped process is gone."""
    p = procs(["true"])
    ident = identity.current_or_zombie(p.pid)
    # Until we wait(), it stays a zombie; identity.current must not treat it as alive.
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    assert identity.stat(p.pid).zombie
    assert identity.current(p.pid) is None
    assert not identity.is_running(ident)
    p.wait()
    assert identity.start_ticks(p.pid) is None
    assert not identity.is_running(ident)


def test_identity_from_an_earlier_boot_reads_as_not_running(tmp_path, procs):
    """Same pid, same start ticks, other boot id: not running (ticks restart every boot)."""
    p = procs()
    ident = identity.current(p.pid)
    old = Identity(ident.pid, ident.pgid, ident.sid, ident.start_ticks, "00000000-0000-0000-0000-000000000000")
    identity_file.write(tmp_path / "old.json", old)
    assert not identity.is_running(identity_file.read(tmp_path / "old.json"))
    assert identity.is_running(ident)


def test_other_start_ticks_read_as_not_running(procs):
    p = procs()
    ident = identity.current(p.pid)
    assert not identity.is_running(Identity(ident.pid, ident.pgid, ident.sid, ident.start_ticks + 1, ident.boot_id))


GOOD = {"pid": 10, "pgid": 10, "sid": 3, "start_ticks": 1234, "boot_id": "b"}


@pytest.mark.parametrize(
    "content, field",
    [
        ("", "JSON"),
        ("{not json", "JSON"),
        ("[1, 2]", "object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "start_ticks"}), "start_ticks"),
        (json.dumps({**GOOD, "pid": "10"}), "pid"),
        (json.dumps({**GOOD, "pid": True}), "pid"),
        (json.dumps({**GOOD, "pid": 0}), "pid"),
        (json.dumps({**GOOD, "pgid": -1}), "pgid"),
        (json.dumps({**GOOD, "sid": -3}), "sid"),
        (json.dumps({**GOOD, "start_ticks": 12.5}), "start_ticks"),
        (json.dumps({**GOOD, "boot_id": ""}), "boot_id"),
        (json.dumps({**GOOD, "format": 99}), "format"),
    ],
)
def test_malformed_identity_file_is_refused_naming_file_and_field(tmp_path, content, field):
    """A malformed file is an error naming the file and the field, never 'nothing to kill'."""
    path = tmp_path / "engine.json"
    path.write_text(content)
    with pytest.raises(IdentityError) as err:
        identity_file.read(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_group_and_session_outside_our_pid_namespace_round_trip(tmp_path):
    """/proc reads a leader outside our pid namespace as 0 (CI's container does this for
    pytest's own session): such an identity must write and read back, not be refused as
    malformed. Ablation: require sid >= 1 again and this fails as it did in CI."""
    ident = Identity(pid=10, pgid=0, sid=0, start_ticks=1234, boot_id="b")
    identity_file.write(tmp_path / "child.json", ident)
    assert identity_file.read(tmp_path / "child.json") == ident


def test_missing_identity_file_propagates(tmp_path):
    with pytest.raises(FileNotFoundError):
        identity_file.read(tmp_path / "absent.json")


def test_extra_keys_cannot_shadow_identity_fields(tmp_path):
    ident = identity.current(os.getpid())
    with pytest.raises(ValueError):
        identity_file.write(tmp_path / "x.json", ident, pid=1)


def test_file_written_by_a_real_registry_round_trips(tmp_path, procs):
    """The children/<pid>.json a Registry writes reads back as the live child."""
    from runner.engine.registry import Registry

    reg = Registry(tmp_path / "children", run_id="rt", kill_grace=0.3)
    p = procs(process_group=0)
    entry = reg.register(p, "provider")
    path = tmp_path / "children" / f"{p.pid}.json"
    ident = identity_file.read(path)
    assert ident == identity.current(p.pid) == entry.ident
    assert ident.pgid == p.pid
    assert identity_file.read_extra(path)["name"] == "provider"
    reg.unregister(entry)
    assert not path.exists()


def test_boot_id_is_the_kernels():
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert boot_id() == f.read().strip()


def test_a_process_whose_leader_thread_exited_is_alive_while_a_thread_runs(victim):
    """Path: identity.stat, alive means any live thread. The zombie-leader victim's main
    (leader) thread exited while its other thread sleeps on: /proc/PID/stat says `Z`,
    yet stat() reads the process alive (that thread's state, `tid` naming it), current()
    and is_running() see it, its environment (the run's tag) is read through the thread
    (membership), and the kernel agrees: its pidfd is not readable. Only once SIGKILL
    ends every thread does it read as gone. Ablation: `threads-as-liveness` (red: the
    leader's `Z` is taken for death)."""
    import select
    import signal

    from runner.proc import membership

    v = victim("zombie-leader")
    with open(f"/proc/{v.pid}/stat", "rb") as f:
        assert f.read().rsplit(b")", 1)[1].split()[0] == b"Z", "the leader thread never exited"
    st = identity.stat(v.pid)
    assert st is not None and not st.zombie and st.tid != v.pid, st
    assert identity.current(v.pid) is not None and identity.is_running(identity.current(v.pid))
    assert membership.tag_of(v.pid) is None and b"STOPLATENCY_VICTIM=" in membership._environ(v.pid)
    fd = os.pidfd_open(v.pid)
    try:
        assert not select.select([fd], [], [], 0)[0], "the kernel says the process is gone"
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        assert select.select([fd], [], [], 5)[0]
    finally:
        os.close(fd)
    assert v.wait_gone(5)
    st = identity.stat(v.pid)
    assert st is None or st.zombie
