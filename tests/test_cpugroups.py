"""A CPU cgroup per job (vmsched/cpumanager/cpugroups.py): the parsing, and a real manager moving the
verified ranks of a real folded job into its job's group, only those, and removing the groups again."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import CpuManagerProcess, wait_for
from vmsched.cpumanager.cpugroups import CpuGroups, Hierarchy, cpu_group_of, find_hierarchy
from vmsched.vmruntime.testing import end_job, rank_pids, selftest_cmd, vmrun_cmd

V1 = """\
25 1 0:23 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
26 25 0:24 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
27 25 0:25 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 25 0:33 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_JOINED = "30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
V2 = "35 1 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
CONTAINER = "400 390 0:24 /docker/4f2a /sys/fs/cgroup/cpu ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
SPACED = "26 25 0:24 / /mnt/cg\\040cpu rw - cgroup cgroup rw,cpuacct,cpu\n"


def test_the_hierarchy_with_the_cpu_controller_is_found_in_mountinfo() -> None:
    assert find_hierarchy(V1) == Hierarchy(Path("/sys/fs/cgroup/cpu"), 1, "/")
    assert find_hierarchy(V1_JOINED) == Hierarchy(Path("/sys/fs/cgroup/cpu,cpuacct"), 1, "/")
    assert find_hierarchy(V1, v2_has_cpu=True).version == 1  # a v1 cpu hierarchy holds the controller
    assert find_hierarchy(V2) is None  # the unified hierarchy only where its root offers cpu
    assert find_hierarchy(V2, v2_has_cpu=True) == Hierarchy(Path("/sys/fs/cgroup"), 2, "/")
    assert find_hierarchy(CONTAINER) == Hierarchy(Path("/sys/fs/cgroup/cpu"), 1, "/docker/4f2a")
    assert find_hierarchy(SPACED) == Hierarchy(Path("/mnt/cg cpu"), 1, "/")
    assert find_hierarchy("") is None
    assert find_hierarchy("garbage\n - \n1 2 3\n") is None


def test_a_process_group_in_the_cpu_hierarchy_is_read_from_proc_cgroup() -> None:
    v1 = "9:name=systemd:/\n4:memory:/x\n1:cpu:/\n0::/\n"
    assert cpu_group_of(v1, 1) == "/"
    assert cpu_group_of("3:cpu,cpuacct:/slurm/uid_0/job_7/step_0\n", 1) == "/slurm/uid_0/job_7/step_0"
    assert cpu_group_of("2:cpuset:/\n", 1) is None  # cpuset is not cpu
    session = "/user.slice/user-1000.slice/session-3.scope"
    assert cpu_group_of(f"0::{session}\n", 2) == session
    assert cpu_group_of(v1, 2) == "/"
    assert cpu_group_of("nonsense", 1) is None


def groups_of(cm: CpuManagerProcess) -> CpuGroups:
    g = CpuGroups.detect(cm.cfg.instance)
    assert g.available, f"this node must offer the cgroup cpu controller to root: {g.why_not}"
    return g


def group(pid: int) -> str | None:
    g = CpuGroups.detect("x")
    return g.group_of(pid)


