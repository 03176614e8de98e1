"""A folded job: 4 ranks on 1 CPU (MPL 4) with the runtime (blocking immediately, tokens) against the
same 4 ranks pinned to the same CPU without it (MPICH spins and yields), in the same invocation.

Workloads (vmsched.vmruntime.selftest): the thesis's `send` pattern with half the ranks computing 2x and 6x
longer (send.50x2-like, send.50x6-like) and a token ring. For `send` the CPU work alone is measured
too (sum over the ranks of the CPU time of their compute phases): the best a folded run can do.
Targets (issue 3): runtime / plain <= 0.7 for both sends, <= 1.0 for the ring.

The machine is shared: other users' processes on the same CPU take a share of it per runnable task,
and a folded job under the runtime has one runnable rank where plain MPI has four spinning ones, so
under foreign load the runtime's elapsed time suffers most. The table therefore also shows the CPU
time each variant consumed (all processes of the run, from RUSAGE_CHILDREN), the best of the runs
next to the median, and the load average.

    python bench/folded_job.py [--reps 3] [--cpu 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmsched.vmruntime.testing import Manager, mpiexec, selftest_cmd, unwind_on_sigterm, vmrun_cmd  # noqa: E402

WORKLOADS = {
    "send.50x2": selftest_cmd("send", "--variant", "50x2", "--iters", "50", "--work", "5"),
    "send.50x6": selftest_cmd("send", "--variant", "50x6", "--iters", "50", "--work", "5"),
    "ring": selftest_cmd("ring", "--laps", "5000"),
}


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if not out["ok"]:
        raise RuntimeError(f"verification failed: {out}")
    out["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def main() -> int:
    unwind_on_sigterm()  # the private CPU manager, the jobs and their directories go on SIGTERM too
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cpu", type=int, default=1, help="the one CPU both variants run on")
    args = p.parse_args()
    res: dict[str, dict[str, list[dict]]] = {w: {"plain": [], "runtime": []} for w in WORKLOADS}
    load0 = os.getloadavg()[0]
    with Manager(cpus=str(args.cpu)) as m:  # a manager of one CPU: the job gets MPL 4
        for _ in range(args.reps):
            for name, cmd in WORKLOADS.items():
                res[name]["plain"].append(run(["taskset", "-c", str(args.cpu), mpiexec(), "-n", "4", *cmd]))
                res[name]["runtime"].append(run(vmrun_cmd(m.state_dir, 4, 4, cmd, queue="local"), m.env()))
    load1 = os.getloadavg()[0]
    print(
        f"4 ranks on CPU {args.cpu} (MPL 4), {args.reps} runs each; load average {load0:.1f} -> {load1:.1f} "
        "(shared machine)"
    )
    print(
        f"{'workload':<10} {'work':>6} {'plain':>7} {'runtime':>8} {'ratio':>6} {'best':>6} {'best':>8} {'ratio':>6}"
        f" {'plain':>6} {'runtime':>8}"
    )
    print(
        f"{'':<10} {'cpu s':>6} {'med s':>7} {'med s':>8} {'':>6} {'plain':>6} {'runtime':>8} {'':>6}"
        f" {'cpu s':>6} {'cpu s':>8}"
    )
    figures: dict[str, float] = {"loadavg_start": round(load0, 2), "loadavg_end": round(load1, 2)}
    for name in WORKLOADS:
        pl, rt = res[name]["plain"], res[name]["runtime"]
        med_p, med_r = (statistics.median(r["elapsed_s"] for r in x) for x in (pl, rt))
        best_p, best_r = (min(r["elapsed_s"] for r in x) for x in (pl, rt))
        cpu_p, cpu_r = (statistics.median(r["cpu_s"] for r in x) for x in (pl, rt))
        key = name.replace(".", "_")
        figures.update({f"{key}_plain_s": round(med_p, 3), f"{key}_runtime_s": round(med_r, 3),
                        f"{key}_ratio": round(med_r / med_p, 3), f"{key}_best_ratio": round(best_r / best_p, 3),
                        f"{key}_cpu_ratio": round(cpu_r / cpu_p, 3)})  # fmt: skip
        work = "-"
        if "compute_cpu_s" in rt[0]:
            w = statistics.median(r["compute_cpu_s"] for r in rt + pl)
            figures[f"{key}_work_s"] = round(w, 3)
            figures[f"{key}_runtime_over_work_ratio"] = round(best_r / w, 3)
            figures[f"{key}_plain_over_work_ratio"] = round(best_p / w, 3)
            work = f"{w:.2f}"
        print(
            f"{name:<10} {work:>6} {med_p:>7.2f} {med_r:>8.2f} {med_r / med_p:>6.3f} {best_p:>6.2f} {best_r:>8.2f}"
            f" {best_r / best_p:>6.3f} {cpu_p:>6.2f} {cpu_r:>8.2f}"
        )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
