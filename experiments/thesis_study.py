"""The thesis's chapter 5-6 comparison, at scale, with vmsim: does virtual malleability beat rigid
scheduling, and by how much?

Policies: FCFS+EASY abort (the baseline), FCFS+EASY malleable, FJT, FJT(1)+EASY malleable, FJT(1)+EASY
abort, conservative (FCFS with conservative backfilling, expired jobs aborted), conservative malleable
(the same, expired jobs shrunk).
Workloads: the Lublin-model log (../shared/data/lublin_256.swf), its first --jobs jobs, on 64 and 256
CPUs (job sizes scaled by CPUs/256, at least 1), at offered loads 0.6-1.0 (inter-arrival times scaled so
that sum(procs x run time) / (CPUs x submit span) is the load); rigid log jobs become vmsched jobs as in
ch. 5 (--moldability thesis: long jobs, > 30 min, may fold to max MPL 4); estimates are the run times
times --estimate-factor; folded jobs run as the committed runtime model says.

    python experiments/thesis_study.py [--jobs 3000] [--log LOG.swf] [--out docs/vmsim_study.md]

Prints the table (mean response of all / long / short jobs, mean bounded slowdown, and the response
relative to FCFS+EASY abort) and writes it, with this command, to --out.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmsched.launcher.policy import parse_policy_spec  # noqa: E402
from vmsched.sim.cli import runtime_function  # noqa: E402
from vmsched.sim.engine import simulate  # noqa: E402
from vmsched.sim.workload import SimJob, from_swf  # noqa: E402
from vmsched.workloads.errors import WorkloadError  # noqa: E402
from vmsched.workloads.metrics import bounded_slowdown  # noqa: E402
from vmsched.workloads.swf import machine_size, read_swf  # noqa: E402

LUBLIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "lublin_256.swf"
POLICIES = {
    "FCFS+EASY abort": "fcfs+easy:abort",
    "FCFS+EASY malleable": "fcfs+easy:malleable",
    "FJT": "fjt",
    "FJT(1)+EASY malleable": "fjt[fjt_long_mpl=1]+easy:malleable",
    "FJT(1)+EASY abort": "fjt[fjt_long_mpl=1]+easy:abort",
    "conservative": "fcfs+conservative:abort",
    "conservative malleable": "fcfs+conservative:malleable",
}
BASELINE = "FCFS+EASY abort"
TAU = 10.0  # bounded slowdown threshold (s)


def scaled(jobs: list[SimJob], ncpus: int, load: float, logged: int = 256) -> list[SimJob]:
    """Sizes scaled from the logged machine's `logged` CPUs to `ncpus`, arrivals spaced to offer `load`."""
    out = []
    for s in jobs:
        sizes = sorted({max(1, round(p * ncpus / logged)) for p in s.job.procs}, reverse=True)
        out.append(replace(s, job=replace(s.job, procs=tuple(sizes))))
    first, last = out[0].job.submit_time, out[-1].job.submit_time
    work = sum(s.job.procs[0] * s.runtime for s in out)
    factor = work / (ncpus * (last - first)) / load
    return [replace(s, job=replace(s.job, submit_time=first + (s.job.submit_time - first) * factor)) for s in out]


def run(jobs: list[SimJob], ncpus: int, spec: str) -> dict[str, float]:
    records = simulate([s.job for s in jobs], ncpus, parse_policy_spec(spec), runtime_function(jobs, "lbd", None))
    by_id = {s.job.job_id: s for s in jobs}
    resp = {r.job_id: r.response for r in records}
    longs = [resp[j] for j in resp if by_id[j].job.job_class == "long"]
    shorts = [resp[j] for j in resp if by_id[j].job.job_class == "short"]
    bsld = [bounded_slowdown(r.wait, r.end - r.start, TAU) for r in records]
    return {"resp": statistics.fmean(resp.values()), "long": statistics.fmean(longs) if longs else 0.0,
            "short": statistics.fmean(shorts) if shorts else 0.0, "bsld": statistics.fmean(bsld)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--cpus", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--loads", type=float, nargs="+", default=[0.6, 0.8, 0.9, 1.0])
    ap.add_argument("--estimate-factor", type=float, default=1.0)
    ap.add_argument("--moldability", choices=("none", "thesis", "model"), default="thesis")
    ap.add_argument("--policy", action="append", choices=list(POLICIES),
                    help=f"only these (repeat; {BASELINE}, the baseline, always runs; default: all)")  # fmt: skip
    ap.add_argument("--log", type=Path, default=LUBLIN,
                    help="an SWF log (any Parallel Workloads Archive log; default: the Lublin-model log)")  # fmt: skip
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    chosen = {n: s for n, s in POLICIES.items() if not args.policy or n in args.policy or n == BASELINE}
    try:
        log = read_swf(args.log)
        logged = machine_size(log)
        if logged is None:
            raise WorkloadError("the header has no MaxProcs or MaxNodes: the logged machine's size is unknown",
                                args.log)  # fmt: skip
        base = from_swf(log, estimates=str(args.estimate_factor), moldability=args.moldability, first=args.jobs,
                        ncpus=logged).jobs  # fmt: skip
    except WorkloadError as e:
        print(f"thesis_study: {e}", file=sys.stderr)
        return 2
    lines = ["| CPUs | load | policy | mean response (s) | long (s) | short (s) | mean bounded slowdown | "
             f"response / {BASELINE} |", "|---:|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    t0 = time.perf_counter()
    for ncpus in args.cpus:
        for load in args.loads:
            jobs = scaled(list(base), ncpus, load, logged)
            results = {}
            for name, spec in chosen.items():
                results[name] = run(jobs, ncpus, spec)
                print(f"  {ncpus} CPUs, load {load}: {name} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
            ref = results[BASELINE]["resp"]
            for name, r in results.items():
                lines.append(f"| {ncpus} | {load:.1f} | {name} | {r['resp']:,.0f} | {r['long']:,.0f} | "
                             f"{r['short']:,.0f} | {r['bsld']:,.1f} | {r['resp'] / ref:.2f} |")  # fmt: skip
    table = "\n".join(lines)
    print(table)
    if args.out:
        command = "python experiments/thesis_study.py " + shlex.join(sys.argv[1:])  # copy-pasteable
        args.out.write_text(f"Regenerate: `{command}`\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
