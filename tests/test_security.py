"""Isolation on a shared node (docs/security.md), tried for real by a second, unprivileged user.

`nobody` runs an attacker process that knows everything a user can learn (the node table is world
readable) and tries every way in: writing the node table or another user's job segment, deleting them,
taking the manager's lock, connecting to the CPU manager's socket, asking it to act on another user's
job, and forging rank entries in its own job's segment that name a root process and another user's
rank. Each attempt must be refused or without effect; root's folded job must complete with a verified
result, and a root process must keep its affinity and never be stopped.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import psutil
import pytest

from tests.conftest import CpuManagerProcess, vmsched_shm_entries, wait_for
from tests.launcher_harness import send_app, vmapp_result
from vmsched.cpumanager import shm_layout as L
from vmsched.cpumanager.manager import MAX_LOGGED_REFUSALS
from vmsched.vmruntime.testing import end_job, job_segment, rank_pids, vmrun_cmd


def _open(path: str, flags: int) -> None:
    os.close(os.open(path, flags))


def _connect(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)


def _attempt(fn: Callable[..., object], *args: object) -> str:
    try:
        fn(*args)
        return "allowed"
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, str(e.errno))


def _forge(path: str, rank: int, pid: int, state: int = L.RANK_RUNNING, rank_field: int | None = None) -> None:
    e = L.RankEntry(job_id=0, rank=rank if rank_field is None else rank_field, pid=pid, state=state, wake=1)
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, bytes(e), ctypes.sizeof(L.JobRt) + rank * ctypes.sizeof(L.RankEntry))
    os.close(fd)


def _attacker_loop(inp: TextIO, out: TextIO) -> None:
    """What the second user does: one JSON command per line in, one JSON answer per line out."""
    from vmsched.protocol import Client, ProtocolError

    child = other = None
    for line in inp:
        cmd = json.loads(line)
        op, ans = cmd["op"], {}
        if op == "reach":  # everything that belongs to someone else
            shm, lock = "/dev/shm/" + cmd["shm"].lstrip("/"), "/dev/shm/sem." + cmd["lock"].lstrip("/")
            victim = job_segment(cmd["shm"], cmd["victim"])
            ans["table_write"] = _attempt(_open, shm, os.O_RDWR)
            ans["table_read"] = _attempt(_open, shm, os.O_RDONLY)
            ans["victim_write"] = _attempt(_open, victim, os.O_RDWR)
            ans["victim_read"] = _attempt(_open, victim, os.O_RDONLY)
            ans["lock_open"] = _attempt(_open, lock, os.O_RDWR)
            ans["table_unlink"] = _attempt(os.unlink, shm)
            ans["victim_unlink"] = _attempt(os.unlink, victim)
            ans["victim_replace"] = _attempt(os.rename, "/dev/shm/vmsched-attacker", victim)
            ans["socket_connect"] = _attempt(_connect, cmd["socket"])
        elif op == "ask":  # the CPU manager's API, about another user's job and root's processes
            with Client(Path(cmd["socket"]), timeout_s=5) as c:
                for name, args in cmd["requests"]:
                    try:
                        c.call(name, **args)
                        ans[name] = "allowed"
                    except ProtocolError as e:
                        ans[name] = str(e)
        elif op == "forge":  # our own job's segment, naming processes that are not ours
            path = job_segment(cmd["shm"], cmd["job"])
            ans["own_write"] = _attempt(_open, path, os.O_RDWR)
            child = subprocess.Popen(["sleep", "120"])
            for rank, pid in enumerate(cmd["foreign"]):
                _forge(path, rank, pid)
            legit = len(cmd["foreign"])
            _forge(path, legit, child.pid)
            _forge(path, legit + 1, -7, state=99, rank_field=123456)  # garbage
            ans["child"], ans["legit_rank"] = child.pid, legit
        elif op == "flood":  # a new pid in a slot again and again: checks and log lines it may cost
            path = job_segment(cmd["shm"], cmd["job"])
            for i in range(cmd["n"]):
                pids = cmd["pids"]
                _forge(path, cmd["rank"], pids[i % len(pids)] if i % 3 else 4_000_000 - i)
                time.sleep(0.002)
            ans["done"] = cmd["n"]
        elif op == "evade":  # take our rank out of the manager's hands: slot done, then another process in it
            path = job_segment(cmd["shm"], cmd["job"])
            _forge(path, cmd["rank"], child.pid, state=L.RANK_DONE)
            time.sleep(0.2)
            other = subprocess.Popen(["sleep", "120"])
            _forge(path, cmd["rank"], other.pid)
            ans["other"] = other.pid
        elif op == "truncate":
            path = job_segment(cmd["shm"], cmd["job"])
            os.truncate(path, 0)
            ans["size"] = os.stat(path).st_size
        elif op == "quit":
            break
        out.write(json.dumps(ans) + "\n")
        out.flush()
    for p in (child, other):
        if p:
            p.kill()
            p.wait()


class Attacker:
    """`_attacker_loop` in a forked child that has become `nobody` (no exec: this machine's Python lives
    where nobody cannot read it, and the attack needs no more than a user's rights)."""

    def __init__(self) -> None:
        nobody = pwd.getpwnam("nobody")
        self.uid = nobody.pw_uid
        cmd_r, cmd_w = os.pipe()
        ans_r, ans_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child
            try:
                os.close(cmd_w)
                os.close(ans_r)
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                _attacker_loop(os.fdopen(cmd_r), os.fdopen(ans_w, "w"))
            finally:
                os._exit(0)
        os.close(cmd_r)
        os.close(ans_w)
        self._cmd = os.fdopen(cmd_w, "w")
        self._ans = os.fdopen(ans_r)

    def do(self, op: str, **args: object) -> dict:
        self._cmd.write(json.dumps({"op": op, **args}) + "\n")
        self._cmd.flush()
        line = self._ans.readline()
        assert line, f"the attacker died doing {op}"
        return json.loads(line)

    def stop(self) -> None:
        try:
            self._cmd.write(json.dumps({"op": "quit"}) + "\n")
            self._cmd.close()
        except BrokenPipeError:
            pass
        self._ans.close()
        os.waitpid(self.pid, 0)


def proc_state(pid: int) -> str:
    data = Path(f"/proc/{pid}/stat").read_text()
    return data[data.rfind(")") + 2]


@pytest.fixture
def shared_node() -> Iterator[CpuManagerProcess]:
    """A CPU manager whose state directory a second user can traverse (not pytest's 0700 tmp)."""
    root = Path(tempfile.mkdtemp(prefix="vmsched-sec-"))
    root.chmod(0o755)
    cm = CpuManagerProcess(root / "state").start()
    try:
        yield cm
    finally:
        cm.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_second_user_cannot_steer_the_manager_or_touch_another_job(shared_node: CpuManagerProcess, spawn) -> None:
    cm = shared_node
    cfg = cm.cfg
    victim_pid_root = spawn("sleep", "120").pid  # a root process nobody may have re-pinned or stopped
    root_aff = os.sched_getaffinity(victim_pid_root)
    # Root's folded job: 4 ranks on 2 CPUs (vmrun is its leader).
    app = [sys.executable, *send_app(250)[1:]]
    job = subprocess.Popen(vmrun_cmd(cm.state_dir, 4, 4, app, queue="local", job_id=41),
                           env={**os.environ, "VMSCHED_STATE_DIR": str(cm.state_dir)}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    attacker = Attacker()
    c = cm.client()
    try:
        wait_for(lambda: len(rank_pids(job.pid)) == 4, timeout=30, what="root's 4 ranks")
        root_rank = rank_pids(job.pid)[0]
        wait_for(lambda: any(j["job"] == 41 and j["registered"] == 4 for j in c.status()["jobs"]), timeout=30,
                 interval=0.05, what="root's ranks verified")  # fmt: skip

        # 1. Nothing of root's is reachable: the node table is read-only, root's job segment closed.
        seen = attacker.do("reach", shm=cfg.shm_name, lock=cfg.lock_name, victim=41, socket=str(cfg.cpumanager_socket))
        assert seen == {
            "table_write": "EACCES", "table_read": "allowed", "victim_write": "EACCES", "victim_read": "EACCES",
            "lock_open": "EACCES", "table_unlink": "EPERM", "victim_unlink": "EPERM", "victim_replace": "ENOENT",
            "socket_connect": "EACCES",
        }, seen  # fmt: skip

        # 2. Its own job (admitted by root for nobody, as the launcher does), the attacker its leader.
        c.admit(42, nranks=4, max_mpl=4, queue="local", uid=attacker.uid, leader_pid=attacker.pid)
        forged = attacker.do("forge", shm=cfg.shm_name, job=42, foreign=[victim_pid_root, root_rank])
        assert forged["own_write"] == "allowed"
        legit, legit_rank = forged["child"], forged["legit_rank"]
        # The manager verifies the attacker's own child and nothing else in that segment.
        wait_for(lambda: [r["pid"] for j in c.status()["jobs"] if j["job"] == 42 for r in j["ranks"]] == [legit],
                 timeout=10, what="the manager to take the legitimate rank only")  # fmt: skip
        # Suspending the attacker's job (root's job expands to both CPUs, then shrinks again on resume):
        # the manager stops, continues and pins only what it verified (the legitimate child shows that
        # it does act).
        stopped_seen = False
        for _ in range(3):
            c.suspend(42)
            wait_for(lambda: proc_state(legit) == "T", timeout=5, what="the attacker's own rank stopped")
            stopped_seen = True
            assert proc_state(victim_pid_root) != "T" and proc_state(root_rank) != "T"
            time.sleep(0.1)
            c.resume(42)
            wait_for(lambda: proc_state(legit) != "T", timeout=5, what="the attacker's own rank continued")
        assert stopped_seen
        parts = c.partitions()
        assert os.sched_getaffinity(legit) <= set(parts[42])
        assert os.sched_getaffinity(victim_pid_root) == root_aff
        assert proc_state(victim_pid_root) != "T"
        assert os.sched_getaffinity(root_rank) <= set(parts[41])  # pinned for its own job, not the attacker's
        log = cfg.cpumanager_log.read_text()
        assert f"job 42 rank 0: ignoring pid {victim_pid_root}" in log
        assert f"job 42 rank 1: ignoring pid {root_rank}" in log
        assert f"rank {legit_rank}: ignoring" not in log
        # Rewriting its slot does not take a verified process out of the manager's hands (e.g. to
        # escape a suspension and keep running on CPUs given to others): both processes are stopped.
        other = attacker.do("evade", shm=cfg.shm_name, job=42, rank=legit_rank)["other"]
        wait_for(lambda: any(r["pid"] == other for j in c.status()["jobs"] if j["job"] == 42 for r in j["ranks"]),
                 timeout=10, what="the new process in the slot verified")  # fmt: skip
        c.suspend(42)
        wait_for(lambda: proc_state(legit) == "T" and proc_state(other) == "T", timeout=5, what="both stopped")
        c.resume(42)
        wait_for(lambda: proc_state(legit) != "T" and proc_state(other) != "T", timeout=5, what="both continued")
        # A flood of forged pids costs a bounded number of log lines (and of checks per quantum).
        quanta = c.status()["quanta"]
        flood = attacker.do("flood", shm=cfg.shm_name, job=42, rank=legit_rank + 1, n=400,
                            pids=[victim_pid_root, root_rank])  # fmt: skip
        assert flood["done"] == 400 and c.status()["quanta"] > quanta + 20
        assert os.sched_getaffinity(victim_pid_root) == root_aff and proc_state(victim_pid_root) != "T"
        log = cfg.cpumanager_log.read_text()
        assert log.count("job 42 rank") <= MAX_LOGGED_REFUSALS
        assert "further refusals for this job are not logged" in log

        # 3. The API, if the socket were open to users: every request about root's job or processes is refused.
        os.chmod(cfg.cpumanager_socket, 0o666)
        asked = attacker.do("ask", socket=str(cfg.cpumanager_socket), requests=[
            ["suspend", {"job": 41}], ["release", {"job": 41}], ["set_mpl", {"job": 41, "max_mpl": 1}],
            ["register", {"job": 41, "rank": 0, "pid": legit}], ["set_leader", {"job": 42, "pid": victim_pid_root}],
            ["admit", {"job": 43, "nranks": 1, "uid": 0}], ["queue_state", {"waiting": True}],
            ["forget", {"pid": root_rank}], ["register", {"job": 42, "rank": 3, "pid": victim_pid_root}],
        ])  # fmt: skip
        os.chmod(cfg.cpumanager_socket, 0o600)
        for op in ("suspend", "release", "set_mpl"):
            assert "belongs to uid 0" in asked[op], asked
        assert "only root may admit" in asked["admit"] and "only root" in asked["queue_state"], asked
        assert "not yours" in asked["set_leader"], asked
        assert "does not run as uid" in asked["register"] and "belongs to uid 0" in asked["forget"], asked
        assert 43 not in c.partitions()

        # 4. A truncated segment cannot make the root daemon fault (it reads with pread, never a load).
        assert attacker.do("truncate", shm=cfg.shm_name, job=42)["size"] == 0
        quanta = c.status()["quanta"]
        wait_for(lambda: c.status()["quanta"] > quanta + 20, timeout=10, what="the manager to keep running quanta")
        c.suspend(42)
        c.resume(42)
        assert cm.proc.poll() is None

        # Root's job was never stopped by anyone and completes with its verified result.
        out, _ = job.communicate(timeout=120)
        assert job.returncode == 0, out[-2000:]
        assert vmapp_result(out)["verified"] is True
        assert os.sched_getaffinity(victim_pid_root) == root_aff and proc_state(victim_pid_root) != "T"
        c.release(42)
    finally:
        attacker.stop()
        if job.poll() is None:
            end_job(job)
        c.close()
    # Both job segments are gone with their jobs.
    assert not [n for n in vmsched_shm_entries() if cfg.instance in n and ".j4" in n]


def test_a_rank_that_is_no_descendant_of_the_leader_is_ignored(shared_node: CpuManagerProcess, spawn) -> None:
    """Same user, but not the job's process tree: the manager does not act on it."""
    c = shared_node.client()
    leader = spawn("sleep", "120")
    outsider = spawn("sleep", "120")
    before = os.sched_getaffinity(outsider.pid)
    c.admit(7, nranks=2, max_mpl=2, queue="local", leader_pid=leader.pid)
    from vmsched.protocol import ProtocolError

    with pytest.raises(ProtocolError, match="does not descend from the job's leader"):
        c.register(7, 0, outsider.pid)
    c.suspend(7)
    assert proc_state(outsider.pid) != "T" and os.sched_getaffinity(outsider.pid) == before
    c.resume(7)
    # The leader's end ends the job.
    leader.send_signal(signal.SIGKILL)
    leader.wait()
    wait_for(lambda: 7 not in c.partitions(), timeout=5, what="the job to end with its leader")
    c.close()


def test_a_rank_that_maps_a_segment_named_in_bytes_not_utf8_registers_and_its_segment_goes_with_its_job(
    shared_node: CpuManagerProcess, spawn
) -> None:
    """A rank's maps are read when it registers (its MPICH segment, to remove if the job is killed): a
    name in bytes that are not UTF-8, which any user may give a file in /dev/shm, is a name like another
    (it used to fail the registration with an internal error, and the runtime's supervisor with it)."""
    from tests.test_supervisor import MAPPER

    name = b"/dev/shm/mpich_shm_\xff\xfe_vmsec%d" % os.getpid()
    # The job's leader (a shell, as mpiexec) and its one rank, which maps the segment.
    leader = spawn("sh", "-c", '"$@"; :', "sh", sys.executable, "-c", MAPPER, "0", name.hex(),
                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert leader.stdout.readline() == b"mapped\n"
        (rank,) = psutil.Process(leader.pid).children()
        c = shared_node.client()
        c.admit(8, nranks=1, max_mpl=1, queue="local", leader_pid=leader.pid)
        c.register(8, 0, rank.pid)
        assert c.partitions()[8] and shared_node.proc.poll() is None
        rank.kill()  # the job is killed: MPI_Finalize never removes the segment
        leader.wait()
        wait_for(lambda: 8 not in c.partitions(), timeout=5, what="the job to end with its leader")
        c.close()
        assert not os.path.exists(name)  # removed by the manager, as the MPICH segment of a killed job
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def test_a_table_planted_by_a_user_is_not_adopted(tmp_path: Path) -> None:
    """A node table that a user created under the manager's name while no manager ran (valid magic,
    writable by that user) is removed, not recovered: the manager creates its own."""
    nobody = pwd.getpwnam("nobody")
    cm = CpuManagerProcess(tmp_path / "state")
    path = Path("/dev/shm") / cm.cfg.shm_name.lstrip("/")
    fake = L.Segment()
    fake.header.magic, fake.header.version, fake.header.ncpus = L.MAGIC, L.VERSION, 2
    fake.jobs[0].job_id, fake.jobs[0].state, fake.jobs[0].nranks, fake.jobs[0].uid = 9, L.JOB_RUNNING, 1, 0
    path.write_bytes(bytes(fake))
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    path.chmod(0o666)
    try:
        cm.start()
        st = path.stat()
        assert (st.st_uid, oct(st.st_mode & 0o777)) == (0, "0o644")
        c = cm.client()
        assert c.status()["jobs"] == []  # the planted job was not taken over
        c.close()
        assert "no table of this manager: removing it" in cm.cfg.cpumanager_log.read_text()
    finally:
        cm.stop()
        path.unlink(missing_ok=True)
