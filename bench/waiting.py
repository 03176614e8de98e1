"""How a folded rank waits: the runtime's two-phase waiting against its variants, on the patterns.

The question this answers: on this machine, for this pattern and shape, does the runtime's rule for
waiting (yield first when the rank's calls have waited briefly, else sleep at once; libvmrt.c,
yield_wait) choose as well as always sleeping or always yielding would? On a 16-core VM the old rule
yielded through 120-us waits and ran a ring of 16 on 8 CPUs 2.2x as long as sleeping at once
(docs/vmruntime-journal.md, "Sixteen cores, again"); this is the benchmark that found it, made
repeatable.

Each case runs a fixed number of iterations, calibrated once so that the local-queue run asleep at once
takes --min-s to 3 --min-s, so every variant does the same work. Variants, in interleaved rounds
(medians of --reps):
- `taskset`: plain MPICH on the job's CPUs, split by hand from the compute job (the reference);
- `local`: local queues, the runtime as it is;
- `sleep`: local queues, every wait asleep at once (VMRT_YIELD_WAIT_US=0);
- `yield`: local queues, every wait yielding first for its window (VMRT_YIELD_WAIT_MAX_AVG_US huge);
- `default`: no options (the LBD chooses the queue);
- with --groups, `local/grp` and `sleep/grp`: the same under a second CPU manager that puts each job in a
  CPU cgroup of its own ([cpumanager] job_cpu_groups, where the kernel allows it);
- with --library NAME=PATH (repeatable), `local@NAME` and `default@NAME`: another build of libvmrt
  (VMRT_LIBRARY), for an A/B of a change in one invocation.
A job that does not fill the node runs beside a compute job of 2 ranks per remaining CPU, as in
bench/patterns.py. Every result is checked against the plain run's checksum.

    python bench/waiting.py [--programs ring,ring-rev,tree] [--shapes 4x2,8x2] [--reps 4] [--groups]
                            [--library old=/tmp/libvmrt-old.so]

Rows: seconds per variant (median [fastest-slowest]) and each / taskset, and under each row the queues
the detector chose in every default run (from the CPU manager's log). Last line: JSON, with the worst
and best of local / sleep and local / min(sleep, yield): whether the rule chose the better way to wait.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from patterns import NODE, PATTERNS, Program, Run, folded, parse_shapes, plain, scaled  # noqa: E402

from vmsched.vmruntime.testing import Manager, compile_c_program, cpu_list, unwind_on_sigterm  # noqa: E402

DEFAULT_PROGRAMS = ("ring", "ring-rev", "tree", "random-pairs", "alltoall", "master-worker")
ENV = {"sleep": {"VMRT_YIELD_WAIT_US": "0"}, "yield": {"VMRT_YIELD_WAIT_MAX_AVG_US": "1000000"}}


def one(way: str, prog: Program, nranks: int, cpus: int, managers: dict[str, Manager],
        libraries: dict[str, str]) -> Run:  # fmt: skip
    if way == "taskset":
        return plain(prog, nranks, cpus, "taskset", 60)
    base, _, lib = way.partition("@")
    base, _, grp = base.partition("/")
    env = dict(ENV.get(base, {}))
    if lib:
        env["VMRT_LIBRARY"] = libraries[lib]
    way = "default" if base == "default" else "local"
    return folded(managers["grouped" if grp else "plain"], prog, nranks, cpus, way, env)


def main() -> int:
    unwind_on_sigterm()  # the private CPU manager, the jobs and their directories go on SIGTERM too
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", default=",".join(DEFAULT_PROGRAMS), help=f"patterns: {', '.join(PATTERNS)}")
    p.add_argument("--shapes", default="4x2,8x2", help="comma-separated RANKSxCPUS (default 4x2,8x2)")
    p.add_argument("--reps", type=int, default=4, help="interleaved rounds; medians (default 4)")
    p.add_argument("--min-s", type=float, default=1.0, help="shortest calibration run in seconds (default 1)")
    p.add_argument("--groups", action="store_true", help="also local and sleep in a job CPU group")
    p.add_argument("--library", action="append", default=[], metavar="NAME=PATH",
                   help="also local and default with this build of libvmrt (repeatable)")  # fmt: skip
    args = p.parse_args()
    names = args.programs.split(",")
    bad = [n for n in names if n not in PATTERNS]
    if bad:
        p.error(f"unknown program(s) {', '.join(bad)}; choose from {', '.join(PATTERNS)}")
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as e:
        p.error(str(e))
    if args.reps < 1:
        p.error("--reps must be at least 1")
    libraries: dict[str, str] = {}
    for spec in args.library:
        name, sep, path = spec.partition("=")
        if not sep or not name or "/" in name or "@" in name or not Path(path).is_file():
            p.error(f"--library {spec!r}: expected NAME=PATH of an existing libvmrt build")
        libraries[name] = str(Path(path).resolve())
    ways = ["taskset", "local", "sleep", "yield", "default"]
    ways += ["local/grp", "sleep/grp"] if args.groups else []
    ways += [w for n in libraries for w in (f"local@{n}", f"default@{n}")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="vmsched-waiting-") as tmp:
        exe = compile_c_program(Path(__file__).resolve().parent / "patterns" / "patterns.c", Path(tmp))
        with ExitStack() as stack:
            managers = {}
            for name, on in (("plain", "false"), ("grouped", "true")) if args.groups else (("plain", "false"),):
                state = Path(tmp) / name
                state.mkdir()
                (state / "vmsched.toml").write_text(f"[cpumanager]\njob_cpu_groups = {on}\n")
                managers[name] = stack.enter_context(Manager(state, cpus=cpu_list(NODE)))
            if args.groups and not managers["grouped"].status()["cpu_groups"].startswith("cgroup"):
                print(f"no job CPU groups here: {managers['grouped'].status()['cpu_groups']}", file=sys.stderr)
                return 2
            for name in names:
                for nranks, cpus in shapes:
                    prog = Program(name, exe)
                    scaled(prog, lambda: one("sleep", prog, nranks, cpus, managers, libraries), args.min_s)  # noqa: B023
                    runs: dict[str, list[Run]] = {w: [] for w in ways}
                    for rnd in range(args.reps):
                        for w in ways:
                            runs[w].append(one(w, prog, nranks, cpus, managers, libraries))
                        print(f"  {name} {nranks}x{cpus}: round {rnd + 1}/{args.reps}", file=sys.stderr, flush=True)
                    rows.append(make_row(name, nranks, cpus, prog.iters, runs))
                    print(line(rows[-1]), flush=True)
                    for w, ds in rows[-1]["decisions"].items():
                        print(f"    {w}: {' | '.join(ds)}", flush=True)
    return report(rows)


def make_row(name: str, nranks: int, cpus: int, iters: int, runs: dict[str, list[Run]]) -> dict:
    ref = runs["taskset"][0]
    bad = sorted({w for w, rs in runs.items() for r in rs if r.capped or not r.ok or r.checksum != ref.checksum})
    seconds = {w: [r.seconds for r in rs] for w, rs in runs.items()}
    return {"program": name, "shape": f"{nranks}x{cpus}", "iters": iters, "bad": bad,
            "seconds": {w: statistics.median(v) for w, v in seconds.items()},
            "range": {w: (min(v), max(v)) for w, v in seconds.items()},
            "decisions": {w: [r.decisions for r in rs] for w, rs in runs.items()
                          if any(r.decisions for r in rs)}}  # fmt: skip


def line(row: dict) -> str:
    s, ts = row["seconds"], row["seconds"]["taskset"]
    cells = "  ".join(f"{w}={v:.3f} [{row['range'][w][0]:.3f}-{row['range'][w][1]:.3f}] ({v / ts:.2f}x)"
                      for w, v in s.items())  # fmt: skip
    return f"{row['program']} {row['shape']} (iters {row['iters']}): {cells}" + (
        f"  BAD {','.join(row['bad'])}" if row["bad"] else "")  # fmt: skip


def report(rows: list[dict]) -> int:
    print(f"\n{'program':<14} {'shape':<6} {'local':>7} {'sleep':>7} {'yield':>7} {'default':>8} {'taskset':>8}"
          f" {'l/sleep':>8} {'l/best':>7} {'l/ts':>6}")  # fmt: skip
    vs_sleep, vs_best, vs_ts = [], [], []
    for row in rows:
        s = row["seconds"]
        vs_sleep.append(s["local"] / s["sleep"])
        vs_best.append(s["local"] / min(s["sleep"], s["yield"]))
        vs_ts.append(s["local"] / s["taskset"])
        print(f"{row['program']:<14} {row['shape']:<6} {s['local']:7.3f} {s['sleep']:7.3f} {s['yield']:7.3f}"
              f" {s['default']:8.3f} {s['taskset']:8.3f} {vs_sleep[-1]:8.2f} {vs_best[-1]:7.2f} {vs_ts[-1]:6.2f}"
              + (f"  BAD {','.join(row['bad'])}" if row["bad"] else ""))  # fmt: skip
    figures = {
        "cases": len(rows),
        "cpus": len(NODE),
        "local_vs_sleep_worst": round(max(vs_sleep), 3),
        "local_vs_sleep_best": round(min(vs_sleep), 3),
        "local_vs_better_of_sleep_and_yield_worst": round(max(vs_best), 3),
        "local_vs_taskset_worst": round(max(vs_ts), 3),
        "local_vs_taskset_best": round(min(vs_ts), 3),
        "bad_results": sum(len(r["bad"]) for r in rows),
        "rows": [
            {
                "program": r["program"],
                "shape": r["shape"],
                "iters": r["iters"],
                "seconds": {w: round(v, 4) for w, v in r["seconds"].items()},
                "decisions": r["decisions"],
            }
            for r in rows
        ],  # fmt: skip
    }
    print(json.dumps(figures))
    return 1 if figures["bad_results"] else 0


if __name__ == "__main__":
    sys.exit(main())
