"""Job CPU groups: the same folded jobs with and without a CPU cgroup per job, against the taskset split.

Two CPU managers run side by side on the same CPU, one with `[cpumanager] job_cpu_groups = true` and one
with `false` (the default: every rank its own autogroup), and the jobs alternate between them in
interleaved rounds; the reference is plain MPICH on that CPU by `taskset`. Each run has a 2-rank compute
job (plain MPICH, by taskset) on the other CPU, as bench/patterns.py does; with --cpus 2 the job runs
alone on CPUs 0-1 (and `taskset` on both). Programs: the plain-MPI C patterns of
bench/patterns/patterns.c, written with no knowledge of vmsched.

    python bench/cpu_groups.py [--programs alltoall,random-pairs] [--reps 5] [--ways default,local]
                               [--ranks 4] [--cpus 1] [--min-s 1]

While each run lasts, a probe starts a trivial command (`taskset -c 0 true`) every PROBE_EVERY_S and times
how long it takes to start and end: what a daemon or a user's shell beside the job waits for the CPU.
On a 2-CPU AMD EPYC VM (kernel 6.18, cgroup v1, autogroups on) it waited up to 1.7 s beside a grouped
job on both CPUs, 0.03 s beside the same job ungrouped (vmsched/vmruntime/README.md, CPU groups): the
reason the groups are off by default.

Rows: median seconds per way, grouped / ungrouped and each / taskset, and the probe's longest start
per way. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from patterns import COMPUTE, PATTERNS, Program, Run, compute_beside, run, scaled  # noqa: E402

from vmsched.vmruntime.testing import (  # noqa: E402
    BackgroundLoop,
    Manager,
    compile_c_program,
    mpiexec,
    unwind_on_sigterm,
    vmrun_cmd,
)

DEFAULT_PROGRAMS = ("alltoall", "random-pairs", "halo2d", "master-worker", "ring-rev")


PROBE_EVERY_S = 0.25


class StartProbe(BackgroundLoop):
    """Starts `true` on one CPU every PROBE_EVERY_S while it is entered; `longest` is the longest start
    to end in seconds."""

    def __init__(self, cpu: int) -> None:
        super().__init__()
        self.cpu, self.longest = cpu, 0.0

    def _run(self) -> None:
        while not self._stop.wait(PROBE_EVERY_S):
            t0 = time.monotonic()
            # taskset rather than a preexec_fn, which may deadlock in a threaded parent
            subprocess.run(["taskset", "-c", str(self.cpu), "true"], check=True)
            self.longest = max(self.longest, time.monotonic() - t0)


def one(prog: Program, way: str, nranks: int, cpus: int, managers: dict[str, Manager]) -> tuple[Run, float]:
    """One run of `way` (taskset, or QUEUE@grouped / QUEUE@ungrouped) on CPU 0 beside the compute job on
    CPU 1, or alone on CPUs 0-1, and the probe's longest start on CPU 0 meanwhile."""
    comp = ["taskset", "-c", "1", mpiexec(), "-n", "2", *COMPUTE] if cpus == 1 else None
    with compute_beside(comp, 2), StartProbe(0) as probe:
        if way == "taskset":
            r = run(["taskset", "-c", f"0-{cpus - 1}", mpiexec(), "-n", str(nranks), *prog.argv(nranks)], prog)
        else:
            queue, _, which = way.partition("@")
            m = managers[which]
            mpl = -(-nranks // cpus)  # an odd count folds one rank deeper on one CPU
            cmd = vmrun_cmd(m.state_dir, nranks, mpl, prog.argv(nranks), queue=None if queue == "default" else queue)
            r = run(cmd, prog, m.env())
    return r, probe.longest


def main() -> int:
    unwind_on_sigterm()  # the private CPU manager, the jobs and their directories go on SIGTERM too
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", default=",".join(DEFAULT_PROGRAMS), help=f"patterns: {', '.join(PATTERNS)}")
    p.add_argument("--ways", default="default,local", help="vmsched queue ways: default (LBD), local, global")
    p.add_argument("--ranks", type=int, default=4, help="ranks of the folded job (default 4)")
    p.add_argument("--cpus", type=int, default=1, help="1: the job on CPU 0 beside a compute job on CPU 1 "
                                                      "(default); 2: the job alone on CPUs 0-1")  # fmt: skip
    p.add_argument("--reps", type=int, default=5, help="interleaved rounds; medians (default 5)")
    p.add_argument("--min-s", type=float, default=1.0, help="shortest taskset run in seconds (default 1)")
    args = p.parse_args()
    names = args.programs.split(",")
    bad = [n for n in names if n not in PATTERNS]
    if bad or args.reps < 1 or args.ranks < 2 or args.cpus not in (1, 2):
        p.error(f"unknown program(s) {bad}; choose from {', '.join(PATTERNS)}" if bad
                else "--reps >= 1, --ranks >= 2, --cpus 1 or 2")  # fmt: skip
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
        node = f"0-{args.cpus - 1}"
        with Manager(states["grouped"], cpus=node) as on, Manager(states["ungrouped"], cpus=node) as plain:
            if not on.status()["cpu_groups"].startswith("cgroup"):
                print(f"no job CPU groups here: {on.status()['cpu_groups']}", file=sys.stderr)
                return 2
            managers = {"grouped": on, "ungrouped": plain}
            for name in names:
                prog = Program(name, exe)
                # the iterations calibrated on the reference
                ref = scaled(prog, lambda: one(prog, "taskset", args.ranks, args.cpus, managers)[0], args.min_s)  # noqa: B023
                runs: dict[str, list[Run]] = {w: [] for w in ways}
                probes: dict[str, float] = dict.fromkeys(ways, 0.0)
                for rnd in range(args.reps):
                    for w in ways:
                        r, longest = one(prog, w, args.ranks, args.cpus, managers)
                        runs[w].append(r)
                        probes[w] = max(probes[w], longest)
                    print(f"  {name}: round {rnd + 1}/{args.reps}", file=sys.stderr, flush=True)
                bad_runs = sorted({w for w, rs in runs.items() for r in rs if not r.ok or r.checksum != ref.checksum})
                med = {w: statistics.median(r.seconds for r in rs) for w, rs in runs.items()}
                row = {"program": name, "ranks": args.ranks, "cpus": args.cpus, "iters": prog.iters, "seconds": med,
                       "bad": bad_runs, "worst": {w: max(r.seconds for r in rs) for w, rs in runs.items()},
                       "probe": probes}  # fmt: skip
                rows.append(row)
                print(line(row, queues), flush=True)
    head = ("program", "way", "grouped", "ungrouped", "taskset", "g/u", "g/ts", "u/ts", "probe g", "u", "ts")
    print("\n{:<14} {:<8} {:>8} {:>9} {:>8} {:>6} {:>6} {:>6} {:>8} {:>6} {:>6}".format(*head))
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
        # the longest start of a command on the job's CPU while a run lasted, by way
        **{f"probe_longest_s_{w.replace('@', '_')}": round(max(r["probe"][w] for r in rows), 3) for w in ways},
    }
    print(json.dumps(figures))
    return 1 if figures["bad_results"] else 0


def line(row: dict, queues: list[str]) -> str:
    s, ts = row["seconds"], row["seconds"]["taskset"]
    out = []
    for q in queues:
        g, u = s[f"{q}@grouped"], s[f"{q}@ungrouped"]
        pg, pu, pt = row["probe"][f"{q}@grouped"], row["probe"][f"{q}@ungrouped"], row["probe"]["taskset"]
        bad = "" if not row["bad"] else f"  BAD {','.join(row['bad'])}"
        out.append(f"{row['program']:<14} {q:<8} {g:8.3f} {u:9.3f} {ts:8.3f} {g / u:6.2f} {g / ts:6.2f} {u / ts:6.2f}"
                   f" {pg:8.3f} {pu:6.3f} {pt:6.3f}{bad}")  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
