"""vmruntime robustness: a dead or stopped CPU manager never hangs a job, a dead rank fails its job
promptly, and nothing (processes, stopped ranks, shared memory) is left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, wait_for
from vmsched.protocol import ProtocolError
from vmsched.vmruntime.shmclean import shm_segments
from vmsched.vmruntime.testing import (
    Manager,
    compile_c_program,
    descendants,
    end_job,
    job_ranks,
    node_table,
    rank_pids,
    read_stats,
    sample,
    selftest_cmd,
    shm_entries,
    vmrun_cmd,
)

SIBLING = 93
WORKLOAD = selftest_cmd("send", "--variant", "50x2", "--iters", "40", "--work", "5")


@pytest.fixture
def manager() -> Iterator[Manager]:
    m = Manager(cpus="0-1")
    m.start()
    yield m
    m.stop()
    assert shm_entries(m.cfg) == []
    if m._tmp is not None:
        m._tmp.cleanup()


def start_folded(m: Manager, **env: str) -> subprocess.Popen[str]:
    """4 ranks on one CPU (a sibling job holds the other), blocked and woken by the runtime."""
    with m.client() as c:
        c.admit(SIBLING, 1, 1, queue="local")
    proc = subprocess.Popen(vmrun_cmd(m.state_dir, 4, 4, WORKLOAD, queue="local"), env={**m.env(), **env}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ss = [s for s in (sample(p) for p in rank_pids(proc.pid)) if s]
        if len(ss) == 4 and all(len(s.affinity) == 1 for s in ss):
            time.sleep(0.3)  # well inside the compute/exchange loop
            return proc
        time.sleep(0.01)
    proc.kill()
    pytest.fail("the job did not start folded")


def assert_nothing_left(proc: subprocess.Popen[str], kids: list[psutil.Process]) -> None:
    for k in kids:
        try:
            st = k.status()
        except psutil.NoSuchProcess:
            continue
        pytest.fail(f"process {k.pid} ({k.name()}) left behind in state {st}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_job_completes_when_the_manager_goes(manager: Manager, sig: int, tmp_path: Path) -> None:
    stats = tmp_path / "stats.jsonl"
    proc = start_folded(manager, VMRT_STATS=str(stats))
    kids = descendants(proc.pid)
    manager.kill(sig)  # SIGKILL: a crash (no shutdown flag); SIGTERM: orderly shutdown
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["ok"]
    assert_nothing_left(proc, kids)
    # Every rank noticed and went on as plain MPI (unpinned, never blocked by the runtime again).
    why = "CPU manager died" if sig == signal.SIGKILL else "CPU manager shut down"
    assert [s["off"] for s in read_stats(stats)] == [why] * 4


def test_killed_rank_fails_the_job_promptly(manager: Manager) -> None:
    proc = start_folded(manager)
    kids = descendants(proc.pid)
    ranks = rank_pids(proc.pid)
    segments = shm_segments(proc.pid)
    assert segments, "the ranks map MPICH's segments"
    victim = ranks[1]
    t0 = time.monotonic()
    psutil.Process(victim).send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode != 0
    assert took < 5.0, f"the job took {took:.1f} s to fail"
    time.sleep(0.2)
    assert_nothing_left(proc, kids)
    assert [j["job"] for j in manager.status()["jobs"]] == [SIBLING]  # the job was released
    assert not [p for p in segments if os.path.exists(p)]  # vmrun removed what the killed ranks left


def test_job_runs_plain_without_a_table(tmp_path) -> None:
    """VMSCHED_* pointing at no table: the preloaded ranks run as plain MPI."""
    from vmsched.vmruntime.build import library_path
    from vmsched.vmruntime.testing import mpiexec, read_stats

    stats = tmp_path / "s.jsonl"
    cmd = [mpiexec(), "-n", "2", "-genv", "LD_PRELOAD", str(library_path()), "-genv", "VMSCHED_SHM",
           "/vmsched.none", "-genv", "VMSCHED_LOCK", "/vmsched.none.lock", "-genv", "VMSCHED_JOB", "5",
           "-genv", "VMRT_STATS", str(stats), *selftest_cmd("ring", "--laps", "20")]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert {s["mode"] for s in read_stats(stats)} == {"plain"}


DEAD_HOLDER = """
import os, sys
from mpi4py import MPI
c = MPI.COMM_WORLD
sub = c.Split(0 if c.rank < 3 else MPI.UNDEFINED, c.rank)
c.Barrier()
if c.rank == 3:
    x = 0
    for i in range(300000):  # compute while holding the CPU's only token, then vanish
        x += i
    os._exit(0)
for i in range(200):
    sub.allreduce(i)
