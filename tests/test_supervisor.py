"""The one job supervisor (vmsched/vmruntime/supervisor.py) of vmrun and the launcher's shim, on real
processes: signals forwarded, escalation to SIGKILL one grace time after SIGTERM for a process that
ignores it, exit statuses (signals as 128 + N), the job's own /dev/shm segments removed, nobody else's."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import wait_for
from vmsched.vmruntime.supervisor import exit_status

# Runs `supervise` in a process of its own (it installs signal handlers), on the job given as argv[2:];
# prints the outcome as JSON.
SUPERVISOR = """
import json, subprocess, sys
from vmsched.vmruntime.supervisor import supervise
o = supervise(lambda: subprocess.Popen(sys.argv[2:]), float(sys.argv[1]))
print(json.dumps({"exit_code": o.exit_code, "escalated": o.escalated, "removed_shm": o.removed_shm,
                  "noted_shm": o.noted_shm}))
"""

# A job: writes its pid and its child's pid, maps a /dev/shm segment (as MPICH's ranks do), and a child
# ("rank") that ignores SIGTERM or not; the top process exits 7 on SIGTERM once its child is gone.
JOB = """
import mmap, os, signal, subprocess, sys, time
out, seg, rank_ignores = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
fd = os.open(seg, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
m = mmap.mmap(fd, 4096)
rank = subprocess.Popen([sys.executable, "-c",
    "import signal, time\\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n" if rank_ignores else "")
    + "time.sleep(120)"])
def term(*_):
    if not rank_ignores:
        rank.terminate()
    rank.wait()
    open(out + ".term", "w").write("got it")
    sys.exit(7)
signal.signal(signal.SIGTERM, term)
open(out, "w").write(f"{os.getpid()} {rank.pid}")
time.sleep(120)
"""


def _start(tmp_path: Path, grace: float, rank_ignores: bool) -> tuple[subprocess.Popen, Path, Path, list[int]]:
    out = tmp_path / "pids"
    seg = Path(f"/dev/shm/vmsup-test-{os.getpid()}-{int(rank_ignores)}")
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(grace), sys.executable, "-c", JOB, str(out),
                            str(seg), "1" if rank_ignores else "0"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    wait_for(lambda: out.exists() and out.read_text().count(" ") == 1, timeout=30, what="the job to start")
    pids = [int(p) for p in out.read_text().split()]
    time.sleep(0.5)  # the supervisor notes the mappings every 0.1 s at first
    return sup, out, seg, pids


def _outcome(sup: subprocess.Popen) -> dict:
    stdout, _ = sup.communicate(timeout=30)
    return json.loads(stdout.strip().splitlines()[-1])


def test_sigterm_is_forwarded_and_the_exit_status_kept(tmp_path):
    sup, out, seg, pids = _start(tmp_path, grace=20.0, rank_ignores=False)
    bystander = Path(f"/dev/shm/vmsup-bystander-{os.getpid()}")  # someone else's segment: not the job's
    bystander.write_bytes(b"x")
    try:
        t0 = time.monotonic()
        sup.send_signal(signal.SIGTERM)
        o = _outcome(sup)
        assert time.monotonic() - t0 < 10, "ended by itself, long before the grace time"
        assert o == {"exit_code": 7, "escalated": False, "removed_shm": [str(seg)], "noted_shm": [str(seg)]}
        assert (tmp_path / "pids.term").read_text() == "got it"
        assert not seg.exists() and bystander.exists()
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    finally:
        bystander.unlink()
        seg.unlink(missing_ok=True)


def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace_time(tmp_path):
    grace = 1.5
    sup, out, seg, pids = _start(tmp_path, grace=grace, rank_ignores=True)
    try:
        rank = psutil.Process(pids[1])
        t0 = time.monotonic()
        sup.send_signal(signal.SIGTERM)
        o = _outcome(sup)
        took = time.monotonic() - t0
        assert grace <= took < grace + 5, took
        # The rank was SIGKILLed; its parent, whose SIGTERM handler waited for it, then exited 7 by itself.
        assert o == {"exit_code": 7, "escalated": True, "removed_shm": [str(seg)], "noted_shm": [str(seg)]}
        assert not rank.is_running() or rank.status() == psutil.STATUS_ZOMBIE
        assert not seg.exists()
    finally:
        seg.unlink(missing_ok=True)


def test_a_second_signal_kills_at_once(tmp_path):
    sup, out, seg, pids = _start(tmp_path, grace=60.0, rank_ignores=True)
    try:
        sup.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        t0 = time.monotonic()
        sup.send_signal(signal.SIGINT)
        o = _outcome(sup)
        assert time.monotonic() - t0 < 10 and o["escalated"] and not seg.exists()
    finally:
        seg.unlink(missing_ok=True)


EXITS = [("sys.exit(0)", 0), ("sys.exit(5)", 5), ("os.kill(os.getpid(), 9)", 137), ("os.kill(os.getpid(), 15)", 143)]


@pytest.mark.parametrize(("code", "expected"), EXITS)
def test_exit_status_mapping(code, expected):
    r = subprocess.run([sys.executable, "-c", SUPERVISOR, "3", sys.executable, "-c", f"import os, sys; {code}"],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert json.loads(r.stdout)["exit_code"] == expected
    assert exit_status(-signal.SIGKILL) == 137 and exit_status(3) == 3


# The launcher's shim under the hardened unit: root without CAP_SYS_PTRACE (systemd/vm-launcher.service), so it
# cannot read the maps of another user's processes; the job runs as that user.
HARDENED_SUPERVISOR = """
import json, subprocess, sys
from vmsched.vmruntime.supervisor import supervise
uid = int(sys.argv[1])
o = supervise(lambda: subprocess.Popen(sys.argv[2:], user=uid, group=uid, extra_groups=[], cwd="/"), 5.0,
              owner=(uid, uid))
