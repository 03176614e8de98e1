"""Self-coscheduling against OS time-sharing: a communication-heavy job (a token ring, 4 ranks) runs
beside a compute-bound job (2 ranks) on the 2 CPUs, three ways, in one invocation:

- timesharing: plain `mpiexec` for both, no pinning; the kernel time-shares 6 ranks on 2 CPUs;
- vmsched: both under the CPU manager with the runtime (vmrun): the compute job is admitted first
  (max MPL 2), the ring (max MPL 4) then gets one CPU and the compute job shrinks to the other;
- taskset: plain `mpiexec` for both, split by hand: ring on CPU 0, compute job on CPU 1 (reference).

The figure is the ring's time (measured inside the program, after its first barrier). Targets:
vmsched <= 1.1x taskset, and at least 5x faster than time-sharing. The compute job is started first,
runs longer than the ring, and is stopped once the ring is done.

    python bench/scs_vs_timesharing.py [--laps 500] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmsched.vmruntime.testing import Manager, end_job, mpiexec, rank_pids, selftest_cmd, vmrun_cmd  # noqa: E402

COMPUTE = selftest_cmd("send", "--variant", "50x1", "--iters", "100000", "--work", "50")  # runs until stopped


def ring_cmd(laps: int) -> list[str]:
    return selftest_cmd("ring", "--laps", str(laps))


def wait_ranks(proc: subprocess.Popen[bytes], n: int) -> None:
    deadline = time.monotonic() + 30
    while len(rank_pids(proc.pid)) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)  # past start-up, computing


def ring_time(cmd: list[str], env: dict[str, str] | None = None) -> float:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if not out["ok"]:
        raise RuntimeError(f"verification failed: {out}")
    return out["elapsed_s"]


def timesharing(laps: int) -> float:
    comp = subprocess.Popen([mpiexec(), "-n", "2", *COMPUTE], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ranks(comp, 2)
        return ring_time([mpiexec(), "-n", "4", *ring_cmd(laps)])
    finally:
        end_job(comp)


def taskset(laps: int) -> float:
    comp = subprocess.Popen(["taskset", "-c", "1", mpiexec(), "-n", "2", *COMPUTE], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_ranks(comp, 2)
        return ring_time(["taskset", "-c", "0", mpiexec(), "-n", "4", *ring_cmd(laps)])
    finally:
        end_job(comp)


def vmsched(m: Manager, laps: int) -> float:
    comp = subprocess.Popen(vmrun_cmd(m.state_dir, 2, 2, COMPUTE, queue="local"), env=m.env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_ranks(comp, 2)
        return ring_time(vmrun_cmd(m.state_dir, 4, 4, ring_cmd(laps), queue="local"), m.env())
    finally:
        end_job(comp)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--laps", type=int, default=500)
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args()
    times: dict[str, list[float]] = {"timesharing": [], "vmsched": [], "taskset": []}
    load0 = os.getloadavg()[0]
    with Manager(cpus="0-1") as m:
        for _ in range(args.reps):
            times["taskset"].append(taskset(args.laps))
            times["vmsched"].append(vmsched(m, args.laps))
            times["timesharing"].append(timesharing(args.laps))
    load1 = os.getloadavg()[0]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"ring (4 ranks, {args.laps} laps) beside a compute job (2 ranks) on 2 CPUs; median of {args.reps}; "
        f"load average {load0:.1f} -> {load1:.1f} (shared machine)"
    )
    print(f"{'setting':<12} {'ring s':>9} {'vs taskset':>11}   runs")
    for k, v in med.items():
        print(f"{k:<12} {v:>9.4f} {v / med['taskset']:>11.2f}   {' '.join(f'{x:.4f}' for x in times[k])}")
    figures = {
        "ring_timesharing_s": round(med["timesharing"], 4), "ring_vmsched_s": round(med["vmsched"], 4),
        "ring_taskset_s": round(med["taskset"], 4),
        "vmsched_vs_taskset_ratio": round(med["vmsched"] / med["taskset"], 3),
        "timesharing_vs_vmsched_ratio": round(med["timesharing"] / med["vmsched"], 2),
        "loadavg_start": round(load0, 2), "loadavg_end": round(load1, 2),
    }  # fmt: skip
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
