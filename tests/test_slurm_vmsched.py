"""vmsched on the nodes of a real Slurm cluster (tests/slurm_cluster.py; docs/slurm.md): the SPANK plugin
admits every step's ranks on each node to that node's CPU manager, the runtime folds them per node,
and a cancelled job leaves nothing behind. Jobs are the apps of vmsched.apps, verified."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import BIN, wait_for
from tests.launcher_harness import vmapp_result
from tests.plain_runs import run_app
from tests.slurm_cluster import VmschedCluster
from vmsched.slurm.step import vm_job_id
from vmsched.vmruntime.shmclean import MPICH_PREFIX, mapped_segments
from vmsched.vmruntime.testing import read_stats

PY = sys.executable
# Node n1 manages both CPUs where two jobs share it, n2 the second one (a real site gives each node its own).
SHARED = {"n1": "0-1", "n2": "1"}


@pytest.fixture
def vmcluster(request):
    cpus = getattr(request, "param", SHARED)
    v = VmschedCluster(node_cpus=cpus).start()
    try:
        yield v
    finally:
        v.stop()
    assert not v.cluster.root.exists() and not v.vm_root.exists()


def job_script(v: VmschedCluster, name: str, body: str) -> Path:
    path = v.cluster.root / f"{name}.sh"
    path.write_text(f"#!/bin/sh\nexport VMRT_STATS={v.cluster.root}/{name}.stats\n{body}\n")
    return path


def sbatch(v: VmschedCluster, name: str, *args: str, body: str) -> int:
    script = job_script(v, name, body)
    out = v.cluster.run("sbatch", "--parsable", "-O", "-J", name, "-o", str(v.cluster.root / f"{name}.out"), *args,
                        str(script)).stdout  # fmt: skip
    return int(out.strip().split(";")[0])


def srun_app(app: str, cls: str, *args: str) -> str:
    return " ".join([f"srun --mpi=pmi2 {PY} -m vmsched.apps.{app} --class {cls}", *args])


def mpiexec_app(app: str, cls: str, n: int = 4) -> str:
    return f"{BIN}/mpiexec -n {n} {PY} -m vmsched.apps.{app} --class {cls}"


def finished(v: VmschedCluster, *jobs: int, timeout: float = 150) -> None:
    ids = ",".join(map(str, jobs))
    # Seen twice on 2026-11-28 (the second time: one rank running without a token, starved, its queue-mates
    # waiting for it; see the runtime README): a job that does not end says where the jobs and ranks stood.
    wait_for(lambda: not v.cluster.run("squeue", "-h", "-j", ids, check=False).stdout.strip(), timeout=timeout,
             interval=0.2, what=f"Slurm jobs {ids} to end", report=lambda: where(v, ranks=True))  # fmt: skip


def where(v: VmschedCluster, ranks: bool = False) -> str:
    """Where the cluster's jobs stood: squeue (state and reason: a job that Slurm left pending says why),
    each node's `vmcpu --json`, the tails of the jobs' outputs and of slurmctld's log, and (`ranks`) every
    rank thread's state."""
    queue = v.cluster.run("squeue", "-h", "-o", "%i %j %T %r %N", check=False).stdout
    nodes = {n: v.cluster.run(str(BIN / "vmcpu"), "--json", "--state-dir", str(m.state_dir), check=False).stdout
             for n, m in v.managers.items()}  # fmt: skip
    outs = {p.name: p.read_text(errors="replace")[-1500:] for p in sorted(v.cluster.root.glob("*.out"))}
    log = v.cluster.root / "log" / "slurmctld.log"
    ctld = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else "(none)"
    threads = "\n".join(rank_threads(nodes)) if ranks else "(not read)"
    return f"squeue: {queue}\nvmcpu: {nodes}\noutputs: {outs}\nslurmctld.log:\n{ctld}\nrank threads:\n{threads}"


def rank_threads(nodes: dict[str, str]) -> list[str]:
    """Every thread of every rank registered on a node (`nodes`: each node's `vmcpu --json`): its state,
    nice value, CPU, allowed CPUs, CPU time and where it sleeps in the kernel."""
    lines = []
    for node, shown in nodes.items():
        for job in json.loads(shown or "{}").get("jobs", []):
            for r in job.get("ranks", []):
                try:
                    threads = psutil.Process(r["pid"]).threads()
                except psutil.Error:
                    continue
                for t in threads:
                    task = Path(f"/proc/{r['pid']}/task/{t.id}")
                    with contextlib.suppress(OSError):
                        f = task.joinpath("stat").read_text().rsplit(")", 1)[1].split()
                        allowed = [x for x in task.joinpath("status").read_text().splitlines()
                                   if x.startswith("Cpus_allowed_list")]  # fmt: skip
                        wchan = task.joinpath("wchan").read_text()
                        lines.append(f"{node} job {job['job']} rank {r['rank']} tid {t.id}: state {f[0]} nice {f[16]} "
                                     f"cpu {f[36]} {allowed[0] if allowed else ''} user {t.user_time:.2f} s "
                                     f"system {t.system_time:.2f} s wchan {wchan}")  # fmt: skip
    return lines


