"""What vmsim simulates: jobs as the policies see them (QueuedJob) plus what only the clock knows (the
real run time at the requested size, the communication class), read from an SWF log or a thesis
parameter directory.

Pure functions over parsed inputs; `load` is the only one that reads files. Every rejection names the
file and line (WorkloadError), so that the command line can print it and exit 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from vmsched.config import LauncherConfig
from vmsched.launcher.policy.snapshot import QueuedJob
from vmsched.workloads.catalog import APPS
from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.metrics import CLASS_OF_QUEUE
from vmsched.workloads.params import job_requests, read_params
from vmsched.workloads.swf import UNKNOWN, SwfLog, machine_size, read_swf

MOLDABILITY = ("none", "thesis", "model")
_LAUNCHER_ESTIMATE = {"long": LauncherConfig.long_estimate_s, "short": LauncherConfig.short_estimate_s}
LONG_S = 1800.0  # thesis: a job is long when it runs more than 30 minutes


@dataclass(frozen=True)
class SimJob:
    """One job to simulate. `runtime` is its real run time with procs[0] ranks on as many CPUs;
    `speedup` maps a rank count to its speedup (for other allowed sizes)."""

    job: QueuedJob
    runtime: float
    comm: str = "mixed"
    downey_sigma: float | None = None  # the job follows Downey's speedup model with A = procs[0]
    measured: tuple[tuple[int, float], ...] = ()  # (ranks, run time on as many CPUs) known for other sizes

    def runtime_at(self, nranks: int) -> float:
        """Real run time with `nranks` ranks on as many CPUs."""
        full = self.job.procs[0]
        if nranks == full:
            return self.runtime
        for n, seconds in self.measured:
            if n == nranks:
                return seconds
        if self.downey_sigma is None:
            return self.runtime * full / nranks  # perfect speedup
        a, s = float(full), self.downey_sigma
        return self.runtime * downey_speedup(full, a, s) / downey_speedup(nranks, a, s)


@dataclass(frozen=True)
class Workload:
    jobs: tuple[SimJob, ...]
    cpus: int | None  # the machine size the input names (SWF header), if any
    source: str
    notes: tuple[str, ...] = ()


def downey_speedup(n: int, a: float, sigma: float) -> float:
    """Downey's speedup model (1997, low-variance form, sigma <= 1) for average parallelism `a`."""
    if n <= a:
        return a * n / (a + sigma * (n - 1) / 2)
    if n <= 2 * a - 1:
        return a * n / (sigma * (a - 0.5) + n * (1 - sigma / 2))
    return a


def estimate_for(run: float, requested: float | None, estimates: str) -> float:
    """The policies' estimate: the log's requested time (or the run time when the log has none),
    the run time itself ("perfect"), or the run time times a factor."""
    if estimates == "perfect":
        return run
    if estimates == "requested":
        return requested if requested is not None and requested > 0 else run
    return run * float(estimates)


def molded(job_id: int, submit: float, procs: int, estimate: float, job_class: str, moldability: str,
           ncpus: int) -> tuple[tuple[int, ...], int | None]:  # fmt: skip
    """Allowed rank counts and the user's MPL cap for a rigid log job.

    none: rigid, never folded (max MPL 1). thesis (ch. 5-6): the policy decides how far a job folds (up
    to its limit of max MPL 4): FJT folds long jobs, malleable backfilling shrinks expired backfilled
    ones. model: Cirne and Berman's moldable-job model as a size set (the powers of two below the
    request, and the request) with Downey's speedup; folding as in "thesis".
    """
    cap = 1 if moldability == "none" else None
    if moldability != "model":
        return (procs,), cap
    sizes = {procs} | {1 << k for k in range(procs.bit_length()) if 1 << k < procs}
    return tuple(sorted(sizes, reverse=True)), cap


