"""`vmsim`: the launcher's policies on a simulated clock, for archive logs of 10^4-10^5 jobs.

    vmsim LOG.swf --policy fcfs+easy:abort --policy 'fjt[fjt_long_mpl=1]+easy:malleable' --out results/
    vmsim WORKLOAD_DIR --policy fjt+easy:malleable --time-scale 10 --compare-with REPLAY_DIR

The input is an SWF log (any Parallel Workloads Archive log: the header's MaxProcs, else MaxNodes, gives
the machine size; --cpus overrides), or a thesis parameter directory as `vmreplay` takes it (run times
from the applications' T1). Each --policy is a launcher spec string. Per policy DIR/<policy>/ gets
result.swf, report.md and utilization.png exactly as vmreplay writes them; with several policies
DIR/comparison.md, response_by_class.png and relative_cdf.png. The output directory appears only when
the run is complete (it is built next to it and renamed).

Run times: a job runs its log run time at its requested size; at another size as its speedup says;
folded (more ranks than CPUs) as the measured runtime model says (vmsched/sim/runtime_model.json, made
by `vmsim-calibrate`).

--finish-latency/--arrival-latency model the launcher daemon's reaction time (seconds from a job's end,
or a submission, to the scheduling pass that acts on it; experiments/hardware_vs_sim.py measures them);
the default 0 is the ideal scheduler that archive studies assume.

--compare-with REPLAY_DIR (a vmreplay output directory of the same workload and policies) puts the
measured and simulated response times side by side: DIR/<policy>/vs_replay.md, vs_replay.png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from vmsched.config import load_config
from vmsched.launcher.energy import model_energy
from vmsched.launcher.policy import parse_policy_spec
from vmsched.launcher.policy.config import PolicyConfig
from vmsched.launcher.policy.core import can_ever_start
from vmsched.launcher.replay import slug
from vmsched.sim.compare import compare_with_replay
from vmsched.sim.engine import NO_LATENCY, JobRecord, Latency, simulate
from vmsched.sim.runtime_model import folded_runtime, load_model
from vmsched.sim.workload import MOLDABILITY, SimJob, Workload, load
from vmsched.workloads import metrics
from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.metrics import relative_performance, result_log, segments_from_records, summarize
from vmsched.workloads.plots import plot_relative_cdf, plot_response_by_class, plot_utilization
from vmsched.workloads.report import comparison_table, markdown, relative_tables, summary_tables
from vmsched.workloads.swf import write_swf

MARKER = "vmsim.json"  # in every complete output directory: what made it


class UsageError(Exception):
    """Bad options or input: printed, exit 2."""


def runtime_function(jobs: Sequence[SimJob], queue: str, model_path: Path | None) -> Callable:
    """The engine's run-time model: a job's real run time at its size, folded as the model says.
    With queue "lbd" a folded job gets the better of local and global queues, as the LBD aims to."""
    model = load_model(model_path)
    by_id = {j.job.job_id: j for j in jobs}

    def runtime(job, nranks: int, cpus: int) -> float:
        sim = by_id[job.job_id]
        base = sim.runtime_at(nranks)
        if cpus >= nranks:
            return base
        queues = ("local", "global") if queue == "lbd" else (queue,)
        return min(folded_runtime(model, base, nranks, cpus, sim.comm, q) for q in queues)

    return runtime


def to_metrics(rec: JobRecord, sim: SimJob) -> metrics.JobRecord:
    return metrics.JobRecord(
        id=rec.job_id, submit=rec.submit, start=rec.start, end=rec.end, procs_requested=sim.job.procs[0],
        procs_used=rec.nranks, requested_time=sim.job.estimate, job_class=sim.job.job_class,
        cpu_seconds=rec.cpu_seconds,
    )  # fmt: skip


def run_policy(workload: Workload, ncpus: int, cfg: PolicyConfig, runtime: Callable, console: Console,
               show: bool, latency: Latency = NO_LATENCY) -> list[JobRecord]:  # fmt: skip
    jobs = [j.job for j in workload.jobs]
    total = len(jobs)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, disable=not show, transient=True) as progress:  # fmt: skip
        task = progress.add_task(escape(cfg.spec()), total=total)
        step = max(1, total // 200)

        def tick(done: int) -> None:
            if done % step == 0 or done == total:
                progress.update(task, completed=done)

        return simulate(jobs, ncpus, cfg, runtime, progress=tick, latency=latency)


def run_energy(recs: list[metrics.JobRecord], ncpus: int) -> float | None:
    """The node's energy over the simulated run, by the launcher's power model (configured P_idle, P_max)."""
    if not recs:
        return None
    lc = load_config().launcher
    makespan = max(r.end for r in recs) - min(r.submit for r in recs)
    return model_energy(makespan, ncpus, lc.power_idle_w, lc.power_max_w, sum(r.cpu_time for r in recs))


def write_policy(out: Path, name: str, workload: Workload, ncpus: int, records: list[JobRecord],
                 notes: list[str]) -> tuple[metrics.Summary, list[metrics.JobRecord], str]:  # fmt: skip
    by_id = {j.job.job_id: j for j in workload.jobs}
    recs = [to_metrics(r, by_id[r.job_id]) for r in records]
    out.mkdir(parents=True)
    summary = summarize(recs, cpus=ncpus, energy_j=run_energy(recs, ncpus))
    write_swf(result_log(recs, cpus=ncpus, notes=[f"vmsim policy {name}", *notes]), out / "result.swf")
    aborts = sum(r.aborts for r in records)
    refolded = sum(1 for r in records if len({m for _, m, _ in r.history}) > 1)
    folded = sum(1 for r in records if any(0 < c < r.nranks for _, _, c in r.history))
    text = markdown(summary_tables(summary, title=f"{name} (simulated, {ncpus} CPUs)"))
    text += f"\n\naborted and requeued: {aborts} time(s); jobs whose max MPL changed while running: {refolded}; "
    text += f"jobs that ran folded at some time: {folded}\n"
    text += "".join(f"\n- {n}" for n in notes)
    (out / "report.md").write_text(text + "\n")
    plot_utilization(segments_from_records(recs), ncpus, out / "utilization.png")
    return summary, recs, text


def _fraction_or_mode(text: str) -> str:
    if text in ("perfect", "requested"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected perfect, requested or a factor > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the estimate factor must be > 0, got {text}")
    return text


def _positive(kind: type) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text}")
        return value

    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text}")
    return value


def _t1(items: Sequence[str]) -> dict[str, float]:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        size = key.partition("@")[2]
        try:
            out[key] = float(value)
            if size and int(size) < 1:
                raise ValueError
        except ValueError:
            raise UsageError(f"--t1 expects APP.CLASS=SECONDS or APP.CLASS@RANKS=SECONDS, got {item!r}") from None
        if not out[key] > 0:
            raise UsageError(f"--t1 {item}: seconds must be > 0")
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vmsim", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)  # fmt: skip
    ap.add_argument("workload", type=Path, help="SWF log, or thesis parameter directory (or a trace inside one)")
    ap.add_argument("--policy", action="append", required=True, help="launcher policy spec; repeat to compare")
    ap.add_argument("--out", type=Path, default=Path("results-sim"), help="output directory (default ./results-sim)")
    ap.add_argument("--cpus", type=_positive(int), help="machine size (default: the log's MaxProcs/MaxNodes)")
    ap.add_argument("--jobs", type=_positive(int), help="only the first N jobs (after --start/--end)")
    ap.add_argument("--start", type=_non_negative, help="only jobs submitted this many seconds after the first")
    ap.add_argument("--end", type=_non_negative, help="only jobs submitted before this many seconds after the first")
    ap.add_argument("--estimates", type=_fraction_or_mode, default="requested",
                    help="policy estimates: requested (the log's, else the run time), perfect, "
                         "or FACTOR x run time")  # fmt: skip
    ap.add_argument("--moldability", choices=MOLDABILITY, default="none",
                    help="none: rigid, never folded; thesis: the policy may fold any job to max MPL 4; model: "
                         "Cirne-Berman sizes (powers of two below the request), Downey's speedup")  # fmt: skip
    ap.add_argument(
        "--queue",
        choices=("lbd", "local", "global"),
        default="lbd",
        help="queue type of folded jobs in the runtime model (lbd: the better of the two)",
    )
    ap.add_argument("--finish-latency", type=_non_negative, default=0.0, metavar="SECONDS",
                    help="the launcher acts on a job's end this late (default 0)")  # fmt: skip
    ap.add_argument("--arrival-latency", type=_non_negative, default=0.0, metavar="SECONDS",
                    help="the launcher acts on a submission this late (default 0)")  # fmt: skip
    ap.add_argument("--model", type=Path, help="runtime model file (default: the committed calibration)")
    ap.add_argument("--skip-invalid", action="store_true", help="drop log jobs with unknown or zero run time or size")
    ap.add_argument("--trace", help="parameter directory: trace file inside it (default trace.swf)")
    ap.add_argument(
        "--time-scale",
        type=_positive(float),
        default=1.0,
        help="parameter directory: divide arrival times by this, as vmreplay --time-scale",
    )
    ap.add_argument(
        "--t1",
        action="append",
        default=[],
        metavar="APP.CLASS=SECONDS",
        help="parameter directory: an application's sequential run time (default: the catalogue's)",
    )
    ap.add_argument("--compare-with", type=Path, metavar="REPLAY_DIR", help="a vmreplay output of the same workload")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    console = Console(stderr=True)
    try:
        return _run(args, console)
    except (UsageError, WorkloadError) as e:
        print(f"vmsim: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, console: Console) -> int:
    cfgs = []
    for spec in args.policy:
        try:
            cfgs.append(parse_policy_spec(spec))
        except ValueError as e:
            raise UsageError(f"--policy {spec}: {e}") from None
    if args.start is not None and args.end is not None and args.end <= args.start:
        raise UsageError("--end must be after --start")
    if not args.workload.exists():
        raise WorkloadError("no such file or directory", args.workload)
    workload = load(args.workload, estimates=args.estimates, moldability=args.moldability, ncpus=args.cpus,
                    first=args.jobs, start=args.start, end=args.end, skip_invalid=args.skip_invalid,
                    trace=args.trace, time_scale=args.time_scale, t1=_t1(args.t1))  # fmt: skip
    ncpus = args.cpus or workload.cpus or len(os.sched_getaffinity(0))
    for cfg in cfgs:
        seen = set()  # whether a job can ever start depends on its shape only
        for sim in workload.jobs:
            shape = (sim.job.procs, sim.job.max_mpl, sim.job.job_class)
            if shape not in seen and not can_ever_start(sim.job, ncpus, cfg):
                raise UsageError(f"job {sim.job.job_id} ({sim.job.procs[0]} ranks) can never start on {ncpus} CPUs "
                                 f"under {cfg.spec()}")  # fmt: skip
            seen.add(shape)
    try:
        runtime = runtime_function(workload.jobs, args.queue, args.model)
    except (OSError, ValueError) as e:
        raise UsageError(f"runtime model: {e}") from None
    out = args.out.resolve()
    if out.exists() and not (out / MARKER).exists():
        raise UsageError(f"{out} exists and is not a vmsim output directory: choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        _simulate_all(args, cfgs, workload, ncpus, runtime, tmp, console)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    console.print(f"results in {out}/")
    return 0


def _simulate_all(args: argparse.Namespace, cfgs: list[PolicyConfig], workload: Workload, ncpus: int,
                  runtime: Callable, out: Path, console: Console) -> None:  # fmt: skip
    summaries, records = {}, {}
    show = console.is_terminal
    notes = [f"input {workload.source}: {len(workload.jobs)} jobs on {ncpus} CPUs", f"estimates {args.estimates}",
             f"moldability {args.moldability}", f"queues of folded jobs {args.queue}", *workload.notes]  # fmt: skip
    latency = Latency(arrival=args.arrival_latency, finish=args.finish_latency)
    if latency != NO_LATENCY:
        notes.append(f"launcher latency: {latency.finish:g} s after a finish, {latency.arrival:g} s after an arrival")
    meta = {"argv": sys.argv, "input": workload.source, "jobs": len(workload.jobs), "cpus": ncpus,
            "estimates": args.estimates, "moldability": args.moldability, "queue": args.queue,
            "latency": {"finish_s": latency.finish, "arrival_s": latency.arrival}, "policies": {}}  # fmt: skip
    for cfg in cfgs:
        name = cfg.spec()
        t0 = time.perf_counter()
        recs = run_policy(workload, ncpus, cfg, runtime, console, show, latency)
        took = time.perf_counter() - t0
        summary, mrecs, text = write_policy(out / slug(name), name, workload, ncpus, recs, notes)
        summaries[name], records[name] = summary, mrecs
        meta["policies"][name] = {"dir": slug(name), "seconds": round(took, 3)}
        console.print(f"{escape(name)}: {len(recs)} jobs simulated in {took:.2f} s")
        if args.compare_with is not None:
            console.print(escape(compare_with_replay(args.compare_with, name, mrecs, out / slug(name))))
    tables = [comparison_table(summaries)]
    names = list(records)
    rels = [relative_performance(records[names[0]], records[n], label_a=names[0], label_b=n) for n in names[1:]]
    for rel in rels:
        tables += relative_tables(rel)
    (out / "comparison.md").write_text(markdown(tables) + "\n")
    plot_response_by_class(summaries, out / "response_by_class.png")
    if rels:
        plot_relative_cdf(rels, out / "relative_cdf.png")
    (out / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
    console.print(escape(markdown(tables[:1])))


if __name__ == "__main__":
    sys.exit(main())
