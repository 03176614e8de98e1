"""Under Slurm, a communicating job that shares a node with a compute job: vmsched vs Slurm's own oversubscription.

The test cluster of tests/slurm_cluster.py (a real Slurm 22.05 on this machine), node n1, both CPUs:
- `vmsched`: the SPANK plugin and n1's CPU manager (CPUs 0-1) fold every step: the compute job (2 ranks)
  and the ring (4 ranks) each get one CPU, the ring's ranks take turns on theirs;
- `oversubscribe`: the same partition with `OverSubscribe=FORCE:4` and no vmsched plugin, as a site runs
  it today: all 6 ranks time-share the node's CPUs (TaskPlugin=task/none, no binding).

The communicating job is the ring of bench/patterns (bench/patterns/patterns.c, plain MPI, built with the
environment's mpicc); the compute job is the compute-bound selftest bench/patterns.py uses. Both start
with `srun --mpi=pmi2 -O -w n1`. The ring's iteration count is scaled until its vmsched run takes at
least --min-s seconds; the oversubscribed run uses the same count; both checksums must agree. Figure:
oversubscribe time / vmsched time (> 1: vmsched is faster). Last line: JSON.

    flock /work/.quiet.lock python bench/slurm_oversubscribe.py [--min-s 1.0]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.slurm_cluster import SlurmCluster, VmschedCluster  # noqa: E402
from vmsched.vmruntime.shmclean import mapped_segments, remove_leftovers  # noqa: E402
from vmsched.vmruntime.testing import compile_c_program, selftest_cmd  # noqa: E402

HERE = Path(__file__).resolve().parent
COMPUTE = selftest_cmd("send", "--variant", "50x1", "--iters", "1000000", "--work", "50")  # runs until cancelled
RING_RANKS, COMPUTE_RANKS = 4, 2
TIMEOUT_S = 300.0


def srun(*argv: str) -> list[str]:
    return ["srun", "-O", "--mpi=pmi2", "-w", "n1", *argv]


def ring(cluster: SlurmCluster, exe: Path, iters: int) -> dict:
    r = cluster.run(*srun("-n", str(RING_RANKS), str(exe), "ring", str(iters), "0"), timeout=TIMEOUT_S)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if not out["ok"]:
        raise RuntimeError(f"the ring failed its own check: {r.stdout}")
    return out


def job_processes(cluster: SlurmCluster, name: str) -> list[int]:
    """The processes of this cluster's job `name` (their environment says so)."""
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if env.get("SLURM_CONF") == str(cluster.conf) and env.get("SLURM_JOB_NAME") == name:
            found.append(p.pid)
    return found


def with_compute(cluster: SlurmCluster, running: object, fn: object) -> dict:
    """Run fn() while the compute job runs on n1 (started by srun, cancelled after; the MPICH segments a
    cancelled job leaves are removed - under vmsched the CPU manager does that, under Slurm alone nobody)."""
    comp = subprocess.Popen(srun("-n", str(COMPUTE_RANKS), "-J", "compute", *COMPUTE), env=cluster.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not running() and time.monotonic() < deadline:  # type: ignore[operator]
            time.sleep(0.05)
        time.sleep(0.5)  # past start-up, computing
        return fn()  # type: ignore[operator]
    finally:
        segments = set().union(*(mapped_segments(p) for p in job_processes(cluster, "compute")))
        cluster.run("scancel", "-n", "compute", check=False)
        comp.wait(60)
        deadline = time.monotonic() + 30
        while cluster.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        removed = remove_leftovers(segments)
        print(
            f"cancelled compute job: {len(segments)} MPICH segments mapped, {len(removed)} left and removed",
            file=sys.stderr,
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-s", type=float, default=1.0, help="the ring's vmsched run lasts at least this long")
    p.add_argument("--iters", type=int, default=5000, help="ring iterations to start the calibration from")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="vmsched-bench-") as tmp:
        exe = compile_c_program(HERE / "patterns" / "patterns.c", Path(tmp))
        Path(tmp).chmod(0o755)
        iters = args.iters
        v = VmschedCluster(node_cpus={"n1": "0-1"}).start()
        try:

            def compute_folded() -> bool:
                return any(j["registered"] == COMPUTE_RANKS for j in v.status("n1")["jobs"])

            def calibrated() -> dict:
                nonlocal iters
                run = ring(v.cluster, exe, iters)
                for _ in range(4):
                    if run["elapsed_s"] >= args.min_s:
                        break
                    iters = math.ceil(iters * 1.25 * args.min_s / max(run["elapsed_s"], 0.01))
                    run = ring(v.cluster, exe, iters)
                return run

            folded = with_compute(v.cluster, compute_folded, calibrated)
        finally:
            v.stop()
        c = SlurmCluster(oversubscribe="FORCE:4").start()
        try:

            def compute_running() -> bool:
                r = c.run("squeue", "-h", "-n", "compute", "-t", "R", check=False)
                return bool(r.stdout.strip()) and len(job_processes(c, "compute")) >= COMPUTE_RANKS

            plain = with_compute(c, compute_running, lambda: ring(c, exe, iters))
        finally:
            c.stop()
    if plain["checksum"] != folded["checksum"]:
        raise SystemExit(f"checksums differ: vmsched {folded['checksum']}, oversubscribe {plain['checksum']}")
    ratio = plain["elapsed_s"] / folded["elapsed_s"]
    print(f"\nring of {RING_RANKS} ranks, {iters} iterations, beside a {COMPUTE_RANKS}-rank compute job on n1 (2 CPUs)")
    print(f"{'way':<15} {'ring s':>8}  checksum")
    print(f"{'vmsched':<15} {folded['elapsed_s']:>8.3f}  {folded['checksum']}")
    print(f"{'oversubscribe':<15} {plain['elapsed_s']:>8.3f}  {plain['checksum']}")
    print(f"oversubscribe / vmsched: {ratio:.2f}")
    print(json.dumps({"bench": "slurm_oversubscribe", "iters": iters, "ring_ranks": RING_RANKS,
                      "compute_ranks": COMPUTE_RANKS, "vmsched_s": folded["elapsed_s"],
                      "oversubscribe_s": plain["elapsed_s"], "ratio": round(ratio, 3),
                      "checksum": folded["checksum"]}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