def from_swf(log: SwfLog, *, estimates: str = "requested", moldability: str = "none", ncpus: int | None = None,
             first: int | None = None, start: float | None = None, end: float | None = None,
             skip_invalid: bool = False, sigma: float = 1.0) -> Workload:  # fmt: skip
    """Jobs of an SWF log (a Parallel Workloads Archive log or one of ours), in submit order, on
    `ncpus` CPUs (default: the header's MaxProcs, else MaxNodes)."""
    ncpus = ncpus or machine_size(log)
    if ncpus is None:
        raise WorkloadError("the header has no MaxProcs or MaxNodes: give the machine size with --cpus", log.source)
    rows = []
    skipped = 0
    for entry in log.job_lines:
        j = entry.job
        procs = j.allocated_processors if j.allocated_processors != UNKNOWN else j.requested_processors
        problems = []
        if j.submit_time == UNKNOWN:
            problems.append("submit time unknown (-1)")
        if j.run_time in (UNKNOWN, 0):
            problems.append(f"run time {'unknown (-1)' if j.run_time == UNKNOWN else 'is 0'}")
        if procs in (UNKNOWN, 0):
            problems.append("processor count unknown or 0 (fields 5 and 8)")
        if problems:
            if skip_invalid:
                skipped += 1
                continue
            raise WorkloadError(
                f"job {j.job_number}: {'; '.join(problems)} (--skip-invalid drops such jobs)", log.source, entry.line
            )
        rows.append((entry, j, int(procs)))
    if not rows:
        raise WorkloadError("no job to simulate", log.source)
    rows.sort(key=lambda r: (r[1].submit_time, r[1].job_number))
    origin = rows[0][1].submit_time
    if start is not None or end is not None:
        lo, hi = start if start is not None else -math.inf, end if end is not None else math.inf
        rows = [r for r in rows if lo <= r[1].submit_time - origin < hi]
    if first is not None:
        rows = rows[:first]
    if not rows:
        raise WorkloadError("the selected window (--jobs/--start/--end) holds no job", log.source)
    jobs = []
    for entry, j, procs in rows:
        if procs > ncpus and moldability == "none":
            raise WorkloadError(
                f"job {j.job_number} needs {procs} processors, the machine has {ncpus} (--cpus, or "
                "--moldability thesis lets long jobs fold)",
                log.source,
                entry.line,
            )
        requested = None if j.requested_time == UNKNOWN else float(j.requested_time)
        est = estimate_for(float(j.run_time), requested, estimates)
        job_class = CLASS_OF_QUEUE.get(int(j.queue_number)) or ("long" if est > LONG_S else "short")
        sizes, cap = molded(int(j.job_number), float(j.submit_time), procs, est, job_class, moldability, ncpus)
        if sizes[-1] > 4 * ncpus:
            raise WorkloadError(
                f"job {j.job_number} needs {procs} processors: more than 4 per CPU of the {ncpus}-CPU machine",
                log.source,
                entry.line,
            )
        user = str(int(j.user_id)) if j.user_id != UNKNOWN else "-"
        q = QueuedJob(int(j.job_number), float(j.submit_time), user, sizes, cap, job_class, est)
        jobs.append(SimJob(q, float(j.run_time), "mixed", sigma if moldability == "model" else None))
    notes = [f"{skipped} job(s) with unknown or zero run time or size dropped (--skip-invalid)"] if skipped else []
    return Workload(tuple(jobs), ncpus, log.source, tuple(notes))


def from_params(directory: Path, trace: str | None, *, estimates: str, time_scale: float,
                t1: dict[str, float]) -> Workload:  # fmt: skip
    """Jobs of a thesis parameter directory (what vmreplay submits): allowed counts from
    allowed_procs.txt, class from job_types.txt, run time T1/N of the application (the catalogue's, or
    `t1`; `t1["cg.W@2"]` is a measured run time at 2 ranks on 2 CPUs, used instead at that size),
    arrivals divided by `time_scale` as vmreplay does, estimates as the launcher makes them."""
    files = [directory / n for n in ("template.txt", "allowed_procs.txt", "job_types.txt")]
    trace_file = directory / (trace or "trace.swf")
    for f in [*files, trace_file]:
        if not f.exists():
            raise WorkloadError(f"missing {f.name}: a workload is an SWF log or a thesis parameter directory", f)
    requests = job_requests(read_params(*files, trace_file))
    if not requests:
        raise WorkloadError("the workload has no jobs", trace_file)
    keys = {spec.command.split("python -m ")[-1]: key for key, spec in APPS.items()}
    first = requests[0].submit_time
    jobs = []
    for r in requests:
        command = r.command_template.split("python -m ")[-1]
        key = keys.get(command)
        if key is None:
            raise WorkloadError(f"job {r.job_number}: no known application runs {r.command_template!r}", trace_file)
        work = t1.get(key, APPS[key].t1)
        counts = sorted({r.requested_procs, *(n for n in r.allowed_counts.choices() if n <= r.requested_procs)},
                        reverse=True)  # fmt: skip
        sizes = {int(k.split("@")[1]): v for k, v in t1.items() if k.split("@")[0] == key and "@" in k}
        run = sizes.get(counts[0], work / counts[0])
        # As the launcher estimates a job submitted without a time limit (vmreplay submits these).
        requested = r.estimate if r.estimate is not None else _LAUNCHER_ESTIMATE[r.job_class]
        est = estimate_for(run, requested, estimates)
        submit = first + (r.submit_time - first) / time_scale
        q = QueuedJob(r.job_number, submit, "-", tuple(counts), None, r.job_class, est)
        jobs.append(SimJob(q, run, APPS[key].communication, measured=tuple(sorted(sizes.items()))))
    return Workload(tuple(jobs), None, str(trace_file))


def load(path: Path, **options: object) -> Workload:
    """An SWF file or a parameter directory (or an SWF trace inside one, which is read as one)."""
    trace = options.pop("trace", None)
    params = {k: options.pop(k) for k in ("time_scale", "t1")}
    if path.is_dir() or (path.is_file() and (path.parent / "template.txt").exists()):
        directory, name = (path, trace) if path.is_dir() else (path.parent, path.name)
        return from_params(directory, name, estimates=str(options["estimates"]), **params)  # type: ignore[arg-type]
    log = read_swf(path)
    return from_swf(log, **options)  # type: ignore[arg-type]