def result(v: VmschedCluster, name: str) -> dict:
    return vmapp_result((v.cluster.root / f"{name}.out").read_text())


def stats(v: VmschedCluster, name: str) -> list[dict]:
    return read_stats(v.cluster.root / f"{name}.stats")


def jobs_on(v: VmschedCluster, node: str) -> dict[int, dict]:
    return {j["job"]: j for j in v.status(node)["jobs"]}


def job_segments(v: VmschedCluster, node: str, vm_id: int) -> list[str]:
    prefix = f"{v.managers[node].cfg.instance}.j{vm_id}."
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


def registered(v: VmschedCluster, node: str, vm_id: int, n: int) -> dict | None:
    j = jobs_on(v, node).get(vm_id)
    return j if j is not None and j["registered"] == n else None


def test_two_sbatch_jobs_fold_on_one_node(vmcluster: VmschedCluster) -> None:
    """Two 4-rank jobs on n1 (one through srun --mpi=pmi2, one through mpiexec inside sbatch) both run
    folded on its CPUs: vmcpu --json shows both partitions at MPL 4, the first ran at MPL 2 alone."""
    v = vmcluster
    # The long jobs here hold their CPUs for a set time, whatever this node's speed; ep at class W was that job
    # once: 12 s on this node, 24 s in its slow spells, 40 s of the suite in two tests.
    first = sbatch(v, "first", "-w", "n1", "-n4", "--vm-max-mpl=4", body=srun_app("send", "S", "--seconds", "8"))
    a = vm_job_id(first, 0)
    # Polled every 0.1 s, not wait_for's 5 ms: each poll is a status request the manager answers, on
    # the CPUs that the job's ranks are starting on.
    alone = wait_for(lambda: registered(v, "n1", a, 4), timeout=120, interval=0.1,
                     what="the first job's 4 ranks on n1")  # fmt: skip
    assert alone["mpl"] == 2 and alone["cpus"] == [0, 1] and alone["max_mpl"] == 4
    # Each rank a session of its own (libvmrt.c, leave_session): in slurmstepd's one session the step's ranks
    # starved other processes on their CPUs for seconds (the next job's slurmstepd 9.5 s in hwloc's topology
    # load, 2026-12-06). The first task leads its process group and stays, alone among the ranks.
    sessions = [os.getsid(r["pid"]) for r in alone["ranks"]]
    assert len(set(sessions)) == 4, sessions
    second = sbatch(v, "second", "-w", "n1", "-n4", body=mpiexec_app("ep", "S"))  # the node's max_mpl: 4
    b = vm_job_id(second, 0)

    def together() -> bool:
        # Once the first job has left n1 the two can no longer be seen together: fail now, not at the timeout.
        assert registered(v, "n1", a, 4), f"the first job left n1 before the second's ranks were seen\n{where(v)}"
        return registered(v, "n1", b, 4) is not None

    wait_for(together, timeout=120, interval=0.1, what="the second job's 4 ranks on n1 while the first runs",
             report=lambda: where(v))  # fmt: skip
    shown = json.loads(subprocess.run([str(BIN / "vmcpu"), "--json", "--state-dir", str(v.managers["n1"].state_dir)],
                                      capture_output=True, text=True, check=True).stdout)  # fmt: skip
    both = {j["job"]: j for j in shown["jobs"]}
    assert set(both) == {a, b}, both
    assert [both[a]["mpl"], both[b]["mpl"]] == [4, 4] and {len(both[a]["cpus"]), len(both[b]["cpus"])} == {1}
    assert set(both[a]["cpus"]) | set(both[b]["cpus"]) == {0, 1}
    finished(v, first, second)
    for name, vm_id in (("first", a), ("second", b)):
        assert result(v, name)["verified"], name
        ranks = stats(v, name)
        assert len(ranks) == 4 and {r["job"] for r in ranks} == {vm_id} and all(r["mode"] == "ctl" for r in ranks)
    assert jobs_on(v, "n1") == {} and not job_segments(v, "n1", a) and not job_segments(v, "n1", b)