def start_job(cm: CpuManagerProcess, job_id: int, prefix: list[str] | None = None) -> subprocess.Popen[str]:
    """4 ranks folded on one CPU: a ring long enough to look at."""
    cmd = vmrun_cmd(cm.state_dir, 4, 4, selftest_cmd("ring", "--laps", "400000"), queue="local", job_id=job_id)
    return subprocess.Popen([*(prefix or []), *cmd], env=cm.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def verified(cm: CpuManagerProcess, job_id: int, n: int) -> bool:
    return any(j["job"] == job_id and j["registered"] == n for j in cm.status()["jobs"])


def grouped_ranks(cm: CpuManagerProcess, job: subprocess.Popen[str], job_id: int) -> list[int]:
    """Wait until the manager has verified the job's 4 ranks and moved them into the job's group."""
    wait_for(lambda: len(rank_pids(job.pid)) == 4 and verified(cm, job_id, 4), timeout=30, what="4 verified ranks")
    ranks = rank_pids(job.pid)
    own = f"/{cm.cfg.instance}/job-{job_id}"
    wait_for(lambda: all(group(p) == own for p in ranks), timeout=5, what="the ranks in the job's group")
    return ranks


def grouping(state: Path) -> Path:
    """A state directory whose config switches job CPU groups on (off by default)."""
    state.mkdir(parents=True, exist_ok=True)
    (state / "vmsched.toml").write_text("[cpumanager]\njob_cpu_groups = true\n")
    return state


@pytest.fixture
def node(tmp_path: Path):
    cm = CpuManagerProcess(grouping(tmp_path / "state"), "0").start()
    yield cm
    cm.stop()


def test_the_ranks_of_a_job_share_its_cpu_group_which_goes_with_the_job(node: CpuManagerProcess) -> None:
    g = groups_of(node)
    assert node.status()["cpu_groups"] == f"cgroup v{g.hierarchy.version} {g.base}"
    job = start_job(node, 31)
    try:
        grouped_ranks(node, job, 31)
        assert [j["cpu_group"] for j in node.status()["jobs"]] == [True]
        assert (g.base / "job-31").is_dir()
        # Only the ranks: vmrun, mpiexec and hydra's proxy stay where they were.
        assert group(job.pid) == "/" and group(os.getpid()) == "/"
        job.send_signal(signal.SIGTERM)
        job.communicate(timeout=30)
    finally:
        end_job(job)
    wait_for(lambda: not (g.base / "job-31").exists(), timeout=5, what="the job's group removed with the job")
    assert g.base.is_dir()
    node.stop()
    assert not g.base.exists(), "an orderly stop removes the manager's directory"


def test_ranks_grouped_by_someone_else_are_left_there(node: CpuManagerProcess) -> None:
    """A Slurm step or a systemd unit with CPU accounting groups its processes already: never moved."""
    g = groups_of(node)
    theirs = g.hierarchy.mount / f"vmtest-foreign-{uuid.uuid4().hex[:8]}"
    theirs.mkdir()
    try:
        job = start_job(node, 32, ["sh", "-c", f'echo $$ > {theirs}/cgroup.procs && exec "$@"', "sh"])
        try:
            wait_for(lambda: len(rank_pids(job.pid)) == 4 and verified(node, 32, 4), timeout=30, what="4 ranks")
            time.sleep(0.2)  # several quanta after verification
            assert {group(p) for p in rank_pids(job.pid)} == {f"/{theirs.name}"}
            assert not (g.base / "job-32").exists()
        finally:
            end_job(job)
    finally:
        for _ in range(50):  # the job's processes may take a moment to leave it
            try:
                theirs.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_ranks_that_outlive_their_job_go_back_to_the_root_group(node: CpuManagerProcess) -> None:
    g = groups_of(node)
    job = start_job(node, 33)
    try:
        ranks = grouped_ranks(node, job, 33)
        with node.client() as c:
            c.release(33)  # the ranks run on as plain MPI
        wait_for(lambda: not (g.base / "job-33").exists(), timeout=5, what="the group removed")
        assert all(group(p) == "/" for p in ranks if os.path.exists(f"/proc/{p}"))
    finally:
        end_job(job)


def test_a_restarted_manager_keeps_the_groups_of_the_jobs_it_recovers(tmp_path: Path) -> None:
    cm = CpuManagerProcess(grouping(tmp_path / "state"), "0").start()
    g = groups_of(cm)
    job = start_job(cm, 34)
    try:
        ranks = grouped_ranks(cm, job, 34)
        own = f"/{cm.cfg.instance}/job-34"
        (g.base / "job-999").mkdir()  # a stale group of a job that is not in the table
        cm.kill(signal.SIGKILL)
        cm.start()  # recovers the table
        assert (g.base / "job-34").is_dir() and not (g.base / "job-999").exists()
        assert all(group(p) == own for p in ranks)
        job.send_signal(signal.SIGTERM)
        job.communicate(timeout=30)
    finally:
        end_job(job)
        cm.stop()
    assert not g.base.exists()


def test_groups_are_off_by_default(tmp_path: Path) -> None:
    cm = CpuManagerProcess(tmp_path / "state", "0").start()
    try:
        assert cm.status()["cpu_groups"].startswith("off: switched off")
        job = start_job(cm, 35)
        try:
            wait_for(lambda: len(rank_pids(job.pid)) == 4 and verified(cm, 35, 4), timeout=30, what="4 ranks")
            time.sleep(0.2)
            assert {group(p) for p in rank_pids(job.pid)} == {"/"}
            assert [j["cpu_group"] for j in cm.status()["jobs"]] == [False]
        finally:
            end_job(job)
    finally:
        cm.stop()