print(json.dumps({"exit_code": o.exit_code, "removed_shm": o.removed_shm, "noted_shm": o.noted_shm}))
"""
# The job (as that user): maps a segment of its own and a root-owned one it may read, then ends without
# removing either (a killed MPI job leaves its MPICH segment so).
USER_JOB = """
import mmap, os, sys, time
own, foreign = sys.argv[1], sys.argv[2]
fd = os.open(own, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
a = mmap.mmap(fd, 4096)
b = mmap.mmap(os.open(foreign, os.O_RDONLY), 4096, prot=mmap.PROT_READ)
time.sleep(1.5)
"""


def test_another_users_job_is_watched_as_that_user_and_only_its_own_segments_removed():
    nobody = pwd.getpwnam("nobody")
    own = Path(f"/dev/shm/mpich_shm_vmsup-{os.getpid()}")
    foreign = Path(f"/dev/shm/vmsup-foreign-{os.getpid()}")  # root's, readable by all: mapped, never removed
    foreign.write_bytes(b"\0" * 4096)
    foreign.chmod(0o644)
    caps = "+setuid,+setgid,+kill,+sys_nice,+dac_override,+fowner,+chown"  # no sys_ptrace, as the unit
    try:
        r = subprocess.run(["setpriv", f"--bounding-set=-all,{caps}", "--inh-caps=-all", sys.executable, "-c",
                            HARDENED_SUPERVISOR, str(nobody.pw_uid), "/usr/bin/python3", "-c", USER_JOB, str(own),
                            str(foreign)], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        o = json.loads(r.stdout.strip().splitlines()[-1])
        assert o == {"exit_code": 0, "removed_shm": [str(own)], "noted_shm": sorted([str(own), str(foreign)])}
        assert not own.exists() and foreign.exists()
    finally:
        foreign.unlink()
        own.unlink(missing_ok=True)


# A job whose ranks die inside MPI_Init, before the supervisor's first look: it makes and maps a segment
# and ends at once (or after argv[3] seconds). It also makes one that a process it leaves behind keeps
# mapped (a live job's).
SHORT_JOB = """
import mmap, os, subprocess, sys, time
orphan, busy = sys.argv[1], sys.argv[2]
for path in (orphan, busy):
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 4096)
    m = mmap.mmap(fd, 4096)
holder = subprocess.Popen([sys.executable, "-c", "import mmap, os, sys, time; "
                           "m = mmap.mmap(os.open(sys.argv[1], os.O_RDWR), 4096); print(flush=True); time.sleep(30)",
                           busy], stdout=subprocess.PIPE, start_new_session=True)
