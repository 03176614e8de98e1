"""`vmsim-calibrate`: measure the folding cost of the apps on this node and fit the runtime model.

The committed vmsched/sim/runtime_model.json was made, from the repository root, by

    vmsim-calibrate --reps 6 --out vmsched/sim/runtime_model.json

(six runs per cell rather than three: on 2026-11-28 two calibrations of --reps 3 moved single curve points
by up to 0.15, the runs of one cell spreading by up to 1.6x; docs/vmsim.md, "Runtime model").

It starts a private CPU manager that owns P CPUs (default P = 2) and runs each app, for real, with
vmrun at N = P·m ranks and max MPL m for m in 1, 2, 4, on a fixed local and a fixed global queue (the
mechanism of bench/lbd.py: the job's minimum partition is all the manager's CPUs, so it runs at MPL m).
The time is the app's own timed section (its VMAPP result line, which must say verified); each cell is
the median of --reps runs, and runtime_model.fit turns the runs into curves s(m) per communication class.

    vmsim-calibrate [--out FILE] [--reps 3] [--apps ep,mg,ft,cg,sweep] [--partitions 2] [--quick]

The node is shared: a run during which other processes (or the hypervisor's steal) took more than
10 % of the partition's CPU time is rerun once the node is quiet (up to 3 times); the discarded runs are
kept in the file's "discarded_runs". Without --out the document is printed on stdout. A failed or
unverified run stops the calibration with exit status 1 and writes nothing; bad options exit with 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from vmsched.apps import registry
from vmsched.apps.result import parse_result
from vmsched.config import format_cpu_list
from vmsched.sim.runtime_model import DEFAULT_PATH, FORMAT, MPL_POINTS, QUEUES, Measurement, RuntimeModel, fit
from vmsched.vmruntime.testing import Manager, started_job, unwind_on_sigterm, vmrun_cmd

# App -> (class for a full calibration, class for --quick). Full classes run >= 1 s at MPL 1 with 2
# ranks on this node (2026-11-28, the apps keeping their freed memory: ep W 5.3 s, mg/ft S 1.1-1.7 s,
# cg W 3.9-4.1 s, sweep W about 6 s; ep S 0.6-0.8 s and the S runs of cg and sweep 0.3-1.0 s).
APP_CLASSES: dict[str, tuple[str, str]] = {
    "ep": ("W", "S"), "mg": ("S", "S"), "ft": ("S", "S"), "cg": ("W", "S"), "sweep": ("W", "S"),
    "send": ("S", "S"),
}  # fmt: skip
NOT_CALIBRATED = {
    "ring": "its work grows with the rank count (every lap visits every rank), so T(N)/T(P) is no folding cost",
    "btmz": "it needs a perfect-square rank count, and P, 2P and 4P cannot all be squares",
}
DEFAULT_APPS = ("ep", "mg", "ft", "cg", "sweep")
RUN_TIMEOUT_S = {False: 600.0, True: 120.0}  # by --quick
MIN_BASE_S = 1.0  # a full calibration's MPL-1 runs should last this long, or start-up noise dominates
# The node is shared: a run during which other processes took more than FOREIGN_MAX_PCT of the
# partition's CPU time is discarded and rerun (at most RETRIES times, by --quick) once the node is quiet.
FOREIGN_MAX_PCT = 10.0
RETRIES = {False: 3, True: 0}
QUIET_WAIT_S = 60.0


class RunFailed(Exception):
    """An app run that did not end with a verified result."""


@dataclass(frozen=True)
class RunSpec:
    app: str
    cls: str
    queue: str
    cpus: int
    mpl: int
    rep: int

    @property
    def nranks(self) -> int:
        return self.cpus * self.mpl

    def label(self) -> str:
        return (f"{self.app}.{self.cls} {self.queue} MPL {self.mpl} ({self.nranks} ranks on {self.cpus} CPU"
                f"{'s' if self.cpus > 1 else ''}) rep {self.rep + 1}")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vmsim-calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help=f"write the model here (the committed one: {_repo_relative()})")
    p.add_argument("--reps", type=int, help="runs per cell, the median is kept (default 3; 1 with --quick)")
    p.add_argument("--apps", default=",".join(DEFAULT_APPS), help="comma-separated apps (default %(default)s)")
    p.add_argument("--partitions", default="2", help="partition sizes P to measure on, e.g. 1,2 (default 2)")
    p.add_argument("--quick", action="store_true", help="class S and one run per cell (for tests)")
    args = p.parse_args(argv)
    if args.reps is None:
        args.reps = 1 if args.quick else 3
    if args.reps < 1:
        p.error("--reps must be >= 1")
    node = sorted(os.sched_getaffinity(0))
    try:
        args.partitions = sorted({int(x) for x in args.partitions.split(",")})
    except ValueError:
        p.error(f"--partitions must be comma-separated integers, not {args.partitions!r}")
    if not all(1 <= x <= len(node) for x in args.partitions):
        p.error(f"--partitions must lie between 1 and the {len(node)} CPUs this process may use")
    args.apps = [a.strip() for a in args.apps.split(",") if a.strip()]
    if not args.apps:
        p.error("--apps is empty")
    for app in args.apps:
        if app in NOT_CALIBRATED:
            p.error(f"app {app!r} cannot be calibrated: {NOT_CALIBRATED[app]}")
        if app not in APP_CLASSES:
            p.error(f"unknown app {app!r}; apps: {', '.join(APP_CLASSES)}")
        spec = registry.get_spec(app)
        bad = [P * m for P in args.partitions for m in MPL_POINTS if not spec.allowed(P * m)]
        if bad:
            p.error(f"app {app!r} allows {spec.allowed_text()}, not {bad} (ranks = P x MPL); try other --partitions")
    args.node_cpus = node
    return args


def _repo_relative() -> str:
    try:
        return str(DEFAULT_PATH.relative_to(Path.cwd()))
    except ValueError:
        return str(DEFAULT_PATH)


def plan(apps: list[str], partitions: list[int], reps: int, quick: bool) -> list[RunSpec]:
    """All runs, repetition by repetition, so that a slow spell of the machine spreads over the cells."""
    return [RunSpec(app, APP_CLASSES[app][quick], queue, cpus, mpl, rep)
            for cpus in partitions for rep in range(reps) for app in apps for queue in QUEUES
            for mpl in MPL_POINTS]  # fmt: skip


class LoadMeter:
    """CPU seconds that processes other than this calibration (and steal by the hypervisor) took on
    the partition's CPUs: non-idle time of those CPUs in /proc/stat minus what this process, its reaped
    children (the jobs) and the CPU manager used."""

    def __init__(self, cpus: list[int], manager: Manager | None = None) -> None:
        self.cpus = {f"cpu{c}" for c in cpus}
        self.manager = psutil.Process(manager.proc.pid) if manager is not None and manager.proc else None
        self.tick = os.sysconf("SC_CLK_TCK")

    def _busy_s(self) -> float:
        busy = 0
        for line in Path("/proc/stat").read_text().splitlines():
            name, *fields = line.split()
            if name in self.cpus:
                user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
                busy += user + nice + system + irq + softirq + steal
        return busy / self.tick

    def _ours_s(self) -> float:
        ours = sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF,
                                                                              resource.RUSAGE_CHILDREN)))  # fmt: skip
        if self.manager is not None:
            t = self.manager.cpu_times()
            ours += t.user + t.system
        return ours

    def reading(self) -> tuple[float, float]:
        return self._busy_s(), self._ours_s()

    def foreign_pct(self, before: tuple[float, float], after: tuple[float, float], wall: float) -> float:
        foreign = (after[0] - before[0]) - (after[1] - before[1])
        return max(0.0, 100.0 * foreign / (wall * len(self.cpus))) if wall > 0 else 0.0

    def wait_quiet(self, max_wait: float, window: float = 1.0) -> None:
        deadline = time.monotonic() + max_wait
        while time.monotonic() < deadline:
            before = self.reading()
            time.sleep(window)
            if self.foreign_pct(before, self.reading(), window) <= FOREIGN_MAX_PCT:
                return


def run_measured(manager: Manager, meter: LoadMeter, spec: RunSpec, quick: bool,
                 discarded: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """run_one, rerun while other processes took too much of the partition (those runs go to `discarded`)."""
    for attempt in range(RETRIES[quick] + 1):
        before = meter.reading()
        record = run_one(manager, spec, RUN_TIMEOUT_S[quick])
        record["foreign_cpu_pct"] = round(meter.foreign_pct(before, meter.reading(), record["wall_s"]), 1)
        if record["foreign_cpu_pct"] <= FOREIGN_MAX_PCT or attempt == RETRIES[quick]:
            return record
        discarded.append(record)
        meter.wait_quiet(QUIET_WAIT_S)
    raise AssertionError("unreachable")


def run_one(manager: Manager, spec: RunSpec, timeout: float) -> dict[str, Any]:
    """Run one app folded as `spec` says under `manager`; its raw record, or RunFailed."""
    argv = registry.command(spec.app, spec.cls)
    cmd = vmrun_cmd(manager.state_dir, spec.nranks, spec.mpl, argv, queue=spec.queue)
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    with started_job(cmd, env=manager.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # the block's end takes the whole job, and its killed ranks' segments
            raise RunFailed(f"{spec.label()}: no result within {timeout:.0f} s") from None
    wall = time.monotonic() - t0
    try:
        res = parse_result(out)
    except ValueError as e:
        raise RunFailed(f"{spec.label()}: exit status {proc.returncode}, {e}; stderr: {err.strip()[-1500:]}") from None
    if proc.returncode != 0 or res["verified"] is not True or res["ranks"] != spec.nranks:
        raise RunFailed(f"{spec.label()}: exit status {proc.returncode}, verified {res['verified']}, "
                        f"ranks {res['ranks']}; stderr: {err.strip()[-1500:]}")  # fmt: skip
    return {"app": spec.app, "class": spec.cls, "comm_class": registry.get_spec(spec.app).comm_degree,
            "queue": spec.queue, "cpus": spec.cpus, "nranks": spec.nranks, "mpl": spec.mpl, "rep": spec.rep,
            "seconds": float(res["time"]), "wall_s": round(wall, 3), "mpi_pct": res["mpi_pct"],
            "checksum": res["checksum"], "loadavg_1m": round(load, 2)}  # fmt: skip


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def run_warnings(runs: list[dict[str, Any]], quick: bool) -> list[str]:
    out = []
    short = sorted({f"{r['app']}.{r['class']}" for r in runs if r["mpl"] == 1 and r["seconds"] < MIN_BASE_S})
    if short and not quick:
        out.append(f"MPL-1 runs shorter than {MIN_BASE_S} s: {', '.join(short)}")
    busy = [r for r in runs if r["foreign_cpu_pct"] > FOREIGN_MAX_PCT]
    if busy:
        out.append(
            f"{len(busy)} run(s) kept although other processes took more than {FOREIGN_MAX_PCT} % of the "
            f"partition (worst {max(r['foreign_cpu_pct'] for r in busy)} %)"
        )
    return out


def document(model: RuntimeModel, runs: list[dict[str, Any]], discarded: list[dict[str, Any]],
             args: argparse.Namespace, wall_s: float) -> dict[str, Any]:  # fmt: skip
    return {
        "format": FORMAT,
        "command": model.command,
        "date": model.date,
        "host": {"cpu_model": model.host, "node_cpus": len(args.node_cpus)},
        "definition": "s(m) = T(N ranks on P CPUs) / T(P ranks on P CPUs), m = N/P; T = the app's timed "
        "section; median over reps per cell, then median over the apps (and P) of a class",
        "settings": {
            "apps": {a: APP_CLASSES[a][args.quick] for a in args.apps},
            "partitions": args.partitions,
            "reps": args.reps,
            "quick": args.quick,
            "foreign_max_pct": FOREIGN_MAX_PCT,
            "retries": RETRIES[args.quick],
        },
        "mpl_points": list(MPL_POINTS),
        "curves": {
            c: {q: [round(s, 4) for s in curve] for q, curve in by_q.items()} for c, by_q in model.curves.items()
        },
        "wall_s": round(wall_s, 1),
        "warnings": run_warnings(runs, args.quick),
        "runs": runs,
        "discarded_runs": discarded,
    }


def write_atomic(path: Path, text: str) -> None:
    """A half-written model must never replace a good one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it private; the model is for every user of the node
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def measure(args: argparse.Namespace, console: Console) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The accepted runs and the ones discarded because the node was busy."""
    specs = plan(args.apps, args.partitions, args.reps, args.quick)
    runs: list[dict[str, Any]] = []
    discarded: list[dict[str, Any]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:  # fmt: skip
        task = progress.add_task("starting", total=len(specs))
        for cpus in args.partitions:
            partition = args.node_cpus[:cpus]
            # A manager that owns exactly P CPUs: a job of P·m ranks with max MPL m gets all of them.
            with Manager(cpus=format_cpu_list(partition)) as manager:
                meter = LoadMeter(partition, manager)
                for spec in (s for s in specs if s.cpus == cpus):
                    progress.update(task, description=spec.label())
                    runs.append(run_measured(manager, meter, spec, args.quick, discarded))
                    progress.advance(task)
    return runs, discarded


def curve_table(model: RuntimeModel) -> Table:
    table = Table(title="folding slowdown s(MPL) = T(N on P) / T(P on P)")
    for col in ("class", "queue", *(f"MPL {m}" for m in MPL_POINTS)):
        table.add_column(col, justify="left" if col in ("class", "queue") else "right")
    for cls, by_q in model.curves.items():
        for queue, curve in by_q.items():
            table.add_row(cls, queue, *(f"{s:.3f}" for s in curve))
    return table


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    unwind_on_sigterm()  # or a SIGTERM leaves the private CPU manager running
    console = Console(stderr=True)
    command = shlex.join(["vmsim-calibrate", *argv])
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    try:
        runs, discarded = measure(args, console)
    except RunFailed as e:
        console.print(f"vmsim-calibrate: run failed, nothing written: {e}", markup=False, highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("vmsim-calibrate: interrupted, nothing written")
        return 130
    except SystemExit:
        console.print("vmsim-calibrate: stopped, nothing written")
        raise
    model = fit((Measurement.from_dict(r) for r in runs), command, date, cpu_model())
    text = json.dumps(document(model, runs, discarded, args, time.monotonic() - t0), indent=1) + "\n"
    warnings = run_warnings(runs, args.quick)
    console.print(curve_table(model))
    for w in warnings:
        console.print(f"warning: {w}", markup=False)
    if args.out is None:
        sys.stdout.write(text)
        console.print(f"not written to a file; `--out {_repo_relative()}` replaces the committed model")
        return 0
    write_atomic(args.out, text)
    console.print(f"wrote {args.out} ({len(runs)} runs, {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
