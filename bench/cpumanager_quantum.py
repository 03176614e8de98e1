"""Cost of one CPU-manager quantum, as a ratio to the 10 ms quantum (target < 0.1).

Pure part: partition sizes + CPU assignment + rank mapping + LBD arithmetic on a 64-CPU table with
64 jobs and 1024 ranks (the same functions the daemon calls). Daemon part: `CpuManager.reconcile()`
on a real shared table with real processes registered (as many as this machine takes, default 1024),
pinned to this machine's CPUs: a steady quantum, and a quantum in which a job ends and every rank of
the expanding job is re-pinned.

    python bench/cpumanager_quantum.py [--ranks 1024] [--quanta 300]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.progress import track  # noqa: E402
from rich.table import Table  # noqa: E402

from vmsched.config import load_config  # noqa: E402
from vmsched.cpumanager.lbd import LbdParams, LbdState, lbd_step  # noqa: E402
from vmsched.cpumanager.manager import CpuManager, open_table  # noqa: E402
from vmsched.cpumanager.partition import JobShape, plan_partitions, rank_cpus  # noqa: E402

QUANTUM_S = 0.010


def pure_quantum(reps: int) -> float:
    """Median seconds for one quantum's arithmetic on 64 CPUs / 64 jobs / 1024 ranks."""
    rng = random.Random(1)
    cpus = tuple(range(64))
    jobs = [JobShape(i + 1, 16, 16) for i in range(64)]
    current = plan_partitions(jobs, {}, cpus, queue_empty=True)
    states = {j.job_id: LbdState() for j in jobs}
    params = LbdParams()
    times = []
    for _ in range(reps):
        # One job ends and another arrives each quantum: the worst case, a full repartition.
        gone = rng.choice(jobs)
        new = JobShape(max(j.job_id for j in jobs) + 1, 16, 16)
        jobs = [JobShape(j.job_id, j.nranks, j.max_mpl, len(current.get(j.job_id, ()))) for j in jobs if j != gone]
        jobs.append(new)
        switches = [rng.randint(100, 110) for _ in range(16)]
        t0 = time.perf_counter()
        current = plan_partitions(jobs, current, cpus, queue_empty=True)
        for j in jobs:
            part = current[j.job_id]
            for r in range(j.nranks):
                rank_cpus(r, part, local_queues=True)
            states[j.job_id] = lbd_step(states.get(j.job_id, LbdState()), switches, None, params)
        times.append(time.perf_counter() - t0)
    return median(times)


def daemon_quantum(nranks: int, quanta: int) -> tuple[float, float, int]:
    """Median seconds of a steady reconcile and of a repartition reconcile, with real processes."""
    mine = tuple(sorted(os.sched_getaffinity(0)))
    # One CPU stays free for a small extra job that comes and goes (the repartition case); the
    # ranks are spread over one job per other CPU, each folded onto a single CPU at most.
    njobs = max(1, len(mine) - 1)
    per_job = nranks // njobs
    with tempfile.TemporaryDirectory() as d:
        cfg = load_config(state_dir=d)
        table, _ = open_table(cfg, mine)
        mgr = CpuManager(cfg, table, recovered=False)
        procs: list[subprocess.Popen] = []
        try:
            for j in range(njobs):
                mgr.admit({"op": "admit", "job": j + 1, "nranks": per_job, "max_mpl": per_job, "queue": "local"})
            for _ in track(range(per_job * njobs), description=f"starting {per_job * njobs} processes"):
                procs.append(subprocess.Popen(["sleep", "600"]))
            for i, p in enumerate(procs):
                mgr.register({"op": "register", "job": i // per_job + 1, "rank": i % per_job, "pid": p.pid})
            steady = []
            for _ in track(range(quanta), description="steady quanta"):
                t0 = time.perf_counter()
                mgr.reconcile()
                steady.append(time.perf_counter() - t0)
            # Repartition: a one-rank job comes and goes; the big jobs shrink and expand, all re-pinned.
            repart = []
            extra = njobs + 1
            for _ in range(5):
                mgr.admit({"op": "admit", "job": extra, "nranks": 1, "max_mpl": 1, "queue": "local"})
                mgr.reconcile()
                t0 = time.perf_counter()
                mgr.release({"op": "release", "job": extra})
                mgr.reconcile()
                repart.append(time.perf_counter() - t0)
                extra += 1
            return median(steady), median(repart), len(procs)
        finally:
            for p in procs:
                p.send_signal(signal.SIGKILL)
            for p in procs:
                p.wait()
            mgr.shutdown()
            table.unlink()
            table.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--quanta", type=int, default=300)
    args = ap.parse_args()
    pure = pure_quantum(200)
    steady, repart, n = daemon_quantum(args.ranks, args.quanta)
    figures = {
        "quantum_ms": QUANTUM_S * 1000,
        "pure_ms": pure * 1000,
        "pure_ratio": pure / QUANTUM_S,
        "daemon_steady_ms": steady * 1000,
        "daemon_steady_ratio": steady / QUANTUM_S,
        "daemon_repartition_ms": repart * 1000,
        "daemon_repartition_ratio": repart / QUANTUM_S,
        "processes": n,
        "cpus": len(os.sched_getaffinity(0)),
    }
    t = Table("part", "median ms", "ratio to 10 ms quantum", title="CPU-manager quantum cost")
    t.add_row("pure (64 CPUs, 64 jobs, 1024 ranks)", f"{pure * 1000:.3f}", f"{pure / QUANTUM_S:.3f}")
    t.add_row(f"daemon steady ({n} processes)", f"{steady * 1000:.3f}", f"{steady / QUANTUM_S:.3f}")
    t.add_row(f"daemon repartition ({n} processes)", f"{repart * 1000:.3f}", f"{repart / QUANTUM_S:.3f}")
    Console().print(t)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
