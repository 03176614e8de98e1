"""The CPU-manager daemon for real: real processes, real affinity, real shared memory."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from tests.conftest import BIN, CpuManagerProcess, vmsched_shm_entries, wait_for
from vmsched.cpumanager import shm_layout as L
from vmsched.cpumanager.processes import cpu_idle_s
from vmsched.cpumanager.table import SharedTable
from vmsched.protocol import MAX_REQUEST_BYTES, ProtocolError


def sleepers(spawn, n: int) -> list[subprocess.Popen]:
    return [spawn("sleep", "120") for _ in range(n)]


def affinities(procs) -> list[set[int]]:
    return [os.sched_getaffinity(p.pid) for p in procs]


def proc_state(pid: int) -> str:
    data = Path(f"/proc/{pid}/stat").read_text()
    return data[data.rfind(")") + 2]


def test_two_folded_jobs_shrink_and_expand(cpumanager, spawn):
    c = cpumanager.client()
    assert c.admit(1, nranks=4, max_mpl=4, queue="local") == [0, 1]
    a = sleepers(spawn, 4)
    for r, p in enumerate(a):
        c.register(1, r, p.pid)
    # Local queues: rank r on partition[r mod P].
    assert affinities(a) == [{0}, {1}, {0}, {1}]

    assert c.admit(2, nranks=4, max_mpl=4, queue="local") == [1]
    b = sleepers(spawn, 4)
    for r, p in enumerate(b):
        c.register(2, r, p.pid)
    assert c.partitions() == {1: [0], 2: [1]}
    assert affinities(a) == [{0}] * 4
    assert affinities(b) == [{1}] * 4
    st = {j["job"]: j for j in c.status()["jobs"]}
    assert (st[1]["mpl"], st[2]["mpl"]) == (4, 4)

    for p in b:
        p.kill()
    for p in b:
        p.wait()
    gone = c.status()["quanta"]  # at or after the quantum in which the last rank exited
    wait_for(lambda: c.partitions() == {1: [0, 1]}, what="job 1 to expand after job 2 ended")
    changed = next(j for j in c.status()["jobs"] if j["job"] == 1)["changed_quantum"]
    assert changed - gone <= 2, f"expansion took {changed - gone} quanta after the ranks were gone"
    assert affinities(a) == [{0}, {1}, {0}, {1}]


def test_global_queue_pins_to_whole_partition(cpumanager, spawn):
    c = cpumanager.client()
    c.admit(7, nranks=3, max_mpl=3, queue="global")
    ps = sleepers(spawn, 3)
    for r, p in enumerate(ps):
        c.register(7, r, p.pid)
    assert affinities(ps) == [{0, 1}] * 3
    c.admit(8, nranks=1, max_mpl=1, queue="global")
    assert c.partitions() == {7: [0], 8: [1]}
    assert affinities(ps) == [{0}] * 3


def test_queue_waiting_blocks_expansion(cpumanager, spawn):
    c = cpumanager.client()
    c.admit(1, nranks=2, max_mpl=2, queue="local")
    c.admit(2, nranks=2, max_mpl=2, queue="local")
    assert c.partitions() == {1: [0], 2: [1]}
    c.set_queue_waiting(True)
    c.release(2)
    assert c.partitions() == {1: [0]}, "no expansion while jobs wait"
    assert c.free()["idle"] == 1
    c.set_queue_waiting(False)
    assert c.partitions() == {1: [0, 1]}


def test_set_max_mpl_and_leader(cpumanager, spawn):
    c = cpumanager.client()
    c.admit(1, nranks=2, max_mpl=1, queue="local")
    with pytest.raises(ProtocolError, match="cannot admit job 2"):
        c.admit(2, nranks=1, max_mpl=1)
    assert c.set_max_mpl(1, 2) == [0, 1]  # may fold now, but nobody needs the CPU yet
    assert c.admit(2, nranks=1) == [1]
    assert c.partitions() == {1: [0], 2: [1]}
    leader = spawn("sleep", "120")
    c.set_leader(2, leader.pid)
    leader.kill()
    leader.wait()
    wait_for(lambda: c.partitions() == {1: [0, 1]}, what="the job to end with its leader")


def test_suspend_resume_and_no_stopped_rank_after_exit(tmp_path, spawn):
    cm = CpuManagerProcess(tmp_path / "s").start()
    c = cm.client()
    c.admit(3, nranks=2, max_mpl=2, queue="local")
    ps = sleepers(spawn, 2)
    for r, p in enumerate(ps):
        c.register(3, r, p.pid)
    assert c.suspend(3) == 2
    wait_for(lambda: all(proc_state(p.pid) == "T" for p in ps), what="ranks to stop")
    # A suspended job holds no CPUs: another job may take them, and it must fit again to resume.
    assert c.partitions() == {3: []}
    assert c.admit(4, nranks=2, max_mpl=1) == [0, 1]
    with pytest.raises(ProtocolError, match="cannot resume job 3"):
        c.resume(3)
    assert all(proc_state(p.pid) == "T" for p in ps)
    c.release(4)
    assert c.resume(3) == 2
    assert c.partitions() == {3: [0, 1]}
    wait_for(lambda: all(proc_state(p.pid) == "S" for p in ps), what="ranks to continue")
    with pytest.raises(ProtocolError, match="not suspended"):
        c.resume(3)
    c.suspend(3)
    wait_for(lambda: all(proc_state(p.pid) == "T" for p in ps), what="ranks to stop")
    assert cm.stop() == 0
    # A clean exit continues every rank it stopped and removes its shared memory.
    wait_for(lambda: all(proc_state(p.pid) == "S" for p in ps), what="ranks continued at daemon exit")
    assert not any(cm.cfg.instance in n for n in vmsched_shm_entries())
    assert not cm.cfg.cpumanager_socket.exists()


def test_bad_requests_get_errors_and_change_nothing(cpumanager, spawn):
    c = cpumanager.client()
    c.admit(1, nranks=4, max_mpl=2, queue="local")
    before = c.status()["jobs"]
    cases = {
        "cannot admit job 2": lambda: c.admit(2, nranks=4, max_mpl=1),
        "already admitted": lambda: c.admit(1, nranks=1),
        "unknown job 99": lambda: c.release(99),
        "unknown job 98": lambda: c.suspend(98),
        "must be >= 1": lambda: c.admit(3, nranks=0),
        "must be an integer": lambda: c.call("admit", job="x", nranks=1),
        "missing argument 'nranks'": lambda: c.call("admit", job=5),
        "must be one of": lambda: c.call("admit", job=5, nranks=1, queue="sideways"),
        "unknown op 'explode'": lambda: c.call("explode"),
        "no process": lambda: c.register(1, 0, 2**22 + 12345),
        "rank 9 out of range": lambda: c.register(1, 9, os.getpid()),
        "'waiting' must be true or false": lambda: c.call("queue_state", waiting="yes"),
        "'one_shot' must be true or false": lambda: c.call("admit", job=6, nranks=1, one_shot=1),
    }
    for needle, call in cases.items():
        with pytest.raises(ProtocolError, match=needle):
            call()
    raw = {
        b"not json at all": "not valid JSON",
        b"\xff\xfe\x00garbage": "not valid JSON",
        b"[1, 2, 3]": 'string "op"',
        b'{"op": 5}': 'string "op"',
        b'{"op": "admit", "job": ' + b"9" * (MAX_REQUEST_BYTES + 10) + b"}": "request too large",
    }
    for payload, needle in raw.items():
        reply = c.request_raw(payload)
        assert reply["ok"] is False and needle in reply["error"], (payload[:40], reply)
    # A multipart message is an error too, and the daemon keeps serving.
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 5000)
    s.connect(f"ipc://{cpumanager.cfg.cpumanager_socket}")
    s.send_multipart([b'{"op": "status"}', b"extra"])
    assert "one message frame" in json.loads(s.recv())["error"]
    s.close()
    # Raw bytes that are not even a ZMTP handshake must neither kill nor wedge the daemon.
    for _ in range(10):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
            u.connect(str(cpumanager.cfg.cpumanager_socket))
            u.sendall(os.urandom(4096))
        assert c.status()["jobs"] == before
    assert cpumanager.proc.poll() is None


def test_restart_after_sigkill_recovers_table(tmp_path, spawn):
    cm = CpuManagerProcess(tmp_path / "s").start()
    c = cm.client()
    c.admit(1, nranks=4, max_mpl=4, queue="local")
    c.admit(2, nranks=2, max_mpl=2, queue="global")
    a, b = sleepers(spawn, 4), sleepers(spawn, 2)
    for r, p in enumerate(a):
        c.register(1, r, p.pid)
    for r, p in enumerate(b):
        c.register(2, r, p.pid)
    parts = c.partitions()
    assert parts == {1: [0], 2: [1]}
    pins = affinities(a + b)
    c.close()
    cm.kill(signal.SIGKILL)
    # The processes keep running, pinned as they were, while no manager runs.
    assert all(p.poll() is None for p in a + b)
    assert affinities(a + b) == pins

    cm2 = CpuManagerProcess(tmp_path / "s").start()
    c2 = cm2.client()
    assert c2.partitions() == parts
    st = {j["job"]: j for j in c2.status()["jobs"]}
    assert sorted(r["pid"] for r in st[1]["ranks"]) == sorted(p.pid for p in a)
    assert affinities(a + b) == pins
    # It keeps managing: job 2's ranks end -> job 1 expands.
    for p in b:
        p.kill()
        p.wait()
    wait_for(lambda: c2.partitions() == {1: [0, 1]}, what="recovered manager to reclaim CPUs")
    assert affinities(a) == [{0}, {1}, {0}, {1}]
    assert cm2.stop() == 0
    assert not any(cm2.cfg.instance in n for n in vmsched_shm_entries())


def test_failing_requests_and_quanta_are_logged_and_the_daemon_goes_on(tmp_path, spawn):
    """Test-only fault injection: two handlers and three quanta raise. Each failing request gets an
    error reply, each failure is logged with its traceback, quanta go on, the job keeps its partition
    and its ranks stay pinned; the table goes only at the orderly stop."""
    env = {**os.environ, "VMSCHED_CPUMANAGER_FAULTS": "handler=free,set_mpl;quantum=20,21,40"}
    cm = CpuManagerProcess(tmp_path / "s", env=env).start()
    c = cm.client()
    c.admit(1, nranks=2, max_mpl=2, queue="local")
    a = sleepers(spawn, 2)
    for r, p in enumerate(a):
        c.register(1, r, p.pid)
    assert affinities(a) == [{0}, {1}]
    for call in (c.free, lambda: c.set_max_mpl(1, 1)):
        with pytest.raises(ProtocolError, match="internal error in '(free|set_mpl)': injected fault"):
            call()
    wait_for(lambda: c.status()["quanta"] > 45, what="quanta to go on past the failing ones")
    assert c.partitions() == {1: [0, 1]} and affinities(a) == [{0}, {1}]
    # Still acting: a new job makes job 1 shrink and re-pins its ranks.
    c.admit(2, nranks=1, max_mpl=1, queue="local")
    assert c.partitions() == {1: [0], 2: [1]} and affinities(a) == [{0}, {0}]
    log = cm.cfg.cpumanager_log.read_text()
    for needle in ("request 'free' failed", "request 'set_mpl' failed", "quantum 20 failed", "quantum 21 failed",
                   "quantum 40 failed", "Traceback", "InjectedFault: injected fault in quantum 40"):  # fmt: skip
        assert needle in log, needle
    assert "quantum 22 failed" not in log
    assert cm.proc.poll() is None and cm.stop() == 0
    assert not any(cm.cfg.instance in n for n in vmsched_shm_entries())


def test_fault_injection_is_off_by_default_and_refuses_nonsense(tmp_path):
    from vmsched.cpumanager.manager import Faults, parse_faults

    assert parse_faults(None) == Faults() and parse_faults("") == Faults()
    assert parse_faults("handler=a,b;quantum=3") == Faults(frozenset({"a", "b"}), frozenset({3}))
    with pytest.raises(ValueError, match="VMSCHED_CPUMANAGER_FAULTS: cannot parse 'pass=3'"):
        parse_faults("pass=3")
    env = {**os.environ, "VMSCHED_CPUMANAGER_FAULTS": "quantum=soon"}
    r = subprocess.run([str(BIN / "vm-cpumanager"), "--state-dir", str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=30)  # fmt: skip
    assert r.returncode == 2 and "cannot parse 'quantum=soon'" in r.stderr


def test_second_manager_on_same_state_refuses(cpumanager):
    r = subprocess.run([str(BIN / "vm-cpumanager"), "--state-dir", str(cpumanager.state_dir), "--cpus", "0-1"],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert r.returncode == 1
    assert "already runs" in r.stderr
    assert cpumanager.client().call("ping")["pid"] == cpumanager.proc.pid


def test_bad_options_exit_nonzero(tmp_path):
    for args, needle in ((["--cpus", "5-2"], "bad CPU list"), (["--cpus", "0-999"], "not available"),
                         (["--quantum-ms", "0"], "quantum_ms must be > 0")):  # fmt: skip
        r = subprocess.run([str(BIN / "vm-cpumanager"), "--state-dir", str(tmp_path), *args],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)
    bad = tmp_path / "bad.toml"
    bad.write_text("[cpumanager]\nquantum = 3\n")
    r = subprocess.run([str(BIN / "vm-cpumanager"), "--config", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown option [cpumanager] quantum" in r.stderr


def test_vmcpu_status_view(cpumanager, spawn):
    c = cpumanager.client()
    c.admit(4, nranks=4, max_mpl=2, queue="local", placement="block")
    env = {**os.environ, "VMSCHED_STATE_DIR": str(cpumanager.state_dir)}
    r = subprocess.run([str(BIN / "vmcpu"), "--json"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert [(j["job"], j["cpus"], j["mpl"], j["queue"], j["placement"]) for j in st["jobs"]] == \
        [(4, [0, 1], 2, "local", "block")]  # fmt: skip
    r = subprocess.run([str(BIN / "vmcpu")], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0 and "local, block" in r.stdout and "0:4" in r.stdout
    r = subprocess.run([str(BIN / "vmcpu"), "--state-dir", str(cpumanager.state_dir / "nowhere")],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert r.returncode == 1 and "is the CPU manager running" in r.stderr


def test_c_header_matches_ctypes_layout(tmp_path):
    """The runtime's C view of the table must match the manager's, field by field."""
    (tmp_path / "vm_shm.h").write_text(L.c_header())
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "vm_shm.h"', "int main(void) {"]
    expect = []
    for cname, struct in L.ALL_C_STRUCTS.items():
        lines.append(f'printf("%zu\\n", sizeof({cname}));')
        expect.append(__import__("ctypes").sizeof(struct))
        for name, _ in struct._fields_:
            lines.append(f'printf("%zu\\n", offsetof({cname}, {name}));')
            expect.append(getattr(struct, name).offset)
    # The protocol constants too: generated from the same definition.
    constants = (
        "WAKE_WAIT WAKE_RUN WAKE_SLEEP WAKE_YIELD YIELD_WAIT_US YIELD_WAIT_MAX_AVG_US LOCK_TIMEOUT_S WAKE_MS "
        "MAX_RANKS NAME_LEN RANK_WAITING RFLAG_SCHEDULED"
    )
    for name in constants.split():
        lines.append(f'printf("%llu\\n", (unsigned long long)VM_{name});')
        expect.append(getattr(L, name))
    lines.append("return 0; }")
    (tmp_path / "check.c").write_text("\n".join(lines))
    subprocess.run(["cc", "-o", str(tmp_path / "check"), str(tmp_path / "check.c")], check=True, timeout=60)
    out = subprocess.run([str(tmp_path / "check")], capture_output=True, text=True, check=True).stdout
    assert [int(x) for x in out.split()] == expect
    assert L.segment_size() == __import__("ctypes").sizeof(L.Segment)


def test_table_full_and_attach_errors(tmp_path):
    from vmsched.cpumanager.table import TableError

    with pytest.raises(TableError, match="is the CPU manager running"):
        SharedTable.attach("/vmsched.test-missing", "/vmsched.test-missing.lock")
    t = SharedTable.create("/vmsched.test-cap", "/vmsched.test-cap.lock", (0, 1), 10_000)
    try:
        # Every write goes through the table's methods, under its lock.
        with pytest.raises(TableError, match="without its lock"):
            t.add_job(1, 1, 1, L.QUEUE_LOCAL, 0, 0, 0, lbd=False)
        with pytest.raises(TableError, match="without its lock"):
            t.set_queue_waiting(True)
        assert oct(os.stat("/dev/shm/vmsched.test-cap").st_mode & 0o777) == "0o644"
        assert oct(os.stat("/dev/shm/sem.vmsched.test-cap.lock").st_mode & 0o777) == "0o600"
        with t.locked():
            for i in range(L.MAX_JOBS):
                t.add_job(i + 1, 1, 1, L.QUEUE_LOCAL, 0, 0, 0, lbd=False)
            with pytest.raises(Exception, match="job table full"):
                t.add_job(10_000, 1, 1, L.QUEUE_LOCAL, 0, 0, 0, lbd=False)
    finally:
        t.unlink()
        t.close()


def test_idle_time_of_a_cpu_stands_still_while_a_process_keeps_it_busy(spawn):
    """The LBD's trials charge a job for the CPUs of its partition that stand idle (proc.cpu_idle_s):
    a CPU that a spinning process holds gains no idle time, and every CPU of the node is read."""
    cpu = max(os.sched_getaffinity(0))
    spin = spawn(sys.executable, "-c", "while True: pass")
    os.sched_setaffinity(spin.pid, {cpu})
    time.sleep(0.3)  # started and spinning
    before = cpu_idle_s()
    time.sleep(0.6)
    after = cpu_idle_s()
    assert os.sched_getaffinity(0) <= set(before) and set(before) == set(after)
    assert all(after[c] >= before[c] for c in before)
    assert after[cpu] - before[cpu] <= 0.05  # one tick of rounding at each end, not the 0.6 s it was busy


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
