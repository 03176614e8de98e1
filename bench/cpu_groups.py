"""Job CPU groups: the same folded jobs with and without a CPU cgroup per job, against the taskset split.

Two CPU managers run side by side on the same CPU, one with `[cpumanager] job_cpu_groups = true` and one
with `false` (the default: every rank its own autogroup), and the jobs alternate between them in
interleaved rounds; the reference is plain MPICH on that CPU by `taskset`. Each run has a 2-rank compute
job (plain MPICH, by taskset) on the other CPU, as bench/patterns.py does. Programs: the plain-MPI C
patterns of bench/patterns/patterns.c, written with no knowledge of vmsched.

    python bench/cpu_groups.py [--programs alltoall,random-pairs] [--reps 5] [--ways default,local]
                               [--ranks 4] [--min-s 1]

Rows: median seconds per way, grouped / ungrouped and each / taskset. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from patterns import COMPUTE, PATTERNS, Program, Run, run, scaled, start_compute  # noqa: E402

from vmsched.vmruntime.testing import (  # noqa: E402
    Manager,
    compile_c_program,
    end_job,
    mpiexec,
    unwind_on_sigterm,
    vmrun_cmd,
)

DEFAULT_PROGRAMS = ("alltoall", "random-pairs", "halo2d", "master-worker", "ring-rev")


def one(prog: Program, way: str, nranks: int, managers: dict[str, Manager]) -> Run:
    """One run of `way` (taskset, or QUEUE@grouped / QUEUE@ungrouped) beside the compute job."""
    comp = start_compute(["taskset", "-c", "1", mpiexec(), "-n", "2", *COMPUTE], 2)
    try:
        if way == "taskset":
            return run(["taskset", "-c", "0", mpiexec(), "-n", str(nranks), *prog.argv()], prog)
        queue, _, which = way.partition("@")
        m = managers[which]
        cmd = vmrun_cmd(m.state_dir, nranks, nranks, prog.argv(), queue=None if queue == "default" else queue)
        return run(cmd, prog, m.env())
    finally:
        end_job(comp)


def main() -> int:
    unwind_on_sigterm()  # the private CPU manager, the jobs and their directories go on SIGTERM too
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", default=",".join(DEFAULT_PROGRAMS), help=f"patterns: {', '.join(PATTERNS)}")
    p.add_argument("--ways", default="default,local", help="vmsched queue ways: default (LBD), local, global")
    p.add_argument("--ranks", type=int, default=4, help="ranks of the folded job, all on CPU 0 (default 4)")
    p.add_argument("--reps", type=int, default=5, help="interleaved rounds; medians (default 5)")
    p.add_argument("--min-s", type=float, default=1.0, help="shortest taskset run in seconds (default 1)")
    args = p.parse_args()
    names = args.programs.split(",")
    bad = [n for n in names if n not in PATTERNS]
    if bad or args.reps < 1 or args.ranks < 2:
        p.error(f"unknown program(s) {bad}; choose from {', '.join(PATTERNS)}" if bad else "--reps >= 1, --ranks >= 2")
    queues = args.ways.split(",")
    if any(q not in ("default", "local", "global") for q in queues):
        p.error("--ways: default, local, global")
    ways = ["taskset", *(f"{q}@{g}" for q in queues for g in ("grouped", "ungrouped"))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="vmsched-cpugroups-") as tmp:
        exe = compile_c_program(Path(__file__).resolve().parent / "patterns" / "patterns.c", Path(tmp))
        states = {}
        for name, on in (("grouped", "true"), ("ungrouped", "false")):
            states[name] = Path(tmp) / name
            states[name].mkdir()
            (states[name] / "vmsched.toml").write_text(f"[cpumanager]\njob_cpu_groups = {on}\n")
        with Manager(states["grouped"], cpus="0") as on, Manager(states["ungrouped"], cpus="0") as plain:
            if not on.status()["cpu_groups"].startswith("cgroup"):
                print(f"no job CPU groups here: {on.status()['cpu_groups']}", file=sys.stderr)
                return 2
            managers = {"grouped": on, "ungrouped": plain}
            for name in names:
                prog = Program(name, exe)
                # the iterations calibrated on the reference
                ref = scaled(prog, lambda: one(prog, "taskset", args.ranks, managers), args.min_s)  # noqa: B023
                runs: dict[str, list[Run]] = {w: [] for w in ways}
                for rnd in range(args.reps):
                    for w in ways:
                        runs[w].append(one(prog, w, args.ranks, managers))
                    print(f"  {name}: round {rnd + 1}/{args.reps}", file=sys.stderr, flush=True)
                bad_runs = sorted({w for w, rs in runs.items() for r in rs if not r.ok or r.checksum != ref.checksum})
                med = {w: statistics.median(r.seconds for r in rs) for w, rs in runs.items()}
                row = {"program": name, "ranks": args.ranks, "iters": prog.iters, "seconds": med, "bad": bad_runs,
                       "worst": {w: max(r.seconds for r in rs) for w, rs in runs.items()}}  # fmt: skip
                rows.append(row)
                print(line(row, queues), flush=True)
    head = ("program", "way", "grouped", "ungrouped", "taskset", "g/u", "g/ts", "u/ts")
    print("\n{:<14} {:<8} {:>8} {:>9} {:>8} {:>6} {:>6} {:>6}".format(*head))
    for row in rows:
        print(line(row, queues))
    ratios = [row["seconds"][f"{q}@grouped"] / row["seconds"][f"{q}@ungrouped"] for row in rows for q in queues]
    vs_ts = {q: [row["seconds"][f"{q}@grouped"] / row["seconds"]["taskset"] for row in rows] for q in queues}
    figures = {
        "cases": len(rows),
        "grouped_vs_ungrouped_best": round(min(ratios), 3),
        "grouped_vs_ungrouped_worst": round(max(ratios), 3),
        **{f"{q}_grouped_vs_taskset_worst": round(max(v), 3) for q, v in vs_ts.items()},
        **{f"{q}_grouped_vs_taskset_best": round(min(v), 3) for q, v in vs_ts.items()},
        "bad_results": sum(len(r["bad"]) for r in rows),
    }
    print(json.dumps(figures))
    return 1 if figures["bad_results"] else 0


def line(row: dict, queues: list[str]) -> str:
    s, ts = row["seconds"], row["seconds"]["taskset"]
    out = []
    for q in queues:
        g, u = s[f"{q}@grouped"], s[f"{q}@ungrouped"]
        out.append(f"{row['program']:<14} {q:<8} {g:8.3f} {u:9.3f} {ts:8.3f} {g / u:6.2f} {g / ts:6.2f} {u / ts:6.2f}"
                   + ("" if not row["bad"] else f"  BAD {','.join(row['bad'])}"))  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