print("done", c.rank, flush=True)
"""


def test_token_of_a_dead_holder_is_reclaimed(manager: Manager, tmp_path) -> None:
    """Rank 3 dies holding the only token; the others must get it back and finish their work.
    (hydra would kill the job at once; -disable-auto-cleanup keeps the survivors running.)"""
    from vmsched.vmruntime.build import library_path
    from vmsched.vmruntime.testing import mpiexec, read_stats
    from vmsched.vmruntime.vmrun import job_environment

    prog = tmp_path / "dead_holder.py"
    prog.write_text(DEAD_HOLDER)
    with manager.client() as c:
        c.admit(SIBLING, 1, 1, queue="local")
        c.admit(5, 4, 4, queue="local")
    env = job_environment(manager.cfg, 5, manager.env())
    env["VMRT_STATS"] = str(tmp_path / "stats.jsonl")
    proc = subprocess.Popen([mpiexec(), "-disable-auto-cleanup", "-n", "4", "-genv", "LD_PRELOAD",
                             str(library_path()), sys.executable, str(prog)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(read_stats(tmp_path / "stats.jsonl")) < 3:
            time.sleep(0.05)
        stats = read_stats(tmp_path / "stats.jsonl")
        assert sorted(s["rank"] for s in stats) == [0, 1, 2], "the survivors did not finish"
        assert sum(s["reclaimed"] for s in stats) == 1
    finally:
        # MPICH's own MPI_Finalize now waits for the dead rank forever; end the job.
        end_job(proc)
        with manager.client() as c, contextlib.suppress(ProtocolError):
            c.release(5)  # the manager may have released it already (all its ranks are gone)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["int", "term"])
def test_signal_to_vmrun_ends_the_job(manager: Manager, sig: int) -> None:
    """Ctrl-C or SIGTERM to vmrun ends a folded job within the grace period, leaving nothing behind
    (a rank interrupted in Python goes to MPI_Finalize while its peers wait for it inside MPI; vmrun
    kills what has not ended after [jobs] kill_grace_s)."""
    grace = manager.cfg.jobs.kill_grace_s
    proc = start_folded(manager)
    kids = descendants(proc.pid)
    segments = shm_segments(proc.pid)
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    took = time.monotonic() - t0
    assert proc.returncode != 0
    assert took < grace + 3.0, f"the job took {took:.1f} s to end"
    time.sleep(0.2)
    assert_nothing_left(proc, kids)
    assert [j["job"] for j in manager.status()["jobs"]] == [SIBLING]
    assert not [p for p in segments if os.path.exists(p)]


IGNORES_SIGINT = """
import signal, time
from mpi4py import MPI
signal.signal(signal.SIGINT, signal.SIG_IGN)
MPI.COMM_WORLD.Barrier()
time.sleep(120)
"""


def ignores_sigint(pid: int) -> bool:
    """Whether the process ignores SIGINT now (bit SIGINT - 1 of /proc/PID/status's SigIgn)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(int(x.split()[1], 16) for x in text.splitlines() if x.startswith("SigIgn:"))
    return bool(mask >> (signal.SIGINT - 1) & 1)


def test_job_that_ignores_the_signal_is_killed_after_the_grace_period(manager: Manager, tmp_path: Path) -> None:
    grace = manager.cfg.jobs.kill_grace_s

    prog = tmp_path / "ignores_sigint.py"
    prog.write_text(IGNORES_SIGINT)
    proc = subprocess.Popen(vmrun_cmd(manager.state_dir, 4, 2, [sys.executable, str(prog)]), env=manager.env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    # Until every rank ignores SIGINT (its SigIgn mask), not a set time after they start: CI's first part
    # (two workers) sent it 0.5 s after the 4 ranks appeared, before they had imported mpi4py, and they ended
    # at once (0.72 s, 2026-12-06).
    wait_for(lambda: len(pids := rank_pids(proc.pid)) == 4 and all(ignores_sigint(p) for p in pids), timeout=30,
             interval=0.05, what="the 4 ranks to ignore SIGINT")  # fmt: skip
    kids = descendants(proc.pid)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    took = time.monotonic() - t0
    assert proc.returncode != 0
    assert grace <= took < grace + 3.0
    time.sleep(0.2)
    assert_nothing_left(proc, kids)  # not even zombies: hydra reaped its ranks
    assert manager.status()["jobs"] == []


def test_processes_started_by_comm_spawn_leave_the_jobs_slots_alone_and_stay_on_its_cpus(
    manager: Manager, tmp_path: Path
) -> None:
    """tests/c/spawn.c: a job of 4 ranks on one CPU (a sibling job holds the other) spawns 4 workers of
    its own program, which pass a token round a ring of their own and send their sum back. A worker's
    MPI_COMM_WORLD has the job's size, so worker r registered in slot r, over the rank that held it: the
    CPU manager then tracked the worker and lost the rank, and the workers ran on every CPU of the node.
    Spawned processes now run unfolded, as plain MPI pinned to the job's CPUs, and say so."""
    exe = compile_c_program(REPO / "tests" / "c" / "spawn.c", tmp_path)
    job = 61
    with manager.client() as c:
        c.admit(SIBLING, 1, 1, queue="local")
    proc = subprocess.Popen(vmrun_cmd(manager.state_dir, 4, 4, [str(exe), "4", "300"], queue="local", job_id=job),
                            env=manager.env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    slots: dict[int, set[int]] = {}
    programs: dict[int, tuple[int, ...]] = {}  # pid of every process of the program seen -> its affinity
    partition: tuple[int, ...] = ()
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(ValueError, OSError):  # the job's entry comes and goes with it
                for e in job_ranks(manager.cfg.shm_name, job):
                    slots.setdefault(e.rank, set()).add(e.pid)
                j = next((j for j in node_table(manager.cfg.shm_name).jobs if j.job_id == job and j.state), None)
                partition = tuple(sorted(j.cpus[: j.ncpus])) if j is not None else partition
            for p in descendants(proc.pid):
                with contextlib.suppress(psutil.Error):
                    if p.exe() == str(exe):
                        programs[p.pid] = tuple(sorted(p.cpu_affinity()))
            time.sleep(0.005)
        out, err = proc.communicate(timeout=30)
    finally:
        end_job(proc)
    assert proc.returncode == 0 and json.loads(out) == {"ok": True, "workers": 4, "rounds": 300}, err[-2000:]
    assert "MPI_Comm_spawn" in err
    owners = {r: pids - {0} for r, pids in slots.items()}
    assert sorted(owners) == [0, 1, 2, 3] and all(len(p) == 1 for p in owners.values()), owners
    ranks = set().union(*owners.values())
    workers = {pid: aff for pid, aff in programs.items() if pid not in ranks}
    assert len(partition) == 1 and len(workers) == 4, (partition, programs, owners)
    assert all(aff == partition for aff in workers.values()), (partition, workers)
