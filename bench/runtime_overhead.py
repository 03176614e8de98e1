"""Cost of the runtime on an unfolded job (MPL 1): ping-pong and ring latency with libvmrt preloaded
and the job registered with the CPU manager (fast path), against plain mpiexec in the same invocation.

Both sides run 2 ranks on the 2 CPUs, each rank pinned to its own CPU (the runtime pins at MPL 1,
hydra's `-bind-to core` pins the plain run). Runs alternate (plain, runtime, plain, ...); the ratios
compare the medians and the best runs (the machine is shared: other users' processes preempt the
spinning ranks now and then, which shows in the spread). Target: runtime / plain <= 1.05.
A C loop of MPI_Iprobe / MPI_Test(null) calls (tests/c/callcost.c) gives the wrapper's cost per
call in nanoseconds, with and without the runtime, which scheduling noise hardly touches.

    python bench/runtime_overhead.py [--reps 7] [--iters 10000] [--laps 10000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vmsched.vmruntime.testing import Manager, compile_c_program, mpiexec, selftest_cmd, unwind_on_sigterm, vmrun_cmd  # noqa: E402


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if not out["ok"]:
        raise RuntimeError(f"verification failed: {out}")
    return out


def call_cost(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    res = subprocess.run([*cmd, "1000000"], capture_output=True, text=True, timeout=300, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr[-2000:]}")
    _, probe, test = res.stdout.split()
    return float(probe), float(test)


def main() -> int:
    unwind_on_sigterm()  # the private CPU manager, the jobs and their directories go on SIGTERM too
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--iters", type=int, default=10000, help="ping-pong round trips per run")
    p.add_argument("--laps", type=int, default=10000, help="ring laps per run")
    args = p.parse_args()
    tests = {
        "pingpong": (selftest_cmd("pingpong", "--iters", str(args.iters)), "rtt_us"),
        "ring": (selftest_cmd("ring", "--laps", str(args.laps)), "hop_us"),
    }
    results: dict[str, dict[str, list[float]]] = {t: {"plain": [], "runtime": []} for t in tests}
    with tempfile.TemporaryDirectory() as tmp, Manager(cpus="0-1") as m:
        callcost = compile_c_program(REPO / "tests" / "c" / "callcost.c", Path(tmp))
        for _ in range(args.reps):
            for name, (cmd, key) in tests.items():
                results[name]["plain"].append(run([mpiexec(), "-n", "2", "-bind-to", "core", *cmd])[key])
                results[name]["runtime"].append(run(vmrun_cmd(m.state_dir, 2, 1, cmd, queue="local"), m.env())[key])
        cost_plain = call_cost([mpiexec(), "-n", "1", str(callcost)])
        cost_rt = call_cost(vmrun_cmd(m.state_dir, 1, 1, [str(callcost)]), m.env())
    print(f"MPL 1 latency, 2 ranks on 2 CPUs, {args.reps} runs each (shared machine: look at the spread)")
    print(f"{'test':<10} {'plain':>8} {'runtime':>8} {'ratio':>6} {'best':>8} {'best':>8} {'ratio':>6}   all runs")
    print(f"{'':<10} {'median':>8} {'median':>8} {'':>6} {'plain':>8} {'runtime':>8}")
    figures: dict[str, float] = {}
    for name, (_, key) in tests.items():
        pl, rt = results[name]["plain"], results[name]["runtime"]
        med_ratio = statistics.median(rt) / statistics.median(pl)
        best_ratio = min(rt) / min(pl)
        figures[f"{name}_{key}_plain_median"] = round(statistics.median(pl), 3)
        figures[f"{name}_{key}_runtime_median"] = round(statistics.median(rt), 3)
        figures[f"{name}_ratio"] = round(med_ratio, 3)
        figures[f"{name}_best_ratio"] = round(best_ratio, 3)
        runs = " ".join(f"{x:.1f}" for x in pl) + " | " + " ".join(f"{x:.1f}" for x in rt)
        print(
            f"{name:<10} {statistics.median(pl):>8.2f} {statistics.median(rt):>8.2f} {med_ratio:>6.3f} "
            f"{min(pl):>8.2f} {min(rt):>8.2f} {best_ratio:>6.3f}   {runs}"
        )
    print(
        f"cost of one call (ns, best of 5 x 1e6): Iprobe {cost_plain[0]:.2f} -> {cost_rt[0]:.2f}, "
        f"Test(null) {cost_plain[1]:.2f} -> {cost_rt[1]:.2f}"
    )
    figures.update(
        iprobe_ns_plain=cost_plain[0],
        iprobe_ns_runtime=cost_rt[0],
        test_ns_plain=cost_plain[1],
        test_ns_runtime=cost_rt[1],
        wrapper_ns=round(cost_rt[1] - cost_plain[1], 2),
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