@pytest.mark.parametrize("vmcluster", [{"n1": "0", "n2": "1"}], indirect=True)
def test_job_across_nodes_folds_on_each_node(vmcluster: VmschedCluster) -> None:
    """A 4-rank job over n1 and n2 (mpiexec inside sbatch: one proxy per node) is folded on each node
    (2 ranks on its one CPU) and ends with the checksum of the unfolded run."""
    v = vmcluster
    unfolded = run_app("cg", 1)["checksum"]  # plain MPI, no Slurm and no vmsched (tests/plain_runs.py)
    across = sbatch(v, "across", "-N2", "-n4", body=mpiexec_app("cg", "S"))
    finished(v, across)
    res, ranks = result(v, "across"), stats(v, "across")
    assert res["verified"] and res["checksum"] == unfolded
    assert len(ranks) == 4 and all(r["mode"] == "ctl" for r in ranks), ranks
    assert sorted(r["rank"] for r in ranks) == [0, 0, 1, 1]  # slots: the rank's place on its node
    for node in ("n1", "n2"):
        log = v.managers[node].cfg.cpumanager_log.read_text()
        assert f"action=admit job={vm_job_id(across, 0)} ranks=2 max_mpl=4" in log, log
        assert jobs_on(v, node) == {}


def stopped_processes(*slurm_jobs: int) -> list[int]:
    """Stopped processes of these Slurm jobs (a step's processes carry SLURM_JOB_ID) or of this test's own
    tree: not those of other work on the node, such as a test running beside this one."""
    ours = {p.pid for p in psutil.Process().children(recursive=True)}
    jobs = {str(j) for j in slurm_jobs}
    stopped = []
    for p in psutil.process_iter(["status"]):
        if p.info["status"] != psutil.STATUS_STOPPED:
            continue
        try:
            job = p.environ().get("SLURM_JOB_ID")
        except psutil.Error:
            job = None
        if p.pid in ours or job in jobs:
            stopped.append(p.pid)
    return stopped


def test_cancelled_job_leaves_nothing_and_its_cpu_goes_back(vmcluster: VmschedCluster) -> None:
    """With a 4-rank job on n1, a 4-rank job over n1 and n2 (srun --mpi=pmi2) cancelled mid-run leaves
    no rank, stopped process or segment on either node, and n1's job gets its CPU back within two
    quanta of the cancelled ranks' end; the first job finishes verified."""
    v = vmcluster
    base = sbatch(v, "base", "-w", "n1", "-n4", body=srun_app("send", "S", "--seconds", "10"))
    b = vm_job_id(base, 0)
    wait_for(lambda: registered(v, "n1", b, 4), timeout=120, interval=0.1, what="the base job's ranks on n1")

    cancelled = sbatch(v, "cancelled", "-N2", "-n4", body=srun_app("cg", "W"))
    c = vm_job_id(cancelled, 0)
    seen = {n: wait_for(lambda n=n: registered(v, n, c, 2), timeout=120, interval=0.1, what=f"the job's ranks on {n}",
                        report=lambda: where(v))
            for n in ("n1", "n2")}  # fmt: skip
    base_now = jobs_on(v, "n1").get(b)
    assert base_now is not None, f"the base job ended before the cancelled one's ranks were seen\n{where(v)}"
    assert base_now["cpus"] != [0, 1]  # n1 is shared: the base job holds one CPU
    pids = [r["pid"] for s in seen.values() for r in s["ranks"]]
    segments = {n: job_segments(v, n, c) for n in ("n1", "n2")}
    assert all(len(s) == 1 for s in segments.values()), segments
    mpich = set().union(*(mapped_segments(p, MPICH_PREFIX) for p in pids))  # MPI_Finalize would remove them
    assert mpich
    # A rank has ended when its pidfd says so (all its threads gone), as the manager learns it.
    n1_fds = [os.pidfd_open(r["pid"]) for r in seen["n1"]["ranks"]]
    v.cluster.run("scancel", str(cancelled))
    try:
        wait_for(lambda: all(select.select([fd], [], [], 0)[0] for fd in n1_fds), timeout=30, interval=0.001,
                 what="the cancelled job's ranks on n1 to end")  # fmt: skip
        gone = v.status("n1")["quanta"]
    finally:
        for fd in n1_fds:
            os.close(fd)
    wait_for(lambda: jobs_on(v, "n1")[b]["cpus"] == [0, 1], timeout=10, what="the base job to get n1's CPUs back")
    back = jobs_on(v, "n1")[b]["changed_quantum"]
    assert back - gone <= 2, f"the CPU went back {back - gone} quanta after the cancelled ranks ended"
    finished(v, cancelled)
    for node in ("n1", "n2"):
        assert c not in jobs_on(v, node) and not job_segments(v, node, c)
    assert not [p for p in mpich if os.path.exists(p)], "the cancelled ranks' MPICH segments were left"
    wait_for(lambda: not [p for p in pids if psutil.pid_exists(p)], timeout=20, what="the ranks to be reaped")
    assert not stopped_processes(base, cancelled), "stopped processes left"

    finished(v, base)
    assert result(v, "base")["verified"]
    assert all(r["mode"] == "ctl" for r in stats(v, "base"))
    assert all(jobs_on(v, n) == {} for n in ("n1", "n2"))