holder.stdout.readline()
print(holder.pid, flush=True)
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0)
"""


@pytest.mark.parametrize("prefix", ["mpich_shm_", "ucx_shm_posix_"], ids=["mpich", "ucx"])
@pytest.mark.parametrize("lingers", [0.0, 0.5], ids=["ends-at-once", "seen-alive"])
def test_a_segment_orphaned_before_the_first_look_is_removed_and_no_other(lingers, prefix):
    """Ended at once, the job is (mostly) gone before the supervisor's first look, 0.1 s after its start;
    seen alive, both its segments were noted. Either way the one that a process it left behind still maps
    stays: before, it was removed whenever a look caught the job alive (1 run in 10 of the suite, 6 in 15, twice,
    on a busy node). UCX's segments (ch4:ucx) too: one was left by a run of this file beside others."""
    from vmsched.vmruntime.supervisor import supervise

    tag = f"vmsup-orphan-{os.getpid()}"
    orphan, busy, old = (Path(f"/dev/shm/{prefix}{tag}-{n}") for n in ("orphan", "busy", "old"))
    old.write_bytes(b"\0" * 4096)  # unmapped, but made before the job: not the job's
    time.sleep(0.2)
    holder = None
    try:
        out = []

        def start() -> subprocess.Popen:
            p = subprocess.Popen([sys.executable, "-c", SHORT_JOB, str(orphan), str(busy), str(lingers)],
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
            out.append(p)
            return p

        o = supervise(start, 5.0)
        holder = int(out[0].stdout.read().split()[0])
        assert o.exit_code == 0
        assert o.removed_shm == [str(orphan)] and not orphan.exists()
        assert busy.exists() and old.exists()  # mapped by a live process / older than the job
        if lingers:
            assert o.noted_shm == sorted([str(orphan), str(busy)])
    finally:
        if holder is not None:
            os.kill(holder, signal.SIGKILL)
            with pytest.raises(ChildProcessError):
                os.waitpid(holder, 0)  # not our child: reaped by init; wait for it to be gone instead
            wait_for(lambda: not psutil.pid_exists(holder) or psutil.Process(holder).status() == "zombie",
                     what="the holder to end")  # fmt: skip
        for path in (orphan, busy, old):
            path.unlink(missing_ok=True)


# A job that holds hydra's topology file open, as MPICH's proxy does (under a proxy's name: only hydra's
# processes are looked through for it), and ends without removing it (a job that calls MPI_Abort leaves
# it so); and a file of the same name below /tmp, which is not hydra's.
TOPOLOGY_JOB = """
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, b"hydra_pmi_proxy")  # PR_SET_NAME
fds = [os.open(path, os.O_CREAT | os.O_RDWR, 0o600) for path in sys.argv[1:]]
time.sleep(1.0)
"""


def test_hydras_topology_file_left_by_an_aborted_job_is_removed_and_no_file_below_tmp(tmp_path):
    from vmsched.vmruntime.supervisor import supervise

    topology = Path(f"/tmp/hydra_hwloc_xmlfile_vmsup{os.getpid()}")
    nested = tmp_path / topology.name
    try:
        o = supervise(lambda: subprocess.Popen([sys.executable, "-c", TOPOLOGY_JOB, str(topology), str(nested)]),
                      5.0)  # fmt: skip
        assert o.exit_code == 0
        assert o.removed_shm == [str(topology)] and not topology.exists()
        assert nested.exists() and str(nested) not in o.noted_shm
    finally:
        topology.unlink(missing_ok=True)


# Maps each /dev/shm file named (as bytes, hex) in argv[2:], unlinks the last argv[1] of them, says so
# and waits on stdin.
MAPPER = """
import mmap, os, sys
names, maps = [bytes.fromhex(a) for a in sys.argv[2:]], []
for name in names:
    fd = os.open(name, os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 4096)
    maps.append(mmap.mmap(fd, 4096))
for name in names[len(names) - int(sys.argv[1]):]:
    os.unlink(name)
print("mapped", flush=True)
sys.stdin.read()
"""


def test_the_segments_a_process_maps_are_read_whole_names_not_utf8_deleted_ones_and_never_vmscheds():
    from vmsched.vmruntime.shmclean import mapped_segments

    tag = f"vmsup{os.getpid()}".encode()
    names = [b"/dev/shm/mpich_shm_" + tag, b"/dev/shm/odd_\xff_" + tag, b"/dev/shm/vmsched_" + tag,
             b"/dev/shm/gone_" + tag]  # fmt: skip
    p = subprocess.Popen([sys.executable, "-c", MAPPER, "1", *(n.hex() for n in names)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert p.stdout.readline() == b"mapped\n"
        assert mapped_segments(p.pid) == {os.fsdecode(n) for n in (names[0], names[1], names[3])}
        assert mapped_segments(p.pid, "/dev/shm/mpich_shm_") == {os.fsdecode(names[0])}
        assert mapped_segments(p.pid, "/dev/shm/none_") == set()
    finally:
        p.communicate(b"")
        for n in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(n)
    assert mapped_segments(p.pid) == set()  # gone: maps nothing


def test_remove_owned_removes_only_files_of_the_user_directly_in_its_directories(tmp_path):
    from vmsched.vmruntime.shmclean import remove_owned

    below_tmp = tmp_path / "hydra_hwloc_xmlfile_x"  # the name, but not directly in /tmp
    below_tmp.write_text("x")
    other_tmp = Path(f"/tmp/vmsup-not-hydra-{os.getpid()}")  # directly in /tmp, but not hydra's name
    other_tmp.write_text("x")
    seg = Path(f"/dev/shm/vmsup-owned-{os.getpid()}")
    seg.write_bytes(b"\0")
    me = os.geteuid()
    try:
        assert not remove_owned(str(below_tmp), me) and below_tmp.exists()
        assert not remove_owned(str(other_tmp), me) and other_tmp.exists()
        assert not remove_owned(f"/dev/shm/../dev/shm/{seg.name}", me) and seg.exists()  # not directly
        assert not remove_owned(str(seg), me + 1) and seg.exists()  # another user's
        assert remove_owned(str(seg), me) and not seg.exists()
    finally:
        other_tmp.unlink(missing_ok=True)
        seg.unlink(missing_ok=True)


# A job's top process with one child: maps the segment named on each line of its stdin, answers "ok".
TWO_LEVELS = """
import mmap, os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
maps = []
for line in sys.stdin:
    fd = os.open(line.strip(), os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 4096)
    maps.append(mmap.mmap(fd, 4096))
    print("ok", flush=True)
child.kill()
"""


def test_a_job_is_looked_at_often_until_its_processes_and_segments_settle_then_once_a_second():
    from vmsched.vmruntime.shmclean import LOOK_FAST_FOR_S, LOOK_FAST_S, LOOK_SLOW_S, JobLooks

    segs = [f"/dev/shm/vmsup-looks-{os.getpid()}-{i}" for i in range(2)]
    p = subprocess.Popen([sys.executable, "-c", TWO_LEVELS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(p.stdout.readline())
        looks = JobLooks(p.pid)
        wait_for(lambda: child in {c.pid for c in psutil.Process(p.pid).children()}, what="the child")
        for _ in range(3):  # the same processes, but no segment yet: it may still be in MPI_Init
            assert looks.look() == set()
            assert looks.interval() == LOOK_FAST_S
        p.stdin.write(segs[0] + "\n"), p.stdin.flush()
        assert p.stdout.readline() == "ok\n"
        assert looks.look() == {segs[0]}
        assert looks.interval() == LOOK_FAST_S, "its files changed at this look: not settled"
        assert looks.look() == {segs[0]}
        assert looks.interval() == LOOK_SLOW_S, "two looks alike, a segment among them: settled"
        p.stdin.write(segs[1] + "\n"), p.stdin.flush()
        assert p.stdout.readline() == "ok\n"
        assert looks.look() == set(segs), "a segment mapped later is still found, at the slow pace"
        assert looks.interval() == LOOK_SLOW_S
        unsettled = JobLooks(p.pid)
        unsettled.look()
        assert unsettled.interval() == LOOK_FAST_S
        unsettled.began -= LOOK_FAST_FOR_S  # a job that never settles is looked at slowly after a while
        assert unsettled.interval() == LOOK_SLOW_S
    finally:
        p.communicate("")
        for s in segs:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(s)
