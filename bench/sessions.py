"""Ranks that share one session, as a Slurm step's tasks share slurmstepd's: with and without a session per rank.

With the kernel's autogroups each session in the root CPU cgroup is scheduled as one group. hydra's
`mpiexec` (vmrun's) makes every rank a session of its own; a Slurm step's tasks all stay in slurmstepd's
session, and `mpiexec.gforker`'s ranks in gforker's. The runtime makes each folded rank a session of its
own (libvmrt.c, leave_session; `VMRT_OWN_SESSION=0` turns that off). This bench runs the same folded job
alone on the node's CPUs (--cpus) four ways, in interleaved rounds:
- `shared`: `mpiexec.gforker` in a session of its own, `VMRT_OWN_SESSION=0`: every rank in that one
  session (what a Slurm step was before the runtime left it);
- `own`: the same with the runtime's default, every folded rank a session of its own;
- `hydra`: `vmrun` (hydra's mpiexec: every rank a session of its own from the start);
- `taskset`: plain MPICH on the same CPUs (hydra's mpiexec), the reference for time.
While each run lasts, one probe per CPU starts `taskset -c CPU true` every PROBE_EVERY_S and times it to
its end: what a daemon, a user's shell or the next job's slurmstepd beside the job waits for a CPU.

    python bench/sessions.py [--programs send,ring,alltoall,...] [--reps 3] [--ranks 4] [--cpus 2]
                             [--min-s 1] [--plot sessions.png]

Programs: the plain-MPI C patterns of bench/patterns/patterns.c and the apps of vmsched.apps (run by name,
their class scaled up until a run lasts), written with no knowledge of the runtime; each result is
checked against the taskset run's. Rows: median seconds per way (the program's own timing, and the wall
clock from launch to exit), own / shared, own / hydra, each / taskset, and the probes' longest start per
way. Last line: JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_groups import StartProbe  # noqa: E402
from patterns import PATTERNS, Program, Run, run, scaled  # noqa: E402

from vmsched.apps import registry  # noqa: E402
from vmsched.vmruntime.testing import (  # noqa: E402
    Manager,
    compile_c_program,
    cpu_list,
    mpiexec,
    one_session_job,
    round_order,
    unwind_on_sigterm,
    vmrun_cmd,
)

WAYS = ("shared", "own", "hydra", "taskset")
DEFAULT_PROGRAMS = ("send", "ring", "alltoall", "random-pairs", "halo2d", "master-worker")
JOB_IDS = itertools.count(7001)


def program(name: str, exe: Path) -> Program:
    if name in PATTERNS:
        return Program(name, exe)
    prog = Program(name, None)
    prog.cls = prog.cls or registry.get_spec(name).classes[0]
    return prog


def one(m: Manager, prog: Program, way: str, nranks: int, cpus: tuple[int, ...]) -> tuple[Run, float, float]:
    """One run of `way` on `cpus`: its result, its wall clock and the probes' longest start meanwhile."""
    argv = prog.argv(nranks)
    with ExitStack() as stack:
        probes = [stack.enter_context(StartProbe(c)) for c in cpus]
        t0 = time.monotonic()
        if way == "taskset":
            r = run(["taskset", "-c", cpu_list(cpus), mpiexec(), "-n", str(nranks), *argv], prog)
        elif way == "hydra":
            r = run(vmrun_cmd(m.state_dir, nranks, -(-nranks // len(cpus)), argv), prog, m.env())
        else:
            r = folded_by_gforker(m, prog, nranks, len(cpus), own=way == "own")
        wall = time.monotonic() - t0
    return r, wall, max(p.longest for p in probes)


def folded_by_gforker(m: Manager, prog: Program, nranks: int, ncpus: int, own: bool) -> Run:
    """The job started by `mpiexec.gforker` in a session of its own, which its ranks share unless the runtime
    moves each into its own (testing.one_session_job)."""
    mpl = -(-nranks // ncpus)
    with one_session_job(m, next(JOB_IDS), nranks, mpl, prog.argv(nranks), own_session=own) as (cmd, env):
        return run(cmd, prog, env)


def main() -> int:
    unwind_on_sigterm()  # the private CPU manager and the jobs go on SIGTERM too
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", default=",".join(DEFAULT_PROGRAMS),
                   help=f"patterns ({', '.join(PATTERNS)}) or apps ({', '.join(registry.SPECS)})")  # fmt: skip
    p.add_argument("--ranks", type=int, default=4, help="ranks of the folded job (default 4)")
    p.add_argument("--cpus", type=int, default=2, help="the job's CPUs: 0 to N-1 (default 2)")
    p.add_argument("--reps", type=int, default=3, help="interleaved rounds; medians (default 3)")
    p.add_argument("--min-s", type=float, default=1.0, help="shortest taskset run in seconds (default 1)")
    p.add_argument("--plot", type=Path, help="also draw the figures into this image (PNG)")
    args = p.parse_args()
    names = args.programs.split(",")
    bad = [n for n in names if n not in PATTERNS and n not in registry.SPECS]
    if bad:
        p.error(f"unknown program(s) {bad}")
    if args.reps < 1 or not 1 <= args.cpus <= len(os.sched_getaffinity(0)) or args.ranks < 2 * args.cpus:
        p.error("--reps >= 1; --cpus between 1 and this node's; --ranks at least 2 per CPU (a folded job)")
    cpus = tuple(range(args.cpus))
    rows = []
    with tempfile.TemporaryDirectory(prefix="vmsched-sessions-") as tmp:
        exe = compile_c_program(Path(__file__).resolve().parent / "patterns" / "patterns.c", Path(tmp))
        with Manager(Path(tmp) / "state", cpus=cpu_list(cpus)) as m:
            for name in names:
                prog = program(name, exe)
                if not prog.allows(args.ranks):
                    print(f"  {name}: does not run at {args.ranks} ranks; skipped", file=sys.stderr)
                    continue
                ref = scaled(prog, lambda: one(m, prog, "taskset", args.ranks, cpus)[0], args.min_s)  # noqa: B023
                got: dict[str, list[tuple[Run, float, float]]] = {w: [] for w in WAYS}
                for rnd in range(args.reps):
                    for w in round_order(WAYS, rnd):
                        got[w].append(one(m, prog, w, args.ranks, cpus))
                    print(f"  {prog.label}: round {rnd + 1}/{args.reps}", file=sys.stderr, flush=True)
                rows.append(make_row(prog, args.ranks, len(cpus), got, ref))
                print_row(rows[-1], flush=True)
    if not rows:
        print("no program ran", file=sys.stderr)
        return 2
    print(f"\n{'program':<18} {'way':<8} {'seconds':>8} {'wall':>7} {'/taskset':>9} {'probe s':>8}")
    for row in rows:
        print_row(row)
    figures = summary(rows)
    if args.plot:
        draw(rows, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    print(json.dumps(figures))
    return 1 if figures["bad_results"] else 0


def make_row(prog: Program, nranks: int, ncpus: int, got: dict[str, list[tuple[Run, float, float]]], ref: Run) -> dict:
    return {
        "program": prog.label, "ranks": nranks, "cpus": ncpus,
        "seconds": {w: statistics.median(r.seconds for r, _, _ in rs) for w, rs in got.items()},
        "wall": {w: statistics.median(wall for _, wall, _ in rs) for w, rs in got.items()},
        "probe": {w: max(pr for _, _, pr in rs) for w, rs in got.items()},
        "bad": sorted({w for w, rs in got.items() for r, _, _ in rs if not r.ok or r.checksum != ref.checksum}),
    }  # fmt: skip


def print_row(row: dict, flush: bool = False) -> None:
    s, ts = row["seconds"], row["seconds"]["taskset"]
    for w in WAYS:
        bad = "  BAD RESULT" if w in row["bad"] else ""
        print(f"{row['program']:<18} {w:<8} {s[w]:8.3f} {row['wall'][w]:7.2f} {s[w] / ts:9.2f} "
              f"{row['probe'][w]:8.3f}{bad}", flush=flush)  # fmt: skip
    print(f"{row['program']:<18} own / shared {s['own'] / s['shared']:.2f}, own / hydra {s['own'] / s['hydra']:.2f}; "
          f"wall own / shared {row['wall']['own'] / row['wall']['shared']:.2f}", flush=flush)  # fmt: skip


def summary(rows: list[dict]) -> dict:
    def ratio(a: str, b: str, key: str = "seconds") -> list[float]:
        return [row[key][a] / row[key][b] for row in rows]

    return {
        "cases": len(rows),
        "own_vs_shared_best": round(min(ratio("own", "shared")), 3),
        "own_vs_shared_worst": round(max(ratio("own", "shared")), 3),
        "own_vs_hydra_best": round(min(ratio("own", "hydra")), 3),
        "own_vs_hydra_worst": round(max(ratio("own", "hydra")), 3),
        "wall_own_vs_shared_worst": round(max(ratio("own", "shared", "wall")), 3),
        **{f"{w}_vs_taskset_worst": round(max(ratio(w, "taskset")), 3) for w in WAYS[:3]},
        # the longest start of a command on one of the job's CPUs while a run lasted, by way
        **{f"probe_longest_s_{w}": round(max(row["probe"][w] for row in rows), 3) for w in WAYS},
        "bad_results": sum(len(row["bad"]) for row in rows),
    }


def draw(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    x = range(len(rows))
    width = 0.27
    for i, w in enumerate(WAYS[:3]):
        left.bar([k + (i - 1) * width for k in x], [row["seconds"][w] / row["seconds"]["taskset"] for row in rows],
                 width, label=w)  # fmt: skip
        right.bar([k + (i - 1) * width for k in x], [max(row["probe"][w], 1e-3) for row in rows], width, label=w)
    for ax in (left, right):
        ax.set_xticks(list(x), [row["program"] for row in rows], rotation=30, ha="right")
        ax.legend()
    left.axhline(1.0, color="grey", lw=0.8)
    left.set_ylabel("median time / taskset")
    right.set_yscale("log")
    right.set_ylabel("longest start of `true` beside the job (s)")
    fig.suptitle(f"{rows[0]['ranks']} ranks folded on {rows[0]['cpus']} CPUs: ranks in one session or in their own")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