@pytest.mark.parametrize("vmcluster", [{"n1": "0", "n2": "1"}], indirect=True)
def test_bad_input_is_refused_or_runs_plain_and_says_so(vmcluster: VmschedCluster) -> None:
    v = vmcluster
    for tool in (["srun", "--vm-max-mpl=0", "true"], ["sbatch", "--vm-max-mpl=two", "--wrap", "true"]):
        r = v.cluster.run(*tool, check=False)
        assert r.returncode != 0 and "invalid --vm-max-mpl" in r.stderr, r.stderr

    # More ranks than the node's CPU manager can hold at that MPL: the step runs unfolded and says so.
    r = v.cluster.run("srun", "-O", "-w", "n2", "-n4", "--mpi=pmi2", "--vm-max-mpl=1", PY, "-m", "vmsched.apps.cg",
                      "--class", "S")  # fmt: skip
    assert vmapp_result(r.stdout)["verified"]
    assert "the CPU manager refused 4 ranks at max MPL 1" in r.stderr and "runs as plain MPI" in r.stderr, r.stderr
    # ... and past the manager's table (no Slurm node runs that many tasks by default: MaxTasksPerNode 512).
    cfg = v.vm_root / "n2" / "vmsched.toml"
    h = subprocess.run([str(BIN / "vmslurm-step"), "admit", "--config", str(cfg), "--node", "n2", "--job", "9",
                        "--step", "0", "--uid", "0", "--nranks", "1025", "--leader", str(os.getpid())],
                       capture_output=True, text=True)  # fmt: skip
    assert h.returncode == 3 and "exceeds the limit of 1024" in h.stdout and "plain MPI" in h.stdout, h.stdout

    # A node whose CPU manager is down: its ranks run as plain MPI, said in the output; n1 still folds.
    v.managers["n2"].stop()
    t0 = time.monotonic()
    r = v.cluster.run("srun", "-O", "-N2", "-n4", "--mpi=pmi2", f"--export=ALL,VMRT_STATS={v.cluster.root}/down",
                      PY, "-m", "vmsched.apps.cg", "--class", "S", timeout=90)  # fmt: skip
    assert vmapp_result(r.stdout)["verified"] and time.monotonic() - t0 < 60
    assert "on n2: no CPU manager" in r.stderr and "runs as plain MPI" in r.stderr, r.stderr
    modes = sorted(s["mode"] for s in read_stats(v.cluster.root / "down"))
    assert modes == ["ctl", "ctl"], modes  # n1's two ranks; n2's were never preloaded
    assert jobs_on(v, "n1") == {}
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(v.managers["n1"].cfg.instance + ".j")]


@pytest.mark.parametrize("vmcluster", [{"n1": "0", "n2": "1"}], indirect=True)
def test_a_step_cannot_have_the_manager_act_on_processes_outside_it(vmcluster: VmschedCluster, spawn) -> None:
    """A step's rank names, in its own job segment, its slurmstepd (the job's leader) and a process of
    the same user outside the step: the manager refuses both (neither descends from that slurmstepd)
    and never pins them."""
    v = vmcluster
    outside = spawn("sleep", "60")
    before = os.sched_getaffinity(outside.pid)
    forge = v.cluster.root / "forge.py"
    forge.write_text(f"""\
import ctypes, os, time
from vmsched.cpumanager import shm_layout as L
table = L.Segment.from_buffer_copy(open("/dev/shm/" + os.environ["VMSCHED_SHM"].lstrip("/"), "rb").read())
job = int(os.environ["VMSCHED_JOB"])
j = next(j for j in table.jobs if j.job_id == job and j.state != L.JOB_FREE)
fd = os.open("/dev/shm/" + j.rt_name.decode().lstrip("/"), os.O_RDWR)
for slot, pid in ((0, os.getppid()), (1, {outside.pid})):
    e = L.RankEntry(job_id=job, rank=slot, pid=pid, state=L.RANK_RUNNING, wake=1)
    os.pwrite(fd, bytes(e), ctypes.sizeof(L.JobRt) + slot * ctypes.sizeof(L.RankEntry))
print("forged", os.getppid(), flush=True)
time.sleep(1.5)
""")
    r = v.cluster.run("srun", "-O", "-w", "n1", "-n2", "--vm-max-mpl=2", PY, str(forge))
    stepd = int(r.stdout.split()[1])
    log = v.managers["n1"].cfg.cpumanager_log.read_text()
    for pid in (stepd, outside.pid):
        assert f"ignoring pid {pid} named in its job segment: process {pid} does not descend" in log, log
    assert os.sched_getaffinity(outside.pid) == before
    # No rank was verified: the step is released when slurmstepd ends it (the plugin's exit callback).
    wait_for(lambda: jobs_on(v, "n1") == {}, timeout=15, what="the step's release")
